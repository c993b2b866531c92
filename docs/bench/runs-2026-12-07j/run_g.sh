#!/usr/bin/env bash
# Session (j)'s fourth call, after routing the W8A8 changes (configs at commit 227493d): the W8A8,
# layer, PDL, launch-argument and all-rows GPU tests, then the routed W8A8 FFN at 64..4096 rows.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 260 python -m pytest -q -n 8 --tb=line -p no:benchmark tests/gpu/test_cuda_w8a8.py tests/gpu/test_cuda_layer.py \
  tests/gpu/test_cuda_pdl.py tests/gpu/test_cuda_launch_args.py tests/gpu/test_cuda_all_rows.py 2>&1 \
  | grep -E "^FAILED|^E |passed|failed|rror" | head -20
timeout 150 python -m metrale.bench --shape qwen3-8b --m 64,128,256,512,1024,4096 --formats w8a8 --peers bf16 \
  --kernels none --cell-seconds 0.5 --samples 5 --deadline 110 --json $OUT/final_w8a8.json 2>&1 | grep -E "^\| (W8A8 \(|peer)|rror"
