#!/usr/bin/env bash
# W8A8 stream-K with 2 K tiles per unit (configs.W8A8_TMA_KS_VARIANT: a weight row's two 128-byte
# boxes issued together, half as many stages of twice the size), about 5 minutes: the stream-K,
# dual, routing and layer GPU tests with it built, then the W8A8 FFN at 48..256 rows routed (R)
# and with it (T), twice, alternating.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
SET="from metrale.cuda import configs; configs.W8A8_TMA_KS, t = configs.W8A8_TMA_KS_VARIANT; configs.W8A8_TMA_TIERS.update(t)"
timeout 150 python -c "
import sys; $SET
import pytest; sys.exit(pytest.main(['-q', '-p', 'no:benchmark', 'tests/gpu/test_cuda_w8a8.py', '-k',
  'tma or dual or routing or prefill_chunks']))
" 2>&1 | grep -E "^FAILED|^E |passed|failed" | tail -4
for run in 1R 1T 2R 2T; do
OPENBLAS_NUM_THREADS=1 timeout 70 python -c "
import sys
if '${run:1}' == 'T': $SET
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '48,64,96,128,192,256', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '50', '--json', '$OUT/tks_$run.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)" | sed "s/^/$run /"
done
