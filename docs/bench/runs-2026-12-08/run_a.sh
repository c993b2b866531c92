#!/usr/bin/env bash
# Session (k)'s first call (any H100 / H200; under 10 minutes): the GPU tests of the stream-K pair
# with the SiLU step in its epilogue (w8a8_tma_silu_n{64,128}, forced at m = 1..300 and routed),
# then the W8A8 FFN with it (S: w8a8.TMA_SILU) against the routed stream-K pair + SiLU-quantize
# step (A) at 33 / 48 / 64 rows (Qwen3-8B) and 96 / 128 rows (Llama-3-8B, where the stream-K pair
# serves past 64 rows), twice, alternating, every cell bit-exact; then how evenly the stream-K
# CTAs finish (tma_balance.py); then Nsight Compute of the routed W8A8 FFN at 64 / 128 / 256 rows
# (../runs-2026-12-07i/run_p.sh).
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 4 --tb=line -p no:benchmark tests/gpu/test_cuda_w8a8.py \
  -k "tma or refuses" 2>&1 | grep -E "^FAILED|^E |passed|failed|rror" | head -20
bench() {  # tag, shape, rows, setup python
timeout 80 python -c "
import sys; from metrale.cuda import configs, w8a8
$4
from metrale.bench.run import main
sys.exit(main(['--shape', '$2', '--m', '$3', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '60', '--json', '$OUT/$1.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$1 /"
}
S="w8a8.TMA_SILU = True"
for i in 1 2; do
bench q_${i}A qwen3-8b 33,48,64 ""
bench q_${i}S qwen3-8b 33,48,64 "$S"
bench l_${i}A llama3-8b 96,128 ""
bench l_${i}S llama3-8b 96,128 "$S"
done
timeout 90 python docs/bench/runs-2026-12-08/tma_balance.py 2>&1 | tail -12
bash docs/bench/runs-2026-12-07i/run_p.sh
