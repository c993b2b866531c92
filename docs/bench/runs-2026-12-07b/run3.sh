#!/usr/bin/env bash
# 2026-12-07 (b), device call 3: the fast chain decode kernels at 1 / 2 rows against the tree's
# (the switch waits for them to be as fast): CTA size and ring depth (RUN=threads,depth), scale
# copies per slice (SG).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
MS=1,2 VARS=tree,gemv TAG=_dec timeout 60 python $P 2>&1 | grep -v "^ *$" | tail -4
for run in 512,4 512,3 256,5 384,6 128,8; do
  RUN=$run MS=1,2 VARS=gemv TAG=_dec_$run timeout 50 python $P 2>&1 | tail -4
done
SG=1 MS=1,2 VARS=gemv TAG=_dec_sg1 timeout 50 python $P 2>&1 | tail -4
