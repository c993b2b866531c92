#!/usr/bin/env bash
# Runs at commit 8a4e558 (the variant was removed in 59cb444 after this run).
# W8A8's stream-K kernels on tiles of 256 weight rows (configs.W8A8_TMA_WIDE_TIERS: n16, n32,
# n64, n128), about 7 minutes: their GPU tests in one process with the wide tiers set before any
# kernel builds, then the W8A8 FFN at 4..256 rows with the routed kernels (F) and with the wide
# tiers routed from 4 rows (T: w8a8.TMA_MIN_ROWS = 4, so split K keeps 1..3), twice,
# alternating (each run a process).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -c "
import sys; from metrale.cuda import configs; configs.W8A8_TMA_TIERS.update(configs.W8A8_TMA_WIDE_TIERS)
import pytest; sys.exit(pytest.main(['-q', '-p', 'no:benchmark', 'tests/gpu/test_cuda_w8a8.py', '-k',
  'tma or dual or routing or prefill_chunks']))
" 2>&1 | grep -E "^FAILED|^E |passed|failed" | tail -8
for run in 1T 1F 2T 2F; do
flag=$([ ${run:1} = T ] && echo True || echo False)
OPENBLAS_NUM_THREADS=1 timeout 95 python -c "
import sys; from metrale.cuda import configs
if $flag:
    configs.W8A8_TMA_TIERS.update(configs.W8A8_TMA_WIDE_TIERS)
    from metrale.cuda import w8a8; w8a8.TMA_MIN_ROWS = 4
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '4,8,16,32,64,96,128,256', '--formats', 'w8a8', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '75', '--json', '$OUT/wide_$run.json'],
  prog='bench'))
" 2>&1 | grep -E "^\| (W8A8|peer)" | sed "s/^/wide=$flag /"
done
