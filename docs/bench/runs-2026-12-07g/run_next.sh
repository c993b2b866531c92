#!/usr/bin/env bash
# The next session's first call (about 5 minutes): the row helpers' fix (an unaligned one-row view
# copied: test_cuda_launch_args.py), the whole W8A8 GPU suite (the fused entry's routed-off16 case
# among it; test_gemv_dual, untouched since the split-B mainloop), the Q2_0 routing with
# q2cp_dec_r1 at one row. Then, on an H200, ../runs-2026-12-07f/run_w8a8_tables.sh (the W8A8 rows
# of the tables beside gemlite's A8W8; carry the gemlite wheel) and
# ../runs-2026-12-07b/run_chain_bench.sh (the chain FFN for the tables).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 420 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_launch_args.py \
  tests/gpu/test_cuda_w8a8.py tests/gpu/test_cuda_pdl.py 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -20
timeout 100 python -m pytest -q -n 8 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  -k "routes_fp8_and_q2_0 or decode_q2_0" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -10
