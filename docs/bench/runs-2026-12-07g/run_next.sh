#!/usr/bin/env bash
# The next session's first call (about 6 minutes): the row helpers' fix (an unaligned one-row view
# copied: test_cuda_launch_args.py), the whole W8A8 GPU suite (the fused entry's routed-off16 case
# among it; test_gemv_dual, untouched since the split-B mainloop), the Q2_0 routing with
# q2cp_dec_r1 at one row, the FP8 / BF16 chain decode reading its parts as float4 (tests, then the
# chain FFN at 1..3 rows). Then, on an H200, ../runs-2026-12-07f/run_w8a8_tables.sh (the W8A8 rows
# of the tables beside gemlite's A8W8; carry the gemlite wheel) and
# ../runs-2026-12-07b/run_chain_bench.sh (the chain FFN for the tables).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 300 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_launch_args.py \
  tests/gpu/test_cuda_w8a8.py tests/gpu/test_cuda_pdl.py 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -20
timeout 150 python -m pytest -q -n 8 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  tests/gpu/test_cuda_fp8_bf16.py -k "routes or decode" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -10
[ "${1:-}" = tests ] && exit 0  # the tests only (../runs-2026-12-07h/run_first.sh)
# The FP8 / BF16 chain decode with its parts read as float4 (DEC_PART_FLOATS 68): 1..3 rows
# (before: FP8 95.9 / 106.9 / 131.3, BF16 122.6 / 145.1 / 171.6 us on an H100, run_a.sh).
OPENBLAS_NUM_THREADS=1 timeout 80 python -c "
import sys; from metrale.cuda import fp8_bf16; fp8_bf16.CHAIN_DEC_FP8 = True
from metrale.bench.run import main
sys.exit(main(['--chain', '--shape', 'qwen3-8b', '--m', '1,2,3', '--formats', 'fp8,bf16', '--peers', 'bf16',
  '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '65', '--json', '$OUT/dec3_chain_f4.json'],
  prog='bench'))
" 2>&1 | grep "^| " | head -5
