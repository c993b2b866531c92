#!/usr/bin/env bash
# The activation step with the compact table in shared memory (about 7 minutes): the GPU tests
# of w8a8_silu_quant_st (every SiLU path's fused-entry tests, the row loop) and act_mul_st; the
# steps alone (act_time.py: whole table against compact, bits compared); then the W8A8 FFN at
# 64..4096 rows routed (R) and with w8a8_silu_quant_st from 33 rows (S), twice, alternating.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python -m pytest -q -n 8 --tb=short -p no:benchmark tests/gpu/test_cuda_w8a8.py tests/gpu/test_cuda_nvfp4.py \
  -k "silu_quant or fused_large_k or st_loops or act_mul" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -12
timeout 90 python "$(dirname "$0")/act_time.py" 2>&1 | tail -12
for run in 1R 1S 2R 2S; do
timeout 80 python -c "
import sys; from metrale.cuda import w8a8
if '${run:1}' == 'S': w8a8.SILU_ST_MIN_ROWS = 33
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '64,128,256,1024,4096', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '60', '--json', '$OUT/st_$run.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$run /"
done
python -m metrale.bench --compare $OUT/st_1R.json $OUT/st_1S.json $OUT/st_2R.json $OUT/st_2S.json 2>&1 | tail -8
