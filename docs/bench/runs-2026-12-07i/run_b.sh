#!/usr/bin/env bash
# The SiLU-quantize step with the compact SiLU table in shared memory (w8a8_silu_quant_st,
# persistent CTAs; w8a8.SILU_ST_MIN_ROWS routes it), about 5 minutes: its GPU tests (every SiLU
# path's fused-entry tests, the row loop), then the W8A8 FFN at 64..4096 rows routed (R) and with
# it from 33 rows (S), twice, alternating; then Nsight Compute of both steps at 256 rows.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python -m pytest -q -n 8 --tb=short -p no:benchmark tests/gpu/test_cuda_w8a8.py \
  -k "silu_quant or fused_large_k or st_loops" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -12
for run in 1R 1S 2R 2S; do
timeout 90 python -c "
import sys; from metrale.cuda import w8a8
if '${run:1}' == 'S': w8a8.SILU_ST_MIN_ROWS = 33
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '64,128,256,1024,4096', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '60', '--json', '$OUT/st_$run.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$run /"
done
