#!/usr/bin/env bash
# The chain decode kernels as CTA rounds (384 threads, a thread per run, the tree over parts
# through shared memory): against the tree kernels first, then every chain gemv test.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
VARS=tree,gemv MS=1,2,3,4 TAG=_rounds timeout 60 python $P 2>&1 | tail -8
METRALE_REQUIRE_GPU=1 timeout 100 python -m pytest -q -x tests/gpu/test_cuda_chain_gemv.py -n 8 -p no:cacheprovider --tb=line 2>&1 | tail -4
