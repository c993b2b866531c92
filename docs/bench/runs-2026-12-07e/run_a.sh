#!/usr/bin/env bash
# The decode kernels' chain form ({fp8,bf16}c_dec_*): its GPU tests and the chain routing tests,
# the tree's decode tests; then decode rows on the same GPU: the routed (tree) FFN and its chain
# preview at m = 1, 2, 3, every block-scaled and overlay format, beside bf16 cuBLAS (what
# "m = 1..3 no slower than today" is measured against before the switch).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 8 --tb=short tests/gpu/test_cuda_chain_generic.py \
  -k "decode or wide or routes_fp8 or generic_q2" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
timeout 100 python -m pytest -q -n 8 --tb=short tests/gpu/test_cuda_fp8_bf16.py -k decode 2>&1 \
  | grep -E "^FAILED|^E |passed|failed" | head -10
for mode in "" "--chain"; do
OPENBLAS_NUM_THREADS=1 timeout 140 python -m metrale.bench $mode --shape qwen3-8b \
  --m 1,2,3 --formats nvfp4,w4a4,q2_0,fp8,bf16 --peers bf16 --kernels none \
  --cell-seconds 1 --samples 5 --deadline 120 --json $OUT/dec${mode:+_chain}.json 2>&1 | grep "^| " | head -9
done
