#!/usr/bin/env bash
# The last few device minutes: ws_probe, then w4s_gemm_f16 against w4c_gemm_f16 at 4096 rows.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 60 python docs/bench/runs-2026-12-06e/ws_probe.py 2>&1 | tail -5
MS=4096 VARS=chain16 TAG=_w4c timeout 60 python $P 2>&1 | tail -3
SA=w4s MS=4096 VARS=chain16 TAG=_w4s timeout 60 python $P 2>&1 | tail -3
SA=w4p MS=4096 VARS=chain16 TAG=_w4p timeout 60 python $P 2>&1 | tail -3
