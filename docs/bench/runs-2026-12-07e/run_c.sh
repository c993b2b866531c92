#!/usr/bin/env bash
# Not yet run. Q2_0's decode kernels' chain form (q2c_dec_*: the tree kernels' lane layout, the
# term pairs into per-warp shared memory, one lane per (row, column) chaining the chunk's two
# parts, the counter over parts): its GPU tests and the routing tests; then the chain and the
# routed (tree) FFN at 1..3 rows beside bf16 cuBLAS.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  -k "decode or routes or generic_q2" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
for mode in "--chain" ""; do
OPENBLAS_NUM_THREADS=1 timeout 120 python -m metrale.bench $mode --shape qwen3-8b \
  --m 1,2,3 --formats nvfp4,q2_0,fp8,bf16 --peers bf16 --kernels none \
  --cell-seconds 0.5 --samples 5 --deadline 100 --json $OUT/dec3${mode:+_chain}.json 2>&1 | grep "^| " | head -7
done
