#!/usr/bin/env bash
# The shortest call that answers the design question (device time nearly spent): ws_probe, then
# w4s_gemm_f16 beside w4c_gemm_f16 at 1024 and 4096 rows (chain_tile.py checks 4 rows of each
# against project_chain bit for bit).
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 80 python docs/bench/runs-2026-12-06e/ws_probe.py 2>&1 | tail -5
MS=1024,4096 VARS=chain16 TAG=_w4c timeout 80 python $P 2>&1 | tail -4
SA=w4s MS=1024,4096 VARS=chain16 TAG=_w4s timeout 80 python $P 2>&1 | tail -4
SA=w4p MS=1024,4096 VARS=chain16 TAG=_w4p timeout 80 python $P 2>&1 | tail -4
