#!/usr/bin/env bash
# Where the issue slots go in each tile (after run4/run5 say which is faster): ncu's stall reasons
# per issue and the scheduler statistics of w4c_gemm_f16, w4s_gemm_f16 and w4p_gemm_f16 on gate + up
# at 4096 rows (the metrics of ../runs-2026-12-06d/h200_ncu_chain16_pipelined.txt).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
NCU="ncu --launch-count 1 --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio --section SchedulerStats --section WarpStateStats --section InstructionStats"
MS=4096 VARS=chain16 TAG=_ncu_w4c timeout 150 $NCU --kernel-name w4c_gemm_f16 python $P > $OUT/ncu_w4c.txt 2>&1
SA=w4s MS=4096 VARS=chain16 TAG=_ncu_w4s timeout 150 $NCU --kernel-name w4s_gemm_f16 python $P > $OUT/ncu_w4s.txt 2>&1
SA=w4p MS=4096 VARS=chain16 TAG=_ncu_w4p timeout 150 $NCU --kernel-name w4p_gemm_f16 python $P > $OUT/ncu_w4p.txt 2>&1
grep -h "stalled_\(dispatch\|wait\|long\|short\|not_sel\|gmma\|barrier\|math\)\|Issue Slots Busy\|Eligible Warps\|Active Warps Per" $OUT/ncu_w4*.txt
