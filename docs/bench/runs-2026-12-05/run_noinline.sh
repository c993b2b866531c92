#!/usr/bin/env bash
# The slow epilogue out of line (tile_slow_run): the chain tests, then the chain tile with it
# inlined (the earlier build) and out of line, NVFP4 and FP8, in one call; the SASS of the build.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
METRALE_REQUIRE_GPU=1 timeout 200 python -m pytest tests/gpu/test_cuda_chain_tile.py tests/gpu/test_fp8_limb_block_dot.py \
    tests/gpu/test_cuda_fp8_chain_tile.py -n 8 -p no:benchmark -p no:cacheprovider -q --tb=short >"$OUT/tests.txt" 2>&1
grep -E "^E |passed|failed" "$OUT/tests.txt" | cut -c1-300 | head -20
INLINE_SLOW=1 TAG=_inline VARS=chain MS=64,256,1024,4096 timeout 80 python $P 2>&1 | tail -8
VARS=tree,chain MS=64,256,1024,4096 timeout 90 python $P 2>&1 | tail -8
FMT=fp8 INLINE_SLOW=1 TAG=_inline VARS=chain MS=64,1024,4096 timeout 60 python $P 2>&1 | tail -6
FMT=fp8 VARS=chain MS=64,1024,4096 timeout 60 python $P 2>&1 | tail -6
C=$(ls -t ~/.cache/metrale/kernels/nvfp4_wgmma.cu.sm_90a.*.cubin | head -1)
for k in w4c_gemm_f16 w4c_gemm_f8 w8c_gemm_f8; do
  cuobjdump -sass -fun $k "$C" >"$OUT/sass_$k.txt" 2>&1
  echo "== $k: $(grep -cE '/\*[0-9a-f]{4}\*/' "$OUT/sass_$k.txt") instructions"
done
grep -oE '/\*[0-9a-f]{4}\*/ +[^;]*;' "$OUT/sass_w4c_gemm_f16.txt" | sed -E 's#/\*[0-9a-f]{4}\*/ +(@!?U?P[0-9T] +)?##' \
  | awk '{print $1}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25
