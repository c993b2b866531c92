#!/usr/bin/env bash
# The next device call (not yet run: the session's device time went to failed starts): the chain
# decode kernels with their copy sources formed once per round (dead copies skipped) and
# nib8_codes_k's tables loaded into registers (nvfp4.cuh nvfp4_run_body, nib_consts_loaded):
# their GPU tests, the window test whose data was fixed, then 1..4 rows against the tree's.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python -m pytest -q -x -n 8 tests/gpu/test_cuda_chain_gemv.py tests/gpu/test_cuda_chain_generic.py \
  "tests/gpu/test_cuda_fp8_chain_tile.py::test_fp8_prep_marks_the_window" 2>&1 | tail -2
for i in 1 2; do MS=1,2,3,4 VARS=tree,gemv TAG=_dec_$i timeout 60 python docs/bench/runs-2026-12-05/chain_tile.py 2>&1 | grep "{"; done
