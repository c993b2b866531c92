#!/usr/bin/env bash
# After `git apply docs/bench/runs-2026-12-07c/w8a8_tma_n256.patch` (the stream-K tier of 256
# activation rows, w8a8_tma_n256: W8A8 down at 129..256 rows in one row tile instead of two of
# n128; not committed: unmeasured, and it changes the routing): its GPU tests, then the Qwen3-8B
# W8A8 FFN with and without it. Keep the patch only where the FFN gains.
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 90 python -m pytest -q -x -n 8 tests/gpu/test_cuda_w8a8.py -k "tma or dual" 2>&1 | tail -2
A="--shape qwen3-8b --m 128,160,192,256 --formats w8a8 --peers bf16 --kernels none --cell-seconds 1 --samples 5"
for i in 1 2; do
  timeout 45 python -c "import sys; from metrale.bench.run import main; sys.exit(main(sys.argv[1:]))" $A --json $OUT/w8a8_n256_$i.json 2>&1 | grep "^| W8A8\|^| peer"
  timeout 45 python -c "import sys; from metrale.cuda import w8a8; w8a8.TMA_TIERS.pop(256); from metrale.bench.run import main; sys.exit(main(sys.argv[1:]))" $A --json $OUT/w8a8_n128_$i.json 2>&1 | grep "^| W8A8\|^| peer"
done
