#!/usr/bin/env bash
# Not yet run. Q2_0's decode kernels' chain form (q2c_dec_*: the tree kernels' lane layout, the
# term pairs into per-warp shared memory, one lane per (row, column) chaining the chunk's two
# parts, the counter over parts): its GPU tests and the routing tests; then the chain and the
# routed (tree) FFN at 1..3 rows beside bf16 cuBLAS.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  -k "decode or routes or generic_q2" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -30
for mode in "--chain" ""; do
OPENBLAS_NUM_THREADS=1 timeout 120 python -m metrale.bench $mode --shape qwen3-8b \
  --m 1,2,3 --formats nvfp4,q2_0,fp8,bf16 --peers bf16 --kernels none \
  --cell-seconds 0.5 --samples 5 --deadline 100 --json $OUT/dec3${mode:+_chain}.json 2>&1 | grep "^| " | head -7
done
# The nibble decode's shifts as mul.hi (configs.NVFP4_NIB_MULHI, a variant): the NVFP4 chain GEMV
# tests with it, then the NVFP4 chain FFN at 1..3 rows with it (the run above is without).
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
