#!/usr/bin/env bash
# The NVFP4 chain decode kernels with their rings' first slices copied before the PDL wait
# (configs.NVFP4_RUN_RING_EARLY = 1; the W8A8 GEMMs' "weights before the wait" took 5-6 us off
# that FFN at one row), about 5 minutes: the chain GEMV tests with it built, then the NVFP4 FFN at
# 1 / 2 / 3 rows on the routed tree (T), on the chain (C) and on the chain with it (E), twice,
# alternating: the one-row parity that the switch to the chain waits on.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python -m pytest -q -n 4 --tb=short -p no:benchmark tests/gpu/test_cuda_chain_gemv.py -k "ring_early" \
  2>&1 | grep -E "^FAILED|^E |passed|failed" | head -8
for run in 1T 1C 1E 2T 2C 2E; do
v=${run:1}
timeout 60 python -c "
import sys; from metrale.cuda import configs
configs.NVFP4_RUN_RING_EARLY = int('$v' == 'E')
from metrale.bench.run import main
sys.exit(main([*(['--chain'] if '$v' != 'T' else []), '--shape', 'qwen3-8b', '--m', '1,2,3', '--formats', 'nvfp4,w4a4',
  '--peers', 'bf16', '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '40',
  '--json', '$OUT/ring_$run.json'], prog='bench'))
" 2>&1 | grep -E "^\| (NVFP4|peer)|Error|error" | sed "s/^/$run /"
done
