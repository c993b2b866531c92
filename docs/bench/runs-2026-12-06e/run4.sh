#!/usr/bin/env bash
# One call for the design question: the probes (ws_probe, rf_probe), then w4s_gemm_f16's GPU
# tests and its speed beside w4c_gemm_f16 (run3.sh with shorter limits).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 70 python docs/bench/runs-2026-12-06e/ws_probe.py 2>&1 | tail -5
timeout 40 python docs/bench/runs-2026-12-06d/rf_probe.py 2>&1 | tail -5
MS=256,1024,4096 VARS=chain16 TAG=_w4c timeout 75 python $P 2>&1 | tail -4
SA=w4s MS=256,1024,4096 VARS=chain16 TAG=_w4s timeout 75 python $P 2>&1 | tail -4
SA=w4p MS=256,1024,4096 VARS=chain16 TAG=_w4p timeout 75 python $P 2>&1 | tail -4
METRALE_REQUIRE_GPU=1 timeout 200 python -m pytest -q -n 8 -p no:cacheprovider --tb=line tests/gpu/test_cuda_chain_tile.py -k shared_a 2>&1 | tail -5
