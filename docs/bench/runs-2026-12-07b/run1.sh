#!/usr/bin/env bash
# 2026-12-07 (b), device call 1: the generic chain kernels' GPU tests (NVFP4 A16 / A4, Q2_0, FP8,
# BF16, and the routing under tile.CHAIN), then run_next.sh's speeds (raster groups at 4096 rows,
# NF = 8 at six stages with the local counter, the FP8 chain tile's two-fma speed).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 290 python -m pytest -q -x -n 8 tests/gpu/test_cuda_chain_generic.py 2>&1 | tail -25
P=docs/bench/runs-2026-12-05/chain_tile.py
for g in 0 8 4; do
  METRALE_TILE_ROW_GROUP=$g MS=4096 VARS=chain16 TAG=_w4c_g$g timeout 40 python $P 2>&1 | tail -2
done
BUILDS=8:6:1 LOCAL=8 MS=64,256 VARS=chain8 TAG=_b8s6l timeout 45 python $P 2>&1 | tail -4
FMT=fp8 MS=8,64,1024,4096 VARS=chain TAG=_2fma timeout 80 python $P 2>&1 | tail -8
