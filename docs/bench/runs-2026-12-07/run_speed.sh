#!/usr/bin/env bash
# The raster groups (tile.ROW_GROUP): w4c at 256 / 1024 / 4096 rows in groups of 8 and 4 row
# tiles beside one group (does the down projection's lower rate come from its activations, 100 MB
# at 4096 rows, not fitting the L2?), and Q2_0 / FP8 at 4096 rows the same way.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for g in 0 8 4; do
  METRALE_TILE_ROW_GROUP=$g MS=256,1024,4096 VARS=chain16 TAG=_w4c_g$g timeout 80 python $P 2>&1 | tail -6
done
for g in 0 8; do
  METRALE_TILE_ROW_GROUP=$g FMT=q2_0 MS=4096 VARS=chain16 TAG=_q2_g$g timeout 60 python $P 2>&1 | tail -2
  METRALE_TILE_ROW_GROUP=$g FMT=fp8 MS=64,4096 VARS=chain TAG=_fp8_g$g timeout 90 python $P 2>&1 | tail -4
done
