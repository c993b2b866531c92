#!/usr/bin/env bash
# run_c.sh cut to the session's last device minutes: the W8A8 fused SiLU tile's GPU tests, the
# W8A8 FFN with it and without at 256 / 1024 / 4096 rows, then Q2_0's chain decode tests.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 130 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_w8a8.py \
  -k "dual_silu_quant or prefill_chunks" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -20
for f in 1 0; do
METRALE_W8A8_FUSED_SILU=$f OPENBLAS_NUM_THREADS=1 timeout 50 python -m metrale.bench --shape qwen3-8b \
  --m 256,1024,4096 --formats w8a8 --peers bf16 --kernels none \
  --cell-seconds 0.5 --samples 5 --deadline 38 --json $OUT/w8a8_fused$f.json 2>&1 | grep "^| " | head -4
done
timeout 90 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  -k "decode_q2_0" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -20
