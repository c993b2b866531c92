#!/usr/bin/env bash
# GPU tests, most important first: W8A8's gate + up with the SiLU step in the pair tile's epilogue
# (w8a8_gemv_dual_silu_quant, w8a8_wgmma_silu_*) and the W8A8 kernels around it; then Q2_0's
# chain decode kernels (q2c_dec_*, q2cp_dec_*: session (e)'s run_c tests) and the chain routing.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_w8a8.py \
  -k "dual or silu or layer" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
timeout 200 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  -k "decode_q2_0 or routes" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
