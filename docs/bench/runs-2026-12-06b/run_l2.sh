#!/usr/bin/env bash
# The chain decode kernels' weight copies with the L2 asked for 256 bytes per request (the
# default now), for 128, and for none (the sectors asked for), beside the tree kernels.
export PYTHONPATH=.
D=docs/bench/runs-2026-12-06b
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 120 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py -k "G1 or extreme" -n 8 -p no:cacheprovider --tb=line 2>&1 | tail -3
VARS=tree,gemv MS=1,2,3,4 TAG=_l2_256 timeout 100 python $P 2>&1 | tail -8
VARS=gemv MS=1,2,3,4 TAG=_l2_128 timeout 90 python $D/patched.py nvfp4_gemv.cu "global.L2::256B" "global.L2::128B" $P 2>&1 | tail -8
VARS=gemv MS=1,2,3,4 TAG=_l2_none timeout 90 python $D/patched.py nvfp4_gemv.cu "global.L2::256B" "global" $P 2>&1 | tail -8
