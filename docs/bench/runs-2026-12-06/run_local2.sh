#!/usr/bin/env bash
# The second half of run_local.sh: NF = 16 at two stages with the local counter, FP8 and Q2_0
# tree against chain, SASS of the chain tile.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P=docs/bench/runs-2026-12-05/chain_tile.py
TAG=_s2local STAGES16=2 VARS=chain16 MS=1024,4096 timeout 80 python $P 2>&1 | tail -4
FMT=fp8 VARS=tree,chain MS=8,64,256,1024,4096 timeout 120 python $P 2>&1 | tail -12
FMT=q2_0 VARS=tree,chain MS=8,64,256,4096 timeout 100 python $P 2>&1 | tail -10
C=$(ls -t ~/.cache/metrale/kernels/nvfp4_wgmma.cu.sm_90a.*.cubin | head -1)
ptxas -arch=sm_90a -o /tmp/wg.cubin "$C" && for k in w4c_gemm_f16 w4c_gemm_f8; do
  cuobjdump -sass -fun $k /tmp/wg.cubin >"$OUT/sass_$k.txt" 2>&1
  echo "== $k: $(grep -cE '/\*[0-9a-f]{4}\*/' "$OUT/sass_$k.txt") instructions"
done
ls "$OUT"
