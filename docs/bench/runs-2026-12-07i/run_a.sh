#!/usr/bin/env bash
# Session (i)'s first call (under 10 minutes), the decisions first: W8A8 gate + up at 96 / 128
# rows on the stream-K pair (A), one launch of the 128x192 tile pair (B) and that tile with the
# SiLU step in its epilogue (C) (../runs-2026-12-07h/run_pair128.sh's variants, fewer rows); the
# stream-K build with 2 K tiles per unit (T) against the routed one (R) at 64..256 rows
# (../runs-2026-12-07h/run_tks.sh's variant, benchmark only: every cell is checked bit for bit
# against the reference; its GPU tests run where it wins); then Nsight Compute of the routed
# W8A8 FFN at 64 / 128 / 256 rows (tools/gpu_profile.py, unmodified clocks).
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
bench pair128_${i}A "" 96,128 25
bench pair128_${i}B "$PAIR" 96,128 25
bench pair128_${i}C "$PAIR; w8a8.FUSED_SILU = True" 96,128 25
done
for i in 1 2; do
bench tks_${i}R "" 64,128,192,256 35
bench tks_${i}T "$TKS" 64,128,192,256 35
done
timeout 170 python tools/gpu_profile.py --out $OUT --cells w8a8:64,128,256 2>&1 | tail -2
cat $OUT/ncu_summary.md 2>/dev/null | head -30
