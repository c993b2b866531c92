#!/usr/bin/env bash
# A call of under 10 minutes, the decisions first: the W8A8 FFN at 96 / 128 / 256 rows with gate +
# up on the routed pair (A: stream-K to 128 rows, the 256x192 tile beyond), the 128x192 tile pair
# from 65 rows (B), that with the SiLU step in the tiles' epilogue (C), and that with the
# epilogue's SiLU table compact in shared memory (D: w8a8.SILU_TILE_ST)
# (../runs-2026-12-07h/run_pair128.sh's variants and D); the
# stream-K build with 2 K tiles per unit (T) against the routed one (R) at 64..256 rows
# (../runs-2026-12-07h/run_tks.sh's variant, benchmark only: every cell is checked bit for bit
# against the reference; its GPU tests run where it wins), once each.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bench() {  # tag, setup python, rows, deadline
timeout $(($4 + 25)) python -c "
import sys; from metrale.cuda import configs, w8a8
$2
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '$3', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '$4', '--json', '$OUT/$1.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$1 /"
}
PAIR="configs.W8A8_TMA_PAIR_MAX_ROWS = 64; configs.W8A8_WGMMA_ROUTED['pair'] = (*configs.W8A8_WGMMA_ROUTED['pair'], 'w8a8_wgmma_128x192')"
TKS="configs.W8A8_TMA_KS, t = configs.W8A8_TMA_KS_VARIANT; configs.W8A8_TMA_TIERS.update(t)"
for i in 1 2; do
bench pair128_${i}A "" 96,128,256 25
bench pair128_${i}B "$PAIR" 96,128,256 25
bench pair128_${i}C "$PAIR; w8a8.FUSED_SILU = True" 96,128,256 25
bench pair128_${i}D "$PAIR; w8a8.FUSED_SILU = True; w8a8.SILU_TILE_ST = True" 96,128,256 25
done
bench tks_1R "" 64,128,256 30
bench tks_1T "$TKS" 64,128,256 30
python -m metrale.bench --compare $OUT/pair128_1A.json $OUT/pair128_1B.json $OUT/pair128_1C.json $OUT/pair128_1D.json \
  $OUT/pair128_2A.json $OUT/pair128_2B.json $OUT/pair128_2C.json $OUT/pair128_2D.json 2>&1 | tail -5
python -m metrale.bench --compare $OUT/tks_1R.json $OUT/tks_1T.json 2>&1 | tail -5
