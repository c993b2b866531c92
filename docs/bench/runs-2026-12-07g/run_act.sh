#!/usr/bin/env bash
# Runs at commits f3c2066 .. f44f6a7 (the compact tables were removed in b500d5f after this run).
# The compact activation tables (configs.ACT_TABLE_COMPACT, weights.compact_table, common.cuh
# act_value: about 30 KB where the table is not x / 2, x or -0.0), about 4 minutes: act_mul on
# every gate code and the W8A8 SiLU-quantize tests with them (one process: the flag is set before
# any kernel builds); then the W8A8 FFN at 256 / 1024 / 4096 rows with and without them, twice,
# alternating (each run a process).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -c "
import sys; from metrale.cuda import configs; configs.ACT_TABLE_COMPACT = True
import pytest; sys.exit(pytest.main(['-q', '-p', 'no:benchmark', 'tests/gpu/test_cuda_nvfp4.py::test_act_mul_every_gate_pattern',
  'tests/gpu/test_cuda_w8a8.py', '-k', 'act_mul or silu']))
" 2>&1 | grep -E "^FAILED|^E |passed|failed" | tail -5
for run in 1T 1F 2T 2F; do
flag=$([ ${run:1} = T ] && echo True || echo False)
OPENBLAS_NUM_THREADS=1 timeout 70 python -c "
import sys; from metrale.cuda import configs; configs.ACT_TABLE_COMPACT = $flag
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '256,1024,4096', '--formats', 'w8a8', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '55', '--json', '$OUT/act_$run.json'],
  prog='bench'))
" 2>&1 | grep "^| W8A8" | sed "s/^/compact=$flag /"
done
