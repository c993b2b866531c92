#!/bin/bash
# The 4-bit formats and W8A8 beside bf16 cuBLAS and gemlite 0.6 (A16W4 / A16W2 int g64, A8W8 int8),
# Qwen3-8B FFN, one run (gemlite's wheel built here with `pip wheel --no-deps gemlite==0.6.0.post2`).
# The first run of this script (16 row counts, the peers timed first) spent its deadline in
# gemlite's compiles: bench_gemlite_peers_only.json. The benchmark now times gemlite last.
python -m pip install -q --no-deps --target /tmp/gl wheels/gemlite-*.whl || exit 3
export PYTHONPATH=.:/tmp/gl METRALE_REQUIRE_GPU=1
mkdir -p $OUT; T0=$(date +%s)
timeout 540 python -m metrale.bench --shape qwen3-8b --m 1,4,8,16,32,64,128,256,1024,4096 \
  --formats nvfp4,w4a4,q2_0,w8a8 --peers bf16,gl-w4,gl-w2,gl-a8w8 --kernels none --cell-seconds 1 --samples 5 \
  --deadline 470 --json $OUT/bench_gemlite.json --md $OUT/bench_gemlite.md > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 ))s"; grep -a "speed-up\|fastest\|gemlite\|FAILED\|skipped\|bit-exact" $OUT/bench.log | head -30
