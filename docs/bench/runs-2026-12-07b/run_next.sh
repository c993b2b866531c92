#!/usr/bin/env bash
# The next device call: the W8A8 one-launch SiLU-quantize kernels with 4, 2 and 1 CTAs per row
# (w8a8_silu_quant_c{4,2,1}; built 2026-12-07, not routed) -- their GPU tests (with the chain kernels
# refactored after the last GPU run), then the Qwen3-8B
# W8A8 FFN at 48..512 rows with the pair (routed now) against each routing of them. Set
# configs.W8A8_SILU_ROW_KERNELS from the result.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
# first the kernels changed after the 02:45 run (chain_round_tree, a16_record: compile-checked only)
timeout 200 python -m pytest -q -n 8 tests/gpu/test_cuda_chain_generic.py tests/gpu/test_cuda_chain_gemv.py \
  tests/gpu/test_cuda_nvfp4.py 2>&1 | tail -4
timeout 150 python -m pytest -q -n 8 tests/gpu/test_cuda_w8a8.py -k "fused or dual or every_tile" 2>&1 | tail -4
B="python -m metrale.bench --shape qwen3-8b --m 48,64,96,128,192,256,512 --formats w8a8 --peers bf16 --kernels none --cell-seconds 1 --samples 5"
for v in "" "64:4,128:2,4096:1" "128:4,4096:2" "4096:1"; do
  tag=$(echo "${v:-pair}" | tr ':,' '-_')
  METRALE_W8A8_SILU_ROW_KERNELS="$v" timeout 90 $B --json $OUT/w8a8_silu_$tag.json 2>&1 | grep -i "w8a8\|cublas" | head -4
done
# gate and up as one launch of the tile (256x192 at 129..256 rows), with the best SiLU routing above
METRALE_W8A8_TILE_PAIR=1 METRALE_W8A8_SILU_ROW_KERNELS="64:4,128:2,4096:1" timeout 90 $B --json $OUT/w8a8_tilepair.json 2>&1 | grep -i "w8a8\|cublas" | head -4
# The fast chain decode kernels at 1 / 2 rows with two CTAs per multiprocessor (16 warps per SM
# as the tree's kernels have; configs.NVFP4_RUN_CTAS_PER_SM) against the tree's.
P=docs/bench/runs-2026-12-05/chain_tile.py
MS=1,2 VARS=tree,gemv TAG=_dec2 timeout 60 python $P 2>&1 | grep "{"
for run in 256,3,2 192,4,2 128,6,2; do
  echo "RUN=$run"; RUN=$run MS=1,2 VARS=gemv TAG=_dec_c2_${run//,/_} timeout 45 python $P 2>&1 | grep "{"
done
