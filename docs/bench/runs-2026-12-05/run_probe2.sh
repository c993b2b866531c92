#!/usr/bin/env bash
# Second call: Q2_0 on the chain tile, NF = 16 with three stages, the prefetching variant.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
FMT=q2_0 VARS=tree,chain MS=1,8,16,64,256,1024,4096 timeout 150 python $P 2>&1 | tail -16
STAGES16=3 TAG=_s3 VARS=chain16 MS=256,1024,4096 timeout 100 python $P 2>&1 | tail -6
STAGES16=3 PF=8,16 TAG=_pf VARS=chain8,chain16 MS=256,1024,4096 timeout 120 python $P 2>&1 | tail -6
