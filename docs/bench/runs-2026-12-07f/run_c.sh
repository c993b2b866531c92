#!/usr/bin/env bash
# One call, most important first (about 9 minutes; cut where the device time ends): the W8A8
# fused SiLU tile's GPU tests; the W8A8 FFN with it against the dual launch + SiLU-quantize step;
# Q2_0's chain decode kernels' tests (q2c_dec_*, q2cp_dec_*); the 128x192 SiLU tile at 96 / 128
# rows; the chain and tree FFN at 1..3 rows.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_w8a8.py \
  -k "dual_silu_quant or prefill_chunks" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -20
for f in 1 0; do
METRALE_W8A8_FUSED_SILU=$f OPENBLAS_NUM_THREADS=1 timeout 70 python -m metrale.bench --shape qwen3-8b \
  --m 128,192,256,512,1024,4096 --formats w8a8 --peers bf16 --kernels none \
  --cell-seconds 0.5 --samples 5 --deadline 55 --json $OUT/w8a8_fused$f.json 2>&1 | grep "^| " | head -4
done
timeout 110 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  -k "decode_q2_0 or routes" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -20
METRALE_W8A8_FUSED_SILU=1 OPENBLAS_NUM_THREADS=1 timeout 45 python -c "
import sys; from metrale.cuda import configs; configs.W8A8_TMA_PAIR_MAX_ROWS = 64
configs.W8A8_WGMMA_ROUTED['pair'] = (*configs.W8A8_WGMMA_ROUTED['pair'], 'w8a8_wgmma_128x192')
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '96,128', '--formats', 'w8a8', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '35', '--json', '$OUT/w8a8_tile128.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -4
for mode in "--chain" ""; do
OPENBLAS_NUM_THREADS=1 timeout 60 python -m metrale.bench $mode --shape qwen3-8b \
  --m 1,2,3 --formats nvfp4,q2_0,fp8 --peers bf16 --kernels none \
  --cell-seconds 0.4 --samples 5 --deadline 45 --json $OUT/dec3${mode:+_chain}.json 2>&1 | grep "^| " | head -6
done
