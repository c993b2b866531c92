#!/usr/bin/env bash
# Session (e)'s run_c.sh after its first part (run_a.sh ran the q2c tests and the 1..3-row FFN): NVFP4's mul.hi nibble decode (tests, chain FFN at 1..3 rows), Q2_0's pipelined chains (q2cp_dec_*, chain FFN at 1, 2 rows).
export PYTHONPATH=.
python -c "
import sys; from metrale.cuda import configs; configs.NVFP4_NIB_MULHI = True
import pytest; sys.exit(pytest.main(['-q', '-p', 'no:benchmark', 'tests/gpu/test_cuda_chain_gemv.py']))
" 2>&1 | grep -E "^FAILED|^E |passed|failed" | tail -5
OPENBLAS_NUM_THREADS=1 timeout 90 python -c "
import sys; from metrale.cuda import configs; configs.NVFP4_NIB_MULHI = True
from metrale.bench.run import main
sys.exit(main(['--chain', '--shape', 'qwen3-8b', '--m', '1,2,3', '--formats', 'nvfp4', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '70', '--json', '$OUT/mulhi_chain.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -4
# Q2_0's chain decode with each step's chains after the next step's block dots (q2cp_dec_*,
# q2_0.CHAIN_PIPE_ROWS, a variant): the chain FFN at 1, 2 rows with it (its bits: the tests above).
OPENBLAS_NUM_THREADS=1 timeout 90 python -c "
import sys; from metrale.cuda import q2_0; q2_0.CHAIN_PIPE_ROWS = (1, 2)
from metrale.bench.run import main
sys.exit(main(['--chain', '--shape', 'qwen3-8b', '--m', '1,2', '--formats', 'q2_0', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '70', '--json', '$OUT/q2cp_chain.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -4
