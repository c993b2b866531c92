#!/usr/bin/env bash
# The chain decode kernels at R = 1, 2 without the P/Q block dot (nib8_codes_k + block_dot_codes,
# as R = 3, 4), against the tree kernels.
export PYTHONPATH=.
D=docs/bench/runs-2026-12-06b
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
VARS=tree,gemv MS=1,2 TAG=_nopq timeout 100 python $D/patched.py nvfp4_gemv.cu \
  "NVFP4_A16F(1, 6, true, true, fc)" "NVFP4_A16F(1, 6, false, true, fc)" \
  "NVFP4_A16F(2, 6, true, true, fc)" "NVFP4_A16F(2, 6, false, true, fc)" $P 2>&1 | tail -4
