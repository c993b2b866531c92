#!/usr/bin/env bash
# The run-design chain decode kernels with the warp copying each run slice by four lanes, scales
# per 4 slices (configs) and per slice (SG=1); the FP8 chain tile tests (factors staged).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P=docs/bench/runs-2026-12-05/chain_tile.py
timeout 220 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py tests/gpu/test_cuda_fp8_chain_tile.py --tb=line 2>&1 | tail -5
VARS=tree,gemv MS=1,2,3,4 TAG=_gemv_coop timeout 100 python $P 2>&1 | tail -8
SG=1 VARS=gemv MS=1,2,3,4 TAG=_gemv_coop_sg1 timeout 90 python $P 2>&1 | tail -8
ls "$OUT"
