#!/usr/bin/env bash
# Session (k)'s second call (any H100 / H200; about 4 minutes): the 8-block chain probe kernels
# (nvfp4_a16f8_r{1,2}, nvfp4_a4f8_r{1,2}: docs/chain-revision.md, "The part size") against
# project_chain at 8-block parts, then their decode projections timed beside the routed tree's
# fast kernels and the 64-block chain's run kernels (ch8_time.py).
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 4 --tb=line -p no:benchmark tests/gpu/test_cuda_chain8_probe.py 2>&1 \
  | grep -E "^FAILED|^E |passed|failed|rror" | head -20
timeout 240 python docs/bench/runs-2026-12-08/ch8_time.py 2>&1 | tail -6
