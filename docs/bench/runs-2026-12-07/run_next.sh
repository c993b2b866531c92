#!/usr/bin/env bash
# The next device call, in priority order within one 600 s call: the raster groups on the NVFP4
# chain tile at 4096 rows (the down projection's rate), NF = 8 at 64 / 256 rows with deeper
# pipelines, the FP8 chain tile's speed with its two-fma epilogue, then ncu of NF = 8 at 64 rows
# and of the W8A8 FFN. run_speed.sh / run_small.sh / run_ncu_*.sh are the longer forms.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for g in 0 8 4; do
  METRALE_TILE_ROW_GROUP=$g MS=4096 VARS=chain16 TAG=_w4c_g$g timeout 40 python $P 2>&1 | tail -2
done
MS=64,256 VARS=chain8 TAG=_b8s3 timeout 45 python $P 2>&1 | tail -4
BUILDS=8:6:1 LOCAL=8 MS=64,256 VARS=chain8 TAG=_b8s6l timeout 45 python $P 2>&1 | tail -4
FMT=fp8 MS=8,64,1024,4096 VARS=chain TAG=_2fma timeout 90 python $P 2>&1 | tail -8
SEC="--section SchedulerStats --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis"
MS=64 VARS=chain8 TAG=_ncu8 timeout 120 ncu --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio $SEC \
  --launch-count 2 --kernel-name w4c_gemm_f8 python $P > $OUT/ncu_w4c_f8_m64.txt 2>&1
grep -h "stalled_\(dispatch\|wait\|long\|short\|not_sel\|gmma\|barrier\|math\|lg_th\|mio\|no_inst\)\|Issue Slots Busy\|Eligible Warps\|DRAM Throughput\|L2 Cache Throughput\|Duration" $OUT/ncu_w4c_f8_m64.txt | head -40
timeout 150 python tools/gpu_profile.py --out $OUT --cells w8a8:64,256 2>&1 | tail -2
head -30 $OUT/ncu_summary.md 2>/dev/null
