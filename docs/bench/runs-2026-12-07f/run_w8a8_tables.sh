#!/usr/bin/env bash
# After run_c.sh's W8A8 tests pass: the W8A8 rows of the tables on an H200 with the
# routing of 2026-12-07 (c) (the SiLU tile off: it measured no faster), beside bf16 cuBLAS and
# gemlite's A8W8 int8 (carry wheels/gemlite-0.6.0.post2-py3-none-any.whl), Qwen3-8B, one run.
python -m pip install -q --no-deps --target /tmp/gl wheels/gemlite-*.whl || exit 3
export PYTHONPATH=.:/tmp/gl METRALE_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OPENBLAS_NUM_THREADS=1 timeout 540 python -m metrale.bench --shape qwen3-8b \
  --m 1,4,8,16,32,64,128,256,1024,4096 --formats w8a8 --peers bf16,gl-a8w8 --kernels none \
  --cell-seconds 1 --samples 5 --deadline 420 --json $OUT/w8a8_tables.json --md $OUT/w8a8_tables.md \
  > $OUT/w8a8_tables.log 2>&1
echo "bench rc=$?"; grep -a "^| " $OUT/w8a8_tables.log | head -8
