#!/usr/bin/env bash
# The block-value chain's preview over the whole FFN (metrale bench --chain: every format on its
# chain kernels, BF16 now on the wide tensor-core kernels' chain form; every cell checked against
# chain.project_chain), Qwen3-8B, beside bf16 cuBLAS in the same run.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OPENBLAS_NUM_THREADS=1 timeout 540 python -m metrale.bench --chain --shape qwen3-8b \
  --m 1,2,4,8,16,32,64,256,1024,4096 --formats nvfp4,w4a4,q2_0,fp8,bf16 --peers bf16 --kernels none \
  --cell-seconds 1 --samples 5 --deadline 400 --json $OUT/bench_chain.json --md $OUT/bench_chain.md 2>&1 | tail -40
