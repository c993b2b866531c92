#!/usr/bin/env bash
# The tile side of the part-size probe (any H100 / H200; about 8 minutes): the chain tile's GPU
# tests with parts of 1 and 2 steps, then the NVFP4 chain tile (routed NF) at Qwen3-8B 256 / 1024
# / 4096 rows with parts of 8 (the revision's 64 blocks), 2 and 1 steps: µs per projection and
# block values per second (../runs-2026-12-05/chain_tile.py; each checked against project_chain at
# its part size). Run after run_d.sh says whether the 8-block decode kernels reach the tree's.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 2 --tb=line -p no:benchmark tests/gpu/test_cuda_chain_tile.py \
  -k smaller_parts 2>&1 | grep -E "^FAILED|^E |passed|failed|rror" | head -10
for p in 8 2 1; do
PART=$p TAG=_part$p MS=256,1024,4096 VARS=chain timeout 110 python docs/bench/runs-2026-12-05/chain_tile.py 2>&1 \
  | grep -E "^(gateup|down)|rror" | sed "s/^/part$p /"
done
