#!/usr/bin/env bash
# The decode rows' chain kernels ({fp8,bf16}c_dec_*, q2c_dec_*): their GPU tests and the chain
# routing tests; then decode rows on the same GPU: the routed (tree) FFN and its chain preview
# at m = 1, 2, 3 beside bf16 cuBLAS (what "m = 1..3 no slower than today" is measured against
# before the switch), the NVFP4 chain decode kernels now requesting their first weights before
# pdl_wait. Cut to the device time left.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 130 python -m pytest -q -n 12 --tb=short tests/gpu/test_cuda_chain_generic.py \
  -k "decode or routes_fp8" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
for mode in "" "--chain"; do
OPENBLAS_NUM_THREADS=1 timeout 95 python -m metrale.bench $mode --shape qwen3-8b \
  --m 1,2,3 --formats nvfp4,q2_0,fp8,bf16 --peers bf16 --kernels none \
  --cell-seconds 0.5 --samples 5 --deadline 80 --json $OUT/dec${mode:+_chain}.json 2>&1 | grep "^| " | head -7
done
# the NVFP4 chain decode kernels with the ring's first slices before pdl_wait
timeout 100 python -m pytest -q -n 12 --tb=short tests/gpu/test_cuda_chain_gemv.py 2>&1 \
  | grep -E "^FAILED|^E |passed|failed" | head -10
