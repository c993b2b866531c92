#!/usr/bin/env bash
# Small row counts (m = 64, 256: the 1.0x / 1.5x targets), where the chain tile runs NF = 8 at
# 4.8 T block values/s against 8.9 at prefill: deeper pipelines or two CTAs per multiprocessor
# for NF = 8 and NF = 4 (configs.TILE_CHAIN_BUILDS through chain_tile.py's BUILDS).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
MS=64,256 VARS=chain8,chain TAG=_b8s3 timeout 100 python $P 2>&1 | tail -3
BUILDS=8:4:1 MS=64,256 VARS=chain8 TAG=_b8s4 timeout 100 python $P 2>&1 | tail -3
BUILDS=8:2:2 MS=64,256 VARS=chain8 TAG=_b8s2c2 timeout 100 python $P 2>&1 | tail -3
BUILDS=8:3:2 MS=64,256 VARS=chain8 TAG=_b8s3c2 timeout 100 python $P 2>&1 | tail -3
BUILDS=4:4:2 MS=64 VARS=chain TAG=_b4s4c2 timeout 100 python $P 2>&1 | tail -3
MS=256,1024,4096 VARS=chain16 LOCAL=16 TAG=_s2local timeout 100 python $P 2>&1 | tail -6
