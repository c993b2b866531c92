#!/usr/bin/env bash
# The review commit's shared x-prefetch helpers on a GPU (chain and tree fast decode kernels), then
# the NF = 16 chain tile with the early wgmma (PF, three stages) against two and three stages.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 240 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py tests/gpu/test_cuda_nvfp4.py -n 8 -p no:cacheprovider --tb=line 2>&1 | tail -6
MS=1024,4096 VARS=tree,chain16 TAG=_st2 timeout 90 python $P 2>&1 | tail -4
MS=1024,4096 VARS=chain16 STAGES16=3 TAG=_st3 timeout 90 python $P 2>&1 | tail -3
MS=1024,4096 VARS=chain16 STAGES16=3 PF=16 TAG=_pf timeout 90 python $P 2>&1 | tail -3
