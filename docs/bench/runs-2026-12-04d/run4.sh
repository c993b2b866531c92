#!/bin/bash
# The FP8 and BF16 overlays beside bf16 cuBLAS and gemlite 0.6's A16W8 FP8 weight-only, Qwen3-8B FFN.
python -m pip install -q --no-deps --target /tmp/gl wheels/gemlite-*.whl 2>/dev/null
export PYTHONPATH=.:/tmp/gl METRALE_REQUIRE_GPU=1
mkdir -p $OUT; T0=$(date +%s)
timeout 330 python -m metrale.bench --shape qwen3-8b --m 1,4,8,16,32,64,128,256,1024,4096 \
  --formats fp8,bf16 --peers bf16,gl-w8fp8 --kernels none --cell-seconds 1 --samples 5 \
  --deadline 270 --json $OUT/bench_overlays.json --md $OUT/bench_overlays.md > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 ))s"; grep -a "gemlite\|cuBLAS\|FAILED\|bit-exact\|not measured" $OUT/bench.log | tail -12
