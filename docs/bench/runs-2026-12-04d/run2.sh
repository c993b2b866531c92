#!/bin/bash
# The tile over 9..16 rows (tile.SMALL_ROWS) with the A4 fma and the dual GEMMs: GPU tests, memcheck
# on the wgmma tile, then the Qwen3-8B FFN of the 4-bit formats and W8A8 beside bf16 cuBLAS.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1
mkdir -p $OUT; T0=$(date +%s)
timeout 240 python -m pytest -q -n 8 -p no:benchmark -p no:cacheprovider -rfE \
  tests/gpu/test_cuda_nvfp4_tile.py tests/gpu/test_cuda_all_rows.py tests/gpu/test_cuda_layer.py \
  tests/gpu/test_cuda_q2_0.py tests/gpu/test_cuda_pdl.py tests/gpu/test_cuda_nvfp4_mma.py \
  tests/gpu/test_torch_cuda.py tests/gpu/test_tp_cuda.py > $OUT/tests_gpu.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s)-T0 ))s"; tail -3 $OUT/tests_gpu.log
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 --print-limit 20 \
  python -m pytest -q -p no:benchmark -p no:cacheprovider -x tests/gpu/test_cuda_nvfp4_tile.py \
  -k "edge_rows or every_k_split or a4_matches or q2_matches" > $OUT/sanitizer.log 2>&1
echo "memcheck rc=$? $(( $(date +%s)-T0 ))s"; grep -a "ERROR SUMMARY\|passed\|failed" $OUT/sanitizer.log | tail -3
timeout 280 python -m metrale.bench --shape qwen3-8b --m 1,2,3,4,8,12,16,24,32,48,64,128,256,512,1024,4096 \
  --formats nvfp4,w4a4,q2_0,w8a8 --peers bf16 --kernels none --cell-seconds 1 --samples 5 --deadline 230 \
  --json $OUT/bench_qwen.json --md $OUT/bench_qwen.md > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 ))s"; grep -A8 "÷\|ratio" $OUT/bench.log | head -40
