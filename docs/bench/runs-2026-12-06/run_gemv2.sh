#!/usr/bin/env bash
# The run-design chain decode kernels with the warp copying each run slice by four lanes.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P=docs/bench/runs-2026-12-05/chain_tile.py
timeout 150 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py --tb=line 2>&1 | tail -5
VARS=tree,gemv MS=1,2,3,4 TAG=_gemv_coop timeout 100 python $P 2>&1 | tail -8
ls "$OUT"
