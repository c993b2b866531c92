#!/usr/bin/env bash
# w4s_gemm_f16 (one decoded weight tile per CTA, A from shared memory; configs.TILE_CHAIN_SHARED_A):
# its GPU tests against project_chain, then its speed beside w4c_gemm_f16 (chain16) at 256..4096 rows.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 300 python -m pytest -q -n 8 -p no:cacheprovider --tb=line tests/gpu/test_cuda_chain_tile.py -k shared_a 2>&1 | tail -5
MS=256,1024,4096 VARS=chain16 TAG=_w4c timeout 100 python $P 2>&1 | tail -6
SA=w4s MS=256,1024,4096 VARS=chain16 TAG=_w4s timeout 100 python $P 2>&1 | tail -6
SA=w4p MS=256,1024,4096 VARS=chain16 TAG=_w4p timeout 100 python $P 2>&1 | tail -6
