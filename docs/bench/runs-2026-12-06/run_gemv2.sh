#!/usr/bin/env bash
# The run-design chain decode kernels with the warp copying each run slice by four lanes; the
# FP8 chain tile tests (factors staged with each step).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P=docs/bench/runs-2026-12-05/chain_tile.py
timeout 220 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py tests/gpu/test_cuda_fp8_chain_tile.py --tb=line 2>&1 | tail -5
VARS=tree,gemv MS=1,2,3,4 TAG=_gemv_coop timeout 100 python $P 2>&1 | tail -8
ls "$OUT"
