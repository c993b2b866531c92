#!/usr/bin/env bash
# The fast decode kernels on the chain as runs (nvfp4_run_body): exactness, then m = 1..4 against
# the routed fast kernels and the chain tile; the FP8 chain tile with its staged factors.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P=docs/bench/runs-2026-12-05/chain_tile.py
timeout 200 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py --tb=line 2>&1 | tail -12
VARS=tree,gemv MS=1,2,3,4 TAG=_gemv_runs timeout 100 python $P 2>&1 | tail -8
FMT=fp8 VARS=tree,chain MS=8,64,256,4096 timeout 150 python $P 2>&1 | tail -8
ls "$OUT"
