#!/usr/bin/env bash
# The next device call, first: the GPU tests of everything changed after the 2026-12-07 (b) run
# (chain_round_tree / ChainRuns / a16_record in the chain and generic kernels; the W8A8 tile
# kernels' second matrix and 256x192; the SiLU-quantize kernels with 4, 2, 1 CTAs per row).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 330 python -m pytest -q -x -n 8 tests/gpu/test_cuda_chain_generic.py tests/gpu/test_cuda_chain_gemv.py \
  tests/gpu/test_cuda_nvfp4.py 2>&1 | tail -4
timeout 240 python -m pytest -q -x -n 8 tests/gpu/test_cuda_w8a8.py -k "fused or dual or every_tile" 2>&1 | tail -4
