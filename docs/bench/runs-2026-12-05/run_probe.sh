#!/usr/bin/env bash
# The chain tiles' GPU tests (NVFP4 / Q2_0 at every NF, the FP8 limb premise and tile), the chain-tile
# probes of this run on the device (chain_tile.py: from one row, where the tree is the routed
# path), then ncu over one NF = 16 chain launch (gate + up, 4096 rows): stall reasons and pipe use.
# The second call (run_probe2.sh) holds the Q2_0 and build-variant probes.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
METRALE_REQUIRE_GPU=1 timeout 220 python -m pytest tests/gpu/test_cuda_chain_tile.py tests/gpu/test_fp8_limb_block_dot.py \
    tests/gpu/test_cuda_fp8_chain_tile.py -n 8 -p no:benchmark -p no:cacheprovider -q 2>&1 | tail -8
VARS=tree,chain MS=1,4,8,16,32,64,128,256,1024,4096 timeout 170 python $P 2>&1 | tail -22
FMT=fp8 VARS=tree,chain MS=1,8,16,64,256,1024,4096 timeout 110 python $P 2>&1 | tail -16
MS=4096 VARS=chain16 TAG=_ncu timeout 90 ncu --kernel-name regex:w4c_gemm_f16 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section InstructionStats python $P >"$OUT/ncu_chain16.txt" 2>&1
grep -E "Duration|Stall|Issue|Warp Cycles|Pipe|Executed Ipc|Throughput" "$OUT/ncu_chain16.txt" | head -40
