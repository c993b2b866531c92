#!/usr/bin/env bash
# W8A8 at 33..64 rows (where gemlite's A8W8 was faster at 64 rows on the H200), under 5 minutes:
# the routed stream-K pair + SiLU-quantize (A) against gate + up on the 128x192 pair tile with the
# SiLU step in its epilogue from 33 rows (P: w8a8.GEMM_MIN_ROWS = 33;
# down stays on stream-K) and the stream-K build with 2 K tiles per unit (T), twice, alternating.
# Every cell is checked bit for bit against the reference; route a winner only after
# tests/gpu/test_cuda_w8a8.py passes with it.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bench() {  # tag, setup python
timeout 90 python -c "
import sys; from metrale.cuda import configs, w8a8
$2
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '33,48,64', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '60', '--json', '$OUT/$1.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$1 /"
}
P="w8a8.GEMM_MIN_ROWS = 33"
TKS="configs.W8A8_TMA_KS, t = configs.W8A8_TMA_KS_VARIANT; configs.W8A8_TMA_TIERS.update(t)"
for i in 1 2; do
bench lo_${i}A ""
bench lo_${i}P "$P"
bench lo_${i}T "$TKS"
done
python -m metrale.bench --compare $OUT/lo_1A.json $OUT/lo_1P.json $OUT/lo_1T.json $OUT/lo_2A.json $OUT/lo_2P.json \
  $OUT/lo_2T.json 2>&1 | tail -4
