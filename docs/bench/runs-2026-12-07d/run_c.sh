#!/usr/bin/env bash
# W8A8 (queued from runs-2026-12-07c/run_all.sh): gate + up at 64..128 rows on one launch of the
# tile pair against the stream-K pair (TMA_PAIR_MAX_ROWS 128 / 64, pair_pays forced true); then
# the down stream-K tier of 256 activation rows (w8a8_tma_n256.patch, applied to the device's
# copy of the tree only) with its GPU tests and the FFN at 128..256 rows with and without it.
D=docs/bench/runs-2026-12-07c
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
A="--shape qwen3-8b --m 64,96,128 --formats w8a8 --peers bf16 --kernels none --cell-seconds 1 --samples 5"
for mx in 128 64 128 64; do
  echo "TMA_PAIR_MAX_ROWS=$mx"
  timeout 40 python -c "import sys; from metrale.cuda import configs; configs.W8A8_TMA_PAIR_MAX_ROWS = $mx; from metrale.cuda import w8a8; w8a8.pair_pays = lambda m, n: True; from metrale.bench.run import main; sys.exit(main(sys.argv[1:]))" $A --json $OUT/w8a8_pairmax_$mx.json 2>&1 | grep "^| W8A8\|^| peer"
done
if patch -p1 --dry-run -s < $D/w8a8_tma_n256.patch >/dev/null 2>&1; then
  patch -p1 -s < $D/w8a8_tma_n256.patch && bash $D/run2.sh
else
  echo "w8a8_tma_n256.patch does not apply"
fi
