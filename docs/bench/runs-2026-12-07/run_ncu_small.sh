#!/usr/bin/env bash
# Why NF = 8 at 64 rows forms 4.8 T block values/s: ncu's stall reasons, scheduler statistics,
# speed of light and memory workload of w4c_gemm_f8 (gate + up, the first launch) and of the
# down projection's launch, beside NF = 16 at 4096 rows for the same metrics.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
SEC="--section SchedulerStats --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy"
NCU="ncu --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio $SEC"
MS=64 VARS=chain8 TAG=_ncu8 timeout 200 $NCU --launch-count 2 --kernel-name w4c_gemm_f8 python $P > $OUT/ncu_w4c_f8_m64.txt 2>&1
MS=4096 VARS=chain16 TAG=_ncu16 timeout 200 $NCU --launch-count 2 --kernel-name w4c_gemm_f16 python $P > $OUT/ncu_w4c_f16_m4096.txt 2>&1
grep -h "stalled_\(dispatch\|wait\|long\|short\|not_sel\|gmma\|barrier\|math\|lg_th\|mio\|no_inst\)\|Issue Slots Busy\|Eligible Warps\|Active Warps Per\|DRAM Throughput\|L2 Cache Throughput\|Duration\|Compute (SM) Throughput\|Memory Throughput" $OUT/ncu_w4c_*.txt
