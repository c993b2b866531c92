#!/usr/bin/env bash
# Why the W8A8 stream-K GEMMs stream at about 2.2 TB/s at 64..128 rows (and the 256x128 tile at
# 256 rows fills 96 of 132 SMs): ncu of the W8A8 FFN's launches at 64 / 128 / 256 rows
# (tools/gpu_profile.py: SpeedOfLight, Occupancy, WarpStateStats, MemoryWorkloadAnalysis).
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 500 python tools/gpu_profile.py --out $OUT --cells w8a8:64,128,256 2>&1 | tail -5
cat $OUT/ncu_summary.md 2>/dev/null | head -40
