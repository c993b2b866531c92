#!/usr/bin/env bash
# The decode rows on the chain, most important first (about 8 minutes; the log is under $OUT):
# the FP8 chain weights row-major (tile_fp8_bytes: the tile takes lane words by ldmatrix, the
# decode and generic chain kernels load whole blocks) — the FP8 chain tile's, generic chain and
# chain decode tests; Q2_0's chain decode (q2c_dec_*, session (e)) tests; then the chain FFN at
# 1..3 rows with FP8's chain decode on (fp8_bf16.CHAIN_DEC_FP8) beside the tree's FFN; the FP8
# chain tile's FFN at 16..1024 rows (the ldmatrix read) beside bf16 cuBLAS.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_fp8_chain_tile.py \
  tests/gpu/test_cuda_chain_generic.py 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
OPENBLAS_NUM_THREADS=1 timeout 110 python -c "
import sys; from metrale.cuda import fp8_bf16; fp8_bf16.CHAIN_DEC_FP8 = True
from metrale.bench.run import main
sys.exit(main(['--chain', '--shape', 'qwen3-8b', '--m', '1,2,3', '--formats', 'nvfp4,q2_0,fp8,bf16', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '95', '--json', '$OUT/dec3_chain.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -7
OPENBLAS_NUM_THREADS=1 timeout 110 python -m metrale.bench --shape qwen3-8b --m 1,2,3 \
  --formats nvfp4,q2_0,fp8,bf16 --peers bf16 --kernels none --cell-seconds 0.5 --samples 5 \
  --deadline 95 --json $OUT/dec3.json 2>&1 | grep "^| " | head -7
OPENBLAS_NUM_THREADS=1 timeout 90 python -m metrale.bench --chain --shape qwen3-8b --m 16,64,256,1024 \
  --formats fp8 --peers bf16 --kernels none --cell-seconds 0.5 --samples 5 \
  --deadline 75 --json $OUT/fp8_tile_chain.json 2>&1 | grep "^| " | head -4
