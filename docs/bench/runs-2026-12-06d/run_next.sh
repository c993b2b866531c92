#!/usr/bin/env bash
# Ready for the next device call (written when this session's device time ran out): the FP8
# chain tile's two-fma epilogue (bb6bb40: its GPU tests, then the probe against
# h200_chain_tile_fp8_inl.json), and NF = 16 at two stages with the counter in local memory
# (LOCAL=16: the down projection's K = 12288 in one CTA part, no partials or mma_finish).
# The early read of the next pair's bytes (4a9a86f, reverted) runs from its own commit:
# git cherry-pick 4a9a86f, then its run_bytes.sh. rf_probe.py: whether a wgmma in flight slows the
# FFMAs beside it (the dispatch stalls of the NF = 16 loop).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 240 python -m pytest -q -n 8 -p no:cacheprovider --tb=line tests/gpu/test_cuda_fp8_chain_tile.py tests/gpu/test_fp8_limb_block_dot.py 2>&1 | tail -4
FMT=fp8 MS=8,64,1024,4096 VARS=chain TAG=_2fma timeout 150 python $P 2>&1 | tail -8
MS=256,1024,4096 VARS=chain16 LOCAL=16 TAG=_s2local timeout 100 python $P 2>&1 | tail -6
timeout 60 python docs/bench/runs-2026-12-06d/rf_probe.py 2>&1 | tail -5
