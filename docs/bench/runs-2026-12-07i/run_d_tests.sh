#!/usr/bin/env bash
# The GPU tests of run_d.sh's early weight loads (about 3 minutes): each kernel file rebuilt with
# its define, the existing bit-exact checks.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 300 python -m pytest -q -n 8 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_gemv.py \
  tests/gpu/test_cuda_nvfp4.py tests/gpu/test_cuda_q2_0.py tests/gpu/test_cuda_chain_generic.py \
  tests/gpu/test_cuda_fp8_bf16.py -k "ring_early or w_early" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -12
