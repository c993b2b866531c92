#!/usr/bin/env bash
# act_mul with the compact table in shared memory over whole FFNs (about 5 minutes): NVFP4 and
# Q2_0 on the chain revision's kernels (metrale bench --chain) at 64..4096 rows with act_mul_st
# from 64 rows (S) and without (R), twice, alternating.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for run in 1R 1S 2R 2S; do
timeout 100 python -c "
import sys; from metrale.cuda import elementwise
if '${run:1}' == 'S': elementwise.ST_MIN_ROWS = 64
from metrale.bench.run import main
sys.exit(main(['--chain', '--shape', 'qwen3-8b', '--m', '64,256,1024,4096', '--formats', 'nvfp4,q2_0', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '75', '--json', '$OUT/act_$run.json'],
  prog='bench'))
" 2>&1 | grep -E "^\| (NVFP4 W4A16 \(chain\) \(|Q2_0 \(chain\) \(|peer)|Error|error" | sed "s/^/$run /"
done
python -m metrale.bench --compare $OUT/act_1R.json $OUT/act_1S.json $OUT/act_2R.json $OUT/act_2S.json 2>&1 | tail -10
