#!/usr/bin/env bash
# act_mul_st below its routed 1024 rows (the step alone was Python-timed and misleading there: it
# read slower at 1024 rows where the FFNs were 1-2 % faster): the NVFP4 and Q2_0 FFNs at 128 /
# 256 / 512 rows with act_mul_st from 128 rows (S) against routed (R), twice, alternating,
# about 4 minutes.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for run in 1R 1S 2R 2S; do
timeout 100 python -c "
import sys; from metrale.cuda import elementwise
if '${run:1}' == 'S': elementwise.ST_MIN_ROWS = 128
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '128,256,512', '--formats', 'nvfp4,q2_0', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '80', '--json', '$OUT/am_$run.json'],
  prog='bench'))
" 2>&1 | grep -E "^\| (NVFP4 W4A16 \(|Q2_0 \(|peer)|Error|error" | sed "s/^/$run /"
done
python -m metrale.bench --compare $OUT/am_1R.json $OUT/am_1S.json $OUT/am_2R.json $OUT/am_2S.json 2>&1 | tail -7
