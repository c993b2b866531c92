#!/usr/bin/env bash
# Session (j)'s second call (under 8 minutes): act_mul_st's GPU tests (shapes fixed to K % 16 = 0);
# the W8A8 FFN at 96 / 128 / 256 rows on the routed pair (A), the 128x192 tile pair with the SiLU
# step in its epilogue (C) and that with the epilogue's compact table (D); the routed NVFP4 and
# Q2_0 FFNs at 1024 / 4096 rows with act_mul_st (S) and without (R).
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 120 python -m pytest -q -n 8 --tb=line -p no:benchmark tests/gpu/test_cuda_nvfp4.py -k "act_mul" 2>&1 \
  | grep -E "^FAILED|^E |passed|failed" | head -8
bench() {  # tag, setup python, formats, rows, deadline
timeout $(($5 + 30)) python -c "
import sys; from metrale.cuda import configs, elementwise, w8a8
$2
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '$4', '--formats', '$3', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '$5', '--json', '$OUT/$1.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|NVFP4 W4A16 \(|Q2_0 \(|peer)|Error|error" | sed "s/^/$1 /"
}
PAIR="configs.W8A8_TMA_PAIR_MAX_ROWS = 64; configs.W8A8_WGMMA_ROUTED['pair'] = (*configs.W8A8_WGMMA_ROUTED['pair'], 'w8a8_wgmma_128x192'); w8a8.FUSED_SILU = True"
bench pair_A "" w8a8 96,128,256 25
bench pair_C "$PAIR" w8a8 96,128,256 25
bench pair_D "$PAIR; w8a8.SILU_TILE_ST = True" w8a8 96,128,256 25
bench act_R "" nvfp4,q2_0 1024,4096 55
bench act_S "elementwise.ST_MIN_ROWS = 1024" nvfp4,q2_0 1024,4096 55
python -m metrale.bench --compare $OUT/pair_A.json $OUT/pair_C.json $OUT/pair_D.json 2>&1 | tail -4
python -m metrale.bench --compare $OUT/act_R.json $OUT/act_S.json 2>&1 | tail -5
