#!/usr/bin/env bash
# The chain decode kernels with part-major run slots (four wavefronts per record load whatever Q)
# and the L2 asked for 128 bytes per weight copy: every chain gemv test, then against the tree.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 150 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py -n 8 -p no:cacheprovider --tb=line 2>&1 | tail -4
VARS=tree,gemv MS=1,2,3,4 TAG=_pm timeout 100 python $P 2>&1 | tail -8
