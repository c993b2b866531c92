#!/usr/bin/env bash
# Where the NVFP4 chain tile at 64 rows (w4c_gemm_f8, gate + up; issue slots ~50 % busy at two
# warps per scheduler) and the chain decode at one row (nvfp4_a16fc_r1) stall, per SASS
# instruction: Nsight Compute's source counters (warp-state samples by instruction), exported as
# CSV for reading beside the SASS (cuobjdump of the same build).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
MS=64 VARS=chain8 TAG=_src8 timeout 200 ncu --clock-control none --section SourceCounters --section WarpStateStats --import-source yes \
  --kernel-name w4c_gemm_f8 --launch-count 1 -o $OUT/w4c_f8_m64 python $P 2>&1 | grep -v "^==PROF==" | tail -3
ncu -i $OUT/w4c_f8_m64.ncu-rep --page source --csv --print-source sass > $OUT/w4c_f8_m64_sass.csv 2>&1
MS=1 VARS=gemv TAG=_src1 timeout 120 ncu --clock-control none --section SourceCounters --section WarpStateStats --import-source yes \
  --kernel-name nvfp4_a16fc_r1 --launch-count 1 -o $OUT/a16fc_r1 python $P 2>&1 | grep -v "^==PROF==" | tail -3
ncu -i $OUT/a16fc_r1.ncu-rep --page source --csv --print-source sass > $OUT/a16fc_r1_sass.csv 2>&1
head -c 1500 $OUT/w4c_f8_m64_sass.csv
