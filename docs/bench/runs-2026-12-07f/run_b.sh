#!/usr/bin/env bash
# The W8A8 FFN (Qwen3-8B) with the SiLU step in the gate + up tile's epilogue against the dual
# launch and the separate SiLU-quantize step (METRALE_W8A8_FUSED_SILU=0), bf16 cuBLAS beside
# each; then session (e)'s run_c benches (chain / tree FFN at 1..3 rows, NVFP4 with the mul.hi
# nibble decode, Q2_0 with the chains a step late).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for f in 1 0; do
METRALE_W8A8_FUSED_SILU=$f OPENBLAS_NUM_THREADS=1 timeout 110 python -m metrale.bench --shape qwen3-8b \
  --m 64,128,192,256,512,1024,4096 --formats w8a8 --peers bf16 --kernels none \
  --cell-seconds 0.6 --samples 5 --deadline 90 --json $OUT/w8a8_fused$f.json 2>&1 | grep "^| " | head -4
done
# The pair tile with the SiLU step at 65..128 rows too (the stream-K pair only to 64 rows; the
# 128x192 tile among the pair's: one wave of 128 CTAs).
METRALE_W8A8_FUSED_SILU=1 OPENBLAS_NUM_THREADS=1 timeout 60 python -c "
import sys; from metrale.cuda import configs; configs.W8A8_TMA_PAIR_MAX_ROWS = 64
configs.W8A8_WGMMA_ROUTED['pair'] = (*configs.W8A8_WGMMA_ROUTED['pair'], 'w8a8_wgmma_128x192')
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '96,128', '--formats', 'w8a8', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.6', '--samples', '5', '--deadline', '45', '--json', '$OUT/w8a8_tile128.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -4
for mode in "--chain" ""; do
OPENBLAS_NUM_THREADS=1 timeout 100 python -m metrale.bench $mode --shape qwen3-8b \
  --m 1,2,3 --formats nvfp4,q2_0,fp8,bf16 --peers bf16 --kernels none \
  --cell-seconds 0.5 --samples 5 --deadline 80 --json $OUT/dec3${mode:+_chain}.json 2>&1 | grep "^| " | head -7
done
OPENBLAS_NUM_THREADS=1 timeout 80 python -c "
import sys; from metrale.cuda import configs; configs.NVFP4_NIB_MULHI = True
from metrale.bench.run import main
sys.exit(main(['--chain', '--shape', 'qwen3-8b', '--m', '1,2,3', '--formats', 'nvfp4', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '60', '--json', '$OUT/mulhi_chain.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -4
OPENBLAS_NUM_THREADS=1 timeout 70 python -c "
import sys; from metrale.cuda import q2_0; q2_0.CHAIN_PIPE_ROWS = (1, 2)
from metrale.bench.run import main
sys.exit(main(['--chain', '--shape', 'qwen3-8b', '--m', '1,2', '--formats', 'q2_0', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '55', '--json', '$OUT/q2cp_chain.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -4
