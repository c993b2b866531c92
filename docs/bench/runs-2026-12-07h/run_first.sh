#!/usr/bin/env bash
# Session (h)'s first call (about 5 minutes): runs-2026-12-07g/run_next.sh's GPU tests (the row
# helpers' fix: test_cuda_launch_args.py, the whole W8A8 suite with the fused entry's routed-off16
# case, the PDL file, the chain routes and decode with the FP8 / BF16 parts read as float4), then
# run_act.sh's tests (act_mul on every gate code and the W8A8 SiLU tests with the compact tables).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 300 python -m pytest -q -n 12 --tb=short -p no:benchmark tests/gpu/test_cuda_launch_args.py \
  tests/gpu/test_cuda_w8a8.py tests/gpu/test_cuda_pdl.py 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -20
timeout 150 python -m pytest -q -n 8 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_generic.py \
  tests/gpu/test_cuda_fp8_bf16.py -k "routes or decode" 2>&1 | grep -E "^FAILED|^E |passed|failed" | head -10
timeout 150 python -c "
import sys; from metrale.cuda import configs; configs.ACT_TABLE_COMPACT = True
import pytest; sys.exit(pytest.main(['-q', '-p', 'no:benchmark', 'tests/gpu/test_cuda_nvfp4.py::test_act_mul_every_gate_pattern',
  'tests/gpu/test_cuda_w8a8.py', '-k', 'act_mul or silu']))
" 2>&1 | grep -E "^FAILED|^E |passed|failed" | tail -5
