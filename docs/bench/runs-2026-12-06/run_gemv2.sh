#!/usr/bin/env bash
# The run-design chain decode kernels as built (a run slice copied by four lanes, scales per four
# slices, CTAs of 256 threads with deeper rings) against the routed fast kernels, then the same
# with 512-thread CTAs and three slots (RUN=512,3) and with scales per slice (SG=1); the tests
# of the decode kernels and of the FP8 chain tile (its factors staged).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P=docs/bench/runs-2026-12-05/chain_tile.py
timeout 220 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py tests/gpu/test_cuda_fp8_chain_tile.py --tb=line 2>&1 | tail -5
VARS=tree,gemv MS=1,2,3,4 TAG=_gemv_runs2 timeout 100 python $P 2>&1 | tail -8
RUN=512,3 VARS=gemv MS=1,2,3,4 TAG=_gemv_runs2_512 timeout 90 python $P 2>&1 | tail -8
SG=1 VARS=gemv MS=1,2,3,4 TAG=_gemv_runs2_sg1 timeout 90 python $P 2>&1 | tail -8
ls "$OUT"
