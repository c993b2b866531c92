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
# Where the chain decode loses against the tree's at one row: Nsight of both kernels (gate + up
# and down), stall reasons, issue, DRAM.
SEC="--section SchedulerStats --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy"
MS=1 VARS=tree,gemv TAG=_ncu1 timeout 150 ncu --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__inst_executed.sum,sm__cycles_active.avg \
  $SEC --kernel-name regex:"nvfp4_a16fc?_r1" --launch-count 4 python $P > $OUT/ncu_dec_m1.txt 2>&1
grep -h "nvfp4_a16\|stalled_\(long\|short\|wait\|not_sel\|barrier\|no_inst\|lg_th\|mio\|dispatch\|math\|branch\)\|inst_executed.sum\|cycles_active.avg\|Issue Slots Busy\|Eligible Warps\|DRAM Throughput\|Duration" $OUT/ncu_dec_m1.txt | head -80
