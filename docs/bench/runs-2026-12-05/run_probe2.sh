#!/usr/bin/env bash
# Second call: Q2_0 on the chain tile, NF = 16 with three stages, the prefetching variant.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
FMT=q2_0 VARS=tree,chain MS=1,8,16,64,256,1024,4096 timeout 130 python $P 2>&1 | tail -16
TAG=_base VARS=chain16 MS=1024,4096 timeout 70 python $P 2>&1 | tail -4
STAGES16=3 TAG=_s3 VARS=chain16 MS=1024,4096 timeout 70 python $P 2>&1 | tail -4
STAGES16=3 PF=16 TAG=_pf VARS=chain16 MS=1024,4096 timeout 70 python $P 2>&1 | tail -4
# SASS of the chain tile (the cache holds NVRTC's PTX: ptxas it here)
C=$(ls -t ~/.cache/metrale/kernels/nvfp4_wgmma.cu.sm_90a.*.cubin | head -1)
ptxas -arch=sm_90a -o /tmp/wg.cubin "$C" && for k in w4c_gemm_f16 w4c_gemm_f8 w8c_gemm_f8; do
  cuobjdump -sass -fun $k /tmp/wg.cubin >"$OUT/sass_$k.txt" 2>&1
  echo "== $k: $(grep -cE '/\*[0-9a-f]{4}\*/' "$OUT/sass_$k.txt") instructions"
done
