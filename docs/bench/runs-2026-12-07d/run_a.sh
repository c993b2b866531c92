#!/usr/bin/env bash
# The GPU tests of everything built since the last device run (the chain decode kernels with
# their copy sources formed once per round; BF16 on the wide tensor-core kernels' chain form,
# bf16c_mma_nt* / bf16c_gemm_*; the window test), then the chain decode at 1..4 rows against the
# tree's (two runs).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -x -n 8 tests/gpu/test_cuda_chain_gemv.py tests/gpu/test_cuda_chain_generic.py \
  "tests/gpu/test_cuda_fp8_chain_tile.py::test_fp8_prep_marks_the_window" 2>&1 | tail -3
for i in 1 2; do MS=1,2,3,4 VARS=tree,gemv TAG=_dec_$i timeout 60 python docs/bench/runs-2026-12-05/chain_tile.py 2>&1 | grep "{"; done
