#!/usr/bin/env bash
# The chain decode kernels with two lanes per run (512-thread CTAs, the new default) against one
# (256 threads, the build measured in ../runs-2026-12-06/run_gemv2.sh) and four, beside the tree
# kernels; their tests (every lane count); ncu of tree against chain at one row.
export PYTHONPATH=.
D=docs/bench/runs-2026-12-06b
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 200 python -m pytest -q tests/gpu/test_cuda_chain_gemv.py -n 8 -p no:cacheprovider --tb=line 2>&1 | tail -4
VARS=tree,gemv MS=1,2,3,4 TAG=_lanes2 timeout 100 python $P 2>&1 | tail -8
LANES=1 RUN=256,6 VARS=gemv MS=1,2,3,4 TAG=_lanes1 timeout 90 python $P 2>&1 | tail -8
LANES=4 VARS=gemv MS=1,2,3,4 TAG=_lanes4 timeout 90 python $P 2>&1 | tail -8
timeout 150 ncu --kernel-name regex:nvfp4_a16fc?_r --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  python $D/gemv_prof.py >"$OUT/ncu_gemv_m1.txt" 2>&1
grep -E "nvfp4_a16|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Dynamic Shared|Issued Ipc|No Eligible|Eligible Warps|L1/TEX Hit|Mem Busy|Max Bandwidth|Stall" "$OUT/ncu_gemv_m1.txt" | head -80
