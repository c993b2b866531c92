#!/usr/bin/env bash
# 64 and 256 rows (the 1.0x / 1.5x targets; NF = 8 runs 4.8 T block values/s against 8.9 at
# NF = 16): deeper pipelines (the weights of 64 rows come from DRAM: bytes in flight per
# multiprocessor), the counter in local memory so that six stages fit, two CTAs per SM.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
MS=64,256 VARS=chain8 TAG=_b8s3 timeout 70 python $P 2>&1 | tail -3
BUILDS=8:5:1 MS=64,256 VARS=chain8 TAG=_b8s5 timeout 70 python $P 2>&1 | tail -3
BUILDS=8:6:1 LOCAL=8 MS=64,256 VARS=chain8 TAG=_b8s6l timeout 70 python $P 2>&1 | tail -3
BUILDS=8:3:2 LOCAL=8 MS=64,256 VARS=chain8 TAG=_b8s3c2l timeout 70 python $P 2>&1 | tail -3
