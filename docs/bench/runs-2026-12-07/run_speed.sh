#!/usr/bin/env bash
# Second call: w4c at 256 / 4096 rows with the raster in groups of 8 and 4 row tiles beside the
# one group (tile.ROW_GROUP: does the down projection's lower rate come from its activations,
# 100 MB at 4096 rows, not fitting L2?), w4s / w4p against w4c; then the W8A8 stream-K units of
# 256 weight rows against 128 (single projections by metrale bench --variants, then the FFN).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for g in 0 8 4; do
  METRALE_TILE_ROW_GROUP=$g MS=256,4096 VARS=chain16 TAG=_w4c_g$g timeout 60 python $P 2>&1 | tail -3
done
SA=w4s MS=256,4096 VARS=chain16 TAG=_w4s timeout 60 python $P 2>&1 | tail -3
SA=w4p MS=256,4096 VARS=chain16 TAG=_w4p timeout 60 python $P 2>&1 | tail -3
timeout 150 python -m metrale.bench --variants w8a8-gemm --shape qwen3-8b --m 64,128,256 --json $OUT/w8a8_wide_variants.json 2>&1 | tail -30
for wide in 0 1; do
  METRALE_W8A8_TMA_WIDE=$wide timeout 80 python -m metrale.bench --shape qwen3-8b --m 64,96,128 --formats w8a8 --peers bf16 --kernels none --cell-seconds 1 --samples 5 --json $OUT/w8a8_ffn_wide$wide.json 2>&1 | tail -6
done
