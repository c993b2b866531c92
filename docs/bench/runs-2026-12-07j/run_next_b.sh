#!/usr/bin/env bash
# The next session's second call, on an H200: the routed NVFP4 / W4A4 / Q2_0 / FP8 / BF16 FFNs
# where session (j) changed the routing (decode rows: the kernels' first weights before the PDL
# wait; 1024 / 4096 rows: act_mul_st), about 5 minutes.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 400 python -m metrale.bench --shape qwen3-8b --m 1,2,3,1024,4096 --formats nvfp4,w4a4,q2_0,fp8,bf16 \
  --peers bf16 --kernels none --cell-seconds 1 --samples 5 --deadline 360 \
  --json $OUT/routed_j.json --md $OUT/routed_j.md 2>&1 | grep -E "^\| (NVFP4|Q2_0|FP8|BF16|peer)|rror"
