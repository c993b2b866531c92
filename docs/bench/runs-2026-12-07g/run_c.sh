#!/usr/bin/env bash
# The fused entry's failing case (w8a8_gemv_dual_silu_quant, out rows off 16 bytes: a misaligned
# address) with launches blocking, its locals in the log; then the checks of the routing change
# (Q2_0's q2cp_dec_r1 routed at one row, the mul.hi variant removed).
export PYTHONPATH=.
CUDA_LAUNCH_BLOCKING=1 timeout 90 python -m pytest -q -x -l --tb=long -p no:benchmark tests/gpu/test_cuda_w8a8.py \
  -k "dual_silu_quant_matches_reference and routed-off16" > $OUT/off16.log 2>&1
grep -nE "^(m|n|k|tile|aligned|rep|pick|grid|kern|name) +=|^[a-z_/]+\.py:[0-9]+|Error|passed|failed" $OUT/off16.log | head -40
timeout 55 python -m pytest -q -n 8 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  -k "routes_fp8_and_q2_0 or decode_q2_0" 2>&1 \
  | grep -E "^FAILED|^E |passed|failed" | head -20
