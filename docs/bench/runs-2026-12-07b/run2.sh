#!/usr/bin/env bash
# 2026-12-07 (b), device call 2: Nsight Compute of the NVFP4 chain tile at 64 rows (NF = 8: why it
# forms 4.8 T block values/s against NF = 16's 8.9 at prefill) and of the W8A8 FFN at 64 / 256
# rows (why the stream-K GEMMs stream at ~2.2 TB/s; the 256x128 tile's 96 CTAs).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
SEC="--section SchedulerStats --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
MS=64 VARS=chain8 TAG=_ncu8 timeout 150 ncu --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__inst_executed.sum,sm__cycles_active.avg $SEC \
  --launch-count 2 --kernel-name regex:w4c_gemm_f8 python $P > $OUT/ncu_w4c_f8_m64.txt 2>&1
grep -h "stalled_\(dispatch\|wait\|long\|short\|not_sel\|gmma\|barrier\|math\|lg_th\|mio\|no_inst\|branch\|membar\|sleep\|drain\|imc\|tex\)\|inst_executed.sum\|cycles_active.avg\|Issue Slots Busy\|Eligible Warps\|Active Warps Per\|DRAM Throughput\|L2 Cache Throughput\|Duration\|Grid Size\|Waves Per SM" $OUT/ncu_w4c_f8_m64.txt | head -60
timeout 300 python tools/gpu_profile.py --out $OUT --cells w8a8:64,256 2>&1 | tail -2
head -30 $OUT/ncu_summary.md 2>/dev/null
