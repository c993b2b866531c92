#!/usr/bin/env bash
# One call in priority order when device time is short: the GPU tests of the routed tree tiles
# and the chain tiles (warp_uniform descriptors, tile_at raster), the W8A8 stream-K tests (256
# weight rows per unit; the SiLU-quantize in one launch), then w4c / w4s / w4p at 4096 rows and
# the W8A8 FFN at 64 / 128 / 256 rows with and without the wide units and the one-launch
# SiLU-quantize.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
METRALE_REQUIRE_GPU=1 timeout 220 python -m pytest -q -n 12 -p no:cacheprovider --tb=line \
  tests/gpu/test_cuda_nvfp4_tile.py tests/gpu/test_cuda_chain_tile.py tests/gpu/test_cuda_fp8_chain_tile.py 2>&1 | tail -6
METRALE_REQUIRE_GPU=1 timeout 80 python -m pytest -q -n 8 -p no:cacheprovider --tb=line \
  tests/gpu/test_cuda_w8a8.py -k "tma or dual or fused" 2>&1 | tail -4
MS=4096 VARS=chain16 TAG=_w4c timeout 40 python $P 2>&1 | tail -3
SA=w4s MS=4096 VARS=chain16 TAG=_w4s timeout 40 python $P 2>&1 | tail -3
SA=w4p MS=4096 VARS=chain16 TAG=_w4p timeout 40 python $P 2>&1 | tail -3
for v in "0 0 128" "1 0 128" "1 1 128" "1 1 256"; do
  set -- $v
  METRALE_W8A8_TMA_WIDE=$1 METRALE_W8A8_SILU_ROWS=$2 METRALE_W8A8_TMA_PAIR_MAX_ROWS=$3 timeout 40 python -m metrale.bench --shape qwen3-8b --m 64,128,256 --formats w8a8 --peers bf16 --kernels none --cell-seconds 1 --samples 5 --json $OUT/w8a8_ffn_w$1_r$2_p$3.json 2>&1 | grep -E "W8A8|cuBLAS" | head -3
done
