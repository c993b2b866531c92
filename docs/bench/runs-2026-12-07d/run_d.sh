#!/usr/bin/env bash
# After the FP8_BF16_MMA instance fix and the Q2_0 / FP8 chain tile from one row: the chain
# routing tests (BF16 both kernels; FP8 and Q2_0 at 1..40 rows), the generic wide chain test,
# the tree's FP8 / BF16 tests (fp8_mma with its scale again); then the chain FFN at 1 / 4 rows.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 170 python -m pytest -q -n 8 --tb=short tests/gpu/test_cuda_fp8_bf16.py \
  tests/gpu/test_cuda_chain_generic.py -k "bf16 or wide or fp8 or q2" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
OPENBLAS_NUM_THREADS=1 timeout 90 python -m metrale.bench --chain --shape qwen3-8b \
  --m 1,4 --formats q2_0,fp8,bf16 --peers bf16 --kernels none \
  --cell-seconds 1 --samples 5 --deadline 60 --json $OUT/bench_chain_small.json 2>&1 | grep "^| "
