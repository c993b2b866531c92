#!/usr/bin/env bash
# The fast chain decode kernels at 1 / 2 rows with two CTAs per multiprocessor (16 warps per SM as
# the tree's kernels have; configs.NVFP4_RUN_CTAS_PER_SM) against the tree's.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
MS=1,2 VARS=tree,gemv TAG=_dec2 timeout 60 python $P 2>&1 | grep "{"
for run in 256,3,2 192,4,2 128,6,2; do
  echo "RUN=$run"; RUN=$run MS=1,2 VARS=gemv TAG=_dec_c2_${run//,/_} timeout 45 python $P 2>&1 | grep "{"
done
