#!/usr/bin/env bash
# The chain decode kernels with the x of each thread's first three blocks requested before the
# ring (as the tree kernels' prologue), one lane per run: tests, then against the tree kernels at
# 256 threads (depths 6/6/5/5), ring depth 8, 384 and 192 threads.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 200 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py -n 8 -p no:cacheprovider --tb=line 2>&1 | tail -4
VARS=tree,gemv MS=1,2,3,4 TAG=_pre timeout 100 python $P 2>&1 | tail -8
RUN=256,8 VARS=gemv MS=1,2,3,4 TAG=_pre_d8 timeout 90 python $P 2>&1 | tail -8
RUN=384,5 VARS=gemv MS=1,2,3,4 TAG=_pre_384 timeout 90 python $P 2>&1 | tail -8
RUN=192,8 VARS=gemv MS=1,2,3,4 TAG=_pre_192 timeout 90 python $P 2>&1 | tail -8
