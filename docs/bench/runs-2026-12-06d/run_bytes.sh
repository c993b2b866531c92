#!/usr/bin/env bash
# The next block pair's bytes read while this pair's MMAs run (tile_pair_bytes, the chain and tree
# wgmma tiles): the tile GPU tests, then NF = 16 chain and tree tiles; NF = 16 at three stages with
# the counter in local memory (LOCAL=16) now that the MMAs overlap.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 200 python -m pytest -q -n 8 -p no:cacheprovider --tb=line tests/gpu/test_cuda_chain_tile.py tests/gpu/test_cuda_nvfp4_tile.py 2>&1 | tail -4
MS=256,1024,4096 VARS=tree,chain16 TAG=_bytes timeout 100 python $P 2>&1 | tail -6
MS=1024,4096 VARS=chain16 STAGES16=3 LOCAL=16 TAG=_st3local timeout 80 python $P 2>&1 | tail -4
