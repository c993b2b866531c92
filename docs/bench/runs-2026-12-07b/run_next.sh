#!/usr/bin/env bash
# After run_next_tests.sh: the Qwen3-8B W8A8 FFN at 64..512 rows with the SiLU-quantize slice pair
# (routed now) against the one-launch kernels of 4, 2, 1 CTAs per row (w8a8_silu_quant_c{4,2,1}),
# and gate + up as one launch of the tile (METRALE_W8A8_TILE_PAIR=1: 256x192 at 129..256 rows).
# Set configs.W8A8_SILU_ROW_KERNELS and w8a8.TILE_PAIR from the result.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="python -m metrale.bench --shape qwen3-8b --m 64,128,192,256,512 --formats w8a8 --peers bf16 --kernels none --cell-seconds 1 --samples 5"
for v in "" "64:4,128:2,4096:1" "128:4,4096:2" "4096:1"; do
  tag=$(echo "${v:-pair}" | tr ':,' '-_')
  METRALE_W8A8_SILU_ROW_KERNELS="$v" timeout 110 $B --json $OUT/w8a8_silu_$tag.json 2>&1 | grep -i "^| W8A8\|cuBLAS (gate+up" | head -3
done
METRALE_W8A8_TILE_PAIR=1 METRALE_W8A8_SILU_ROW_KERNELS="64:4,128:2,4096:1" timeout 110 $B --json $OUT/w8a8_tilepair.json 2>&1 | grep -i "^| W8A8\|cuBLAS (gate+up" | head -3
