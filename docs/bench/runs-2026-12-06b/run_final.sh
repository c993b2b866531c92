#!/usr/bin/env bash
# The chain decode kernels as committed (part-major runs, no P/Q dot): every chain gemv test.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 150 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py -n 8 -p no:cacheprovider --tb=line 2>&1 | tail -4
