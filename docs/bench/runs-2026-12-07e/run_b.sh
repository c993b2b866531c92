#!/usr/bin/env bash
# Cut to the last device minutes of the session: the decode rows' chain kernels' GPU tests, then
# the chain preview and the routed (tree) FFN at m = 1, 2 (Qwen3-8B, beside bf16 cuBLAS), most
# important first.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 110 python -m pytest -q -n 12 --tb=line tests/gpu/test_cuda_chain_generic.py \
  -k "decode or routes_fp8" 2>&1 | grep -E "^FAILED|^E |passed|failed|^/" | head -20
for mode in "--chain" ""; do
OPENBLAS_NUM_THREADS=1 timeout 70 python -m metrale.bench $mode --shape qwen3-8b \
  --m 1,2 --formats nvfp4,q2_0,fp8,bf16 --peers bf16 --kernels none \
  --cell-seconds 0.4 --samples 5 --deadline 55 --json $OUT/dec${mode:+_chain}.json 2>&1 | grep "^| " | head -7
done
