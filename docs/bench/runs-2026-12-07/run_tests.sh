#!/usr/bin/env bash
# First call: the GPU tests of everything unverified on a GPU — the routed tree tiles and the
# chain tiles with their descriptors in uniform registers (warp_uniform), the shared-A tiles
# (w4s / w4p), and the W8A8 stream-K kernels with 256 weight rows per unit.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 330 python -m pytest -q -n 8 -p no:cacheprovider --tb=line \
  tests/gpu/test_cuda_nvfp4_tile.py tests/gpu/test_cuda_chain_tile.py tests/gpu/test_cuda_fp8_chain_tile.py 2>&1 | tail -8
METRALE_REQUIRE_GPU=1 timeout 200 python -m pytest -q -n 8 -p no:cacheprovider --tb=line \
  tests/gpu/test_cuda_w8a8.py -k "tma or dual or routing" 2>&1 | tail -5
