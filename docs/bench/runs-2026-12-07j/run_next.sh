#!/usr/bin/env bash
# The next session's first call, on an H200 (performance.md's tables are the H200's): the routed
# W8A8 FFN with session (j)'s routing beside bf16 cuBLAS and gemlite's A8W8 int8 (carry
# wheels/gemlite-0.6.0.post2-py3-none-any.whl), at the tables' row counts, as
# ../runs-2026-12-07f/run_w8a8_tables.sh (about 8 minutes with gemlite's compile). Then
# run_next_b.sh; merge the JSON into docs/bench (metrale bench --merge, --report).
python -m pip install -q --no-deps --target /tmp/gl wheels/gemlite-*.whl || exit 3
export PYTHONPATH=.:/tmp/gl METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 540 python -m metrale.bench --shape qwen3-8b --m 1,4,8,16,32,64,128,256,1024,4096 --formats w8a8 \
  --peers bf16,gl-a8w8 --kernels none --cell-seconds 1 --samples 5 --deadline 420 \
  --json $OUT/w8a8_tables.json --md $OUT/w8a8_tables.md > $OUT/w8a8_tables.log 2>&1
echo "bench rc=$?"; grep -a "^| " $OUT/w8a8_tables.log | head -8
