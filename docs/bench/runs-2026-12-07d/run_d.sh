#!/usr/bin/env bash
# After the FP8_BF16_MMA instance fix: the BF16 chain routing test (both kernels), the generic
# wide chain test, and the tree's FP8 / BF16 tests (fp8_mma with its scale again).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 300 python -m pytest -q -n 8 --tb=short tests/gpu/test_cuda_fp8_bf16.py \
  tests/gpu/test_cuda_chain_generic.py -k "bf16 or wide or fp8" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
