#!/usr/bin/env bash
# The chain tile's counter over parts in local memory (configs.TILE_CHAIN_LOCAL): the chain tests,
# the fast decode kernels on the chain (nvfp4_a16fc_r*) against the routed ones and the chain tile
# at m = 1..4, then NF = 16 at two stages with the shared counter (the earlier build) against
# three stages with the local counter.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P=docs/bench/runs-2026-12-05/chain_tile.py
timeout 240 python -m pytest -q -x tests/gpu/test_cuda_chain_gemv.py tests/gpu/test_cuda_chain_tile.py tests/gpu/test_cuda_fp8_chain_tile.py 2>&1 | tail -4
VARS=tree,gemv,chain MS=1,2,3,4 TAG=_gemv timeout 100 python $P 2>&1 | tail -8
TAG=_s2shared STAGES16=2 LOCAL= VARS=chain16 MS=256,1024,4096 timeout 80 python $P 2>&1 | tail -6
TAG=_s3local VARS=chain16 MS=256,1024,4096 timeout 80 python $P 2>&1 | tail -6
ls "$OUT"
