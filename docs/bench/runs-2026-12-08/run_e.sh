#!/usr/bin/env bash
# run_d.sh cut to what the session's last device minutes hold (about 2.5 minutes): the stream-K
# and probe GPU tests, the probe's decode timing, the W8A8 FFN G0 / G1 once at Qwen3-8B 64 / 128.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 110 python -m pytest -q -n 6 --tb=line -p no:benchmark tests/gpu/test_cuda_chain8_probe.py \
  tests/gpu/test_cuda_w8a8.py -k "chain8_a16 or stream_k or dual_matches" 2>&1 \
  | grep -E "^FAILED|^E |passed|failed|rror" | head -20
timeout 50 python docs/bench/runs-2026-12-08/ch8_time.py 2>&1 | tail -4
bench() {  # tag, shape, rows, setup python
timeout 40 python -c "
import sys; from metrale.cuda import configs, w8a8
$4
from metrale.bench.run import main
sys.exit(main(['--shape', '$2', '--m', '$3', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '30', '--json', '$OUT/$1.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$1 /"
}
bench gq_G0 qwen3-8b 64,128 ""
bench gq_G1 qwen3-8b 64,128 "configs.W8A8_TMA_GATHER = True"
