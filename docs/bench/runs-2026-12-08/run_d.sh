#!/usr/bin/env bash
# Session (k)'s second call (any H100 / H200; about 4 minutes), after run_c.sh: the stream-K
# owner's gathered fixup (configs.W8A8_TMA_GATHER, off until this run) and the 8-block chain probe with its
# copies swizzled conflict-free: the stream-K / dual / stream-K SiLU GPU tests and the probe's,
# the probe's decode timing, the W8A8 FFN with the gathered fixup (G1) against one piece after
# another (G0) at Qwen3-8B 64 / 128 and Llama-3-8B 96 rows, twice, the stream-K SiLU form with it
# (G1S), and tma_balance.py with each fixup.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python -m pytest -q -n 6 --tb=line -p no:benchmark tests/gpu/test_cuda_chain8_probe.py \
  tests/gpu/test_cuda_w8a8.py -k "chain8 or stream_k or dual_matches or tma or many_pieces" 2>&1 \
  | grep -E "^FAILED|^E |passed|failed|rror" | head -20
timeout 100 python docs/bench/runs-2026-12-08/ch8_time.py 2>&1 | tail -4
bench() {  # tag, shape, rows, setup python
timeout 50 python -c "
import sys; from metrale.cuda import configs, w8a8
$4
from metrale.bench.run import main
sys.exit(main(['--shape', '$2', '--m', '$3', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '40', '--json', '$OUT/$1.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$1 /"
}
for i in 1 2; do
bench gq_${i}G0 qwen3-8b 64,128 ""
bench gq_${i}G1 qwen3-8b 64,128 "configs.W8A8_TMA_GATHER = True"
bench gl_${i}G0 llama3-8b 96 ""
bench gl_${i}G1 llama3-8b 96 "configs.W8A8_TMA_GATHER = True"
done
# the stream-K SiLU form again with the gathered fixup (its epilogue lengthened the owners' tail)
bench gq_G1S qwen3-8b 64,128 "configs.W8A8_TMA_GATHER = True; w8a8.TMA_SILU = True"
bench gl_G1S llama3-8b 96 "configs.W8A8_TMA_GATHER = True; w8a8.TMA_SILU = True"
timeout 60 python docs/bench/runs-2026-12-08/tma_balance.py 2>&1 | tail -9
GATHER=1 timeout 60 python docs/bench/runs-2026-12-08/tma_balance.py 2>&1 | tail -9
