#!/usr/bin/env bash
# Session (k)'s first call (any H100 / H200; under 10 minutes): the GPU tests of the stream-K
# SiLU form and of the 8-block chain probe kernels, the probe's decode timing (ch8_time.py), the
# W8A8 FFN with the stream-K SiLU form (S) against routed (A) once each, and tma_balance.py.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python -m pytest -q -n 6 --tb=line -p no:benchmark tests/gpu/test_cuda_chain8_probe.py \
  "tests/gpu/test_cuda_w8a8.py::test_gemv_dual_silu_quant_matches_reference" \
  tests/gpu/test_cuda_w8a8.py::test_gemv_dual_silu_quant_refuses -k "chain8 or tma or refuses" 2>&1 \
  | grep -E "^FAILED|^E |passed|failed|rror" | head -20
timeout 150 python docs/bench/runs-2026-12-08/ch8_time.py 2>&1 | tail -5
bench() {  # tag, shape, rows, setup python
timeout 60 python -c "
import sys; from metrale.cuda import configs, w8a8
$4
from metrale.bench.run import main
sys.exit(main(['--shape', '$2', '--m', '$3', '--formats', 'w8a8', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '45', '--json', '$OUT/$1.json'], prog='bench'))
" 2>&1 | grep -E "^\| (W8A8 \(|peer)|Error|error" | sed "s/^/$1 /"
}
bench q_A qwen3-8b 33,64 ""
bench q_S qwen3-8b 33,64 "w8a8.TMA_SILU = True"
bench l_A llama3-8b 96,128 ""
bench l_S llama3-8b 96,128 "w8a8.TMA_SILU = True"
timeout 60 python docs/bench/runs-2026-12-08/tma_balance.py 2>&1 | tail -9
