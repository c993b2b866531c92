#!/usr/bin/env bash
# W8A8 split K with 2 / 4 K tiles of 128 bytes per stage (configs.W8A8_SK_KS_VARIANTS: a weight
# row's 256 / 512 contiguous bytes requested together), about 5 minutes: the split-K, dual and
# routing GPU tests with each variant built (one process each), then the W8A8 FFN at 1..32 rows
# routed (R) and with each variant, twice, alternating.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for v in ks2 ks4; do
timeout 120 python -c "
import sys; from metrale.cuda import configs; configs.W8A8_SK_TIERS.update(configs.W8A8_SK_KS_VARIANTS['$v'])
import pytest; sys.exit(pytest.main(['-q', '-p', 'no:benchmark', 'tests/gpu/test_cuda_w8a8.py', '-k',
  'split_k or dual or routing']))
" 2>&1 | grep -E "^FAILED|^E |passed|failed" | tail -4 | sed "s/^/$v /"
done
for run in 1R 1ks2 1ks4 2R 2ks2 2ks4; do
v=${run:1}
OPENBLAS_NUM_THREADS=1 timeout 60 python -c "
import sys; from metrale.cuda import configs
if '$v' != 'R': configs.W8A8_SK_TIERS.update(configs.W8A8_SK_KS_VARIANTS['$v'])
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '1,2,4,8,16,32', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '40', '--json', '$OUT/ks_$run.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)" | sed "s/^/$run /"
done
