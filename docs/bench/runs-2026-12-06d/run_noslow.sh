#!/usr/bin/env bash
# ptxas serialised every wgmma of a kernel that held a call (C7510: the out-of-line slow
# epilogue): the tile GPU tests on the inlined slow passes (tile_slow) and the hoisted copies
# (TileCopies), then the chain and tree tiles as built now, NVFP4 NF = 16 against SLOW_CALL=1
# (tile_slow out of line: the serialised build), and the FP8 chain tile.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 300 python -m pytest -q -n 8 -p no:cacheprovider --tb=line tests/gpu/test_cuda_chain_tile.py tests/gpu/test_cuda_fp8_chain_tile.py tests/gpu/test_cuda_nvfp4_tile.py 2>&1 | tail -5
MS=64,256,1024,4096 VARS=tree,chain8,chain16 TAG=_inl timeout 150 python $P 2>&1 | tail -8
MS=1024,4096 VARS=chain16 SLOW_CALL=1 TAG=_call timeout 100 python $P 2>&1 | tail -4
FMT=fp8 MS=8,64,1024,4096 VARS=tree,chain TAG=_inl timeout 150 python $P 2>&1 | tail -8
# the chain decode kernels at one and two rows: ring depth 6 (configs.NVFP4_RUN_DEPTH) against the defaults
MS=1,2 VARS=tree,gemv TAG=_gemv timeout 60 python $P 2>&1 | tail -3
MS=1,2 VARS=gemv RUN=384,6 TAG=_gemv_d6 timeout 60 python $P 2>&1 | tail -3
# the routed path (the tree's tiles are wgmma tiles too): metrale bench, NVFP4 / W4A4 / Q2_0 beside bf16 cuBLAS
B="python -m metrale.bench --shape qwen3-8b --formats nvfp4,w4a4,q2_0 --peers bf16 --kernels none --cell-seconds 1 --samples 5"
METRALE_REQUIRE_GPU=1 timeout 200 $B --m 32,64,256,1024,4096 --deadline 150 --json $OUT/bench_routed.json > $OUT/bench.log 2>&1
echo "bench rc=$?"; tail -25 $OUT/bench.log
