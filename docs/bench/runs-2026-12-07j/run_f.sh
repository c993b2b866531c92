#!/usr/bin/env bash
# Session (j)'s third call: the W8A8 FFN at 64..512 rows, routed (A) against the 128x192 pair from
# 65 rows with the SiLU epilogue on the compact table (D), twice, alternating.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bench() {  # tag, setup python, formats, rows, deadline
timeout $(($5 + 30)) python -c "
import sys; from metrale.cuda import configs, elementwise, w8a8
$2
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '$4', '--formats', '$3', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '$5', '--json', '$OUT/$1.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$1 /"
}
PAIR="configs.W8A8_TMA_PAIR_MAX_ROWS = 64; configs.W8A8_WGMMA_ROUTED['pair'] = (*configs.W8A8_WGMMA_ROUTED['pair'], 'w8a8_wgmma_128x192'); w8a8.FUSED_SILU = True; w8a8.SILU_TILE_ST = True"
for i in 1 2; do
bench d_${i}A "" w8a8 64,96,128,192,256,512 30
bench d_${i}D "$PAIR" w8a8 64,96,128,192,256,512 30
done
python -m metrale.bench --compare $OUT/d_1A.json $OUT/d_1D.json $OUT/d_2A.json $OUT/d_2D.json 2>&1 | tail -7
