#!/usr/bin/env bash
# Nsight Compute of the routed W8A8 FFN at 64 / 128 / 256 rows (tools/gpu_profile.py, unmodified
# clocks; about 3 minutes): each launch's time, DRAM rate, issue use and top stalls, to place
# 0.74 / 0.90 / 0.83x cuBLAS (the GEMMs' ~2 TB/s, the SiLU step).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 400 python tools/gpu_profile.py --out $OUT --cells w8a8:64,128,256 2>&1 | tail -2
cat $OUT/ncu_summary.md 2>/dev/null | head -40
