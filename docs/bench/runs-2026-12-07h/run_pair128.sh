#!/usr/bin/env bash
# W8A8 gate + up at 65..128 rows (about 3 minutes): the routed stream-K pair (A) against one
# launch of the 128x192 tile pair (B: configs.W8A8_TMA_PAIR_MAX_ROWS = 64, the tile added to
# W8A8_WGMMA_ROUTED["pair"]; w8a8.gemm_tile then picks it to 128 rows, 256x192 beyond) and the
# same tile with the SiLU step in its epilogue (C: w8a8.FUSED_SILU), twice, alternating.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for run in 1A 1B 1C 2A 2B 2C; do
OPENBLAS_NUM_THREADS=1 timeout 45 python -c "
import sys; from metrale.cuda import configs, w8a8
v = '${run:1}'
if v in 'BC':
    configs.W8A8_TMA_PAIR_MAX_ROWS = 64
    configs.W8A8_WGMMA_ROUTED['pair'] = (*configs.W8A8_WGMMA_ROUTED['pair'], 'w8a8_wgmma_128x192')
w8a8.FUSED_SILU = v == 'C'
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '80,96,112,128', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '30', '--json', '$OUT/pair128_$run.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)" | sed "s/^/$run /"
done
