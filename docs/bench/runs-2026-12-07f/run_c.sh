#!/usr/bin/env bash
# The W8A8 checks, most important first (about 6 minutes; a shorter lease cuts the tail, the log
# is under $OUT): the fused SiLU tile's GPU tests (w8a8_gemv_dual_silu_quant, the W8A8-only
# layer's prefill with it on and off); the Qwen3-8B W8A8 FFN with it (METRALE_W8A8_FUSED_SILU=1)
# against the dual launch + SiLU-quantize step at 128..4096 rows; the 128x192 SiLU tile at 96 / 128
# rows. The decode-row checks are session (e)'s run_c.sh, the next call.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_w8a8.py \
  -k "dual_silu_quant or prefill_chunks" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -20
for f in 1 0; do
METRALE_W8A8_FUSED_SILU=$f OPENBLAS_NUM_THREADS=1 timeout 70 python -m metrale.bench --shape qwen3-8b \
  --m 128,192,256,512,1024,4096 --formats w8a8 --peers bf16 --kernels none \
  --cell-seconds 0.5 --samples 5 --deadline 55 --json $OUT/w8a8_fused$f.json 2>&1 | grep "^| " | head -4
done
# The pair tile with the SiLU step at 65..128 rows too (the stream-K pair only to 64 rows; the
# 128x192 tile among the pair's: one wave of 128 CTAs).
METRALE_W8A8_FUSED_SILU=1 OPENBLAS_NUM_THREADS=1 timeout 45 python -c "
import sys; from metrale.cuda import configs; configs.W8A8_TMA_PAIR_MAX_ROWS = 64
configs.W8A8_WGMMA_ROUTED['pair'] = (*configs.W8A8_WGMMA_ROUTED['pair'], 'w8a8_wgmma_128x192')
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '96,128', '--formats', 'w8a8', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '35', '--json', '$OUT/w8a8_tile128.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -4
