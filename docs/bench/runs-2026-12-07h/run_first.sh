#!/usr/bin/env bash
# Session (h)'s first call (about 5 minutes): runs-2026-12-07g/run_next.sh's GPU tests (the row
# helpers' fix: test_cuda_launch_args.py, the whole W8A8 suite with the fused entry's routed-off16
# case, the PDL file, the chain routes and decode with the FP8 / BF16 parts read as float4), then
# run_act.sh's tests (act_mul on every gate code and the W8A8 SiLU tests with the compact tables).
# (The compact-table tests run at commits f3c2066 .. f44f6a7: the tables were removed in b500d5f.)
bash "$(dirname "$0")/../runs-2026-12-07g/run_next.sh" tests
export PYTHONPATH=.
timeout 150 python -c "
import sys; from metrale.cuda import configs; configs.ACT_TABLE_COMPACT = True
import pytest; sys.exit(pytest.main(['-q', '-p', 'no:benchmark', 'tests/gpu/test_cuda_nvfp4.py::test_act_mul_every_gate_pattern',
  'tests/gpu/test_cuda_w8a8.py', '-k', 'act_mul or silu']))
" 2>&1 | grep -E "^FAILED|^E |passed|failed" | tail -5
