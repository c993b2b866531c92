#!/usr/bin/env bash
# The first device call of the session: the probes that decide the next design (ws_probe: a
# warp-specialised tile and a shared decoded A against the present loop; rf_probe: FFMAs beside
# a wgmma in flight, A in registers or shared memory), then the FP8 chain tile's two-fma
# epilogue on the GPU (runs-2026-12-06d/run_next.sh's first part: its tests, then its speed).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 90 python docs/bench/runs-2026-12-06e/ws_probe.py 2>&1 | tail -5
timeout 60 python docs/bench/runs-2026-12-06d/rf_probe.py 2>&1 | tail -5
P=docs/bench/runs-2026-12-05/chain_tile.py
METRALE_REQUIRE_GPU=1 timeout 240 python -m pytest -q -n 8 -p no:cacheprovider --tb=line tests/gpu/test_cuda_fp8_chain_tile.py tests/gpu/test_fp8_limb_block_dot.py 2>&1 | tail -4
FMT=fp8 MS=8,64,1024,4096 VARS=chain TAG=_2fma timeout 150 python $P 2>&1 | tail -8
