#!/usr/bin/env bash
# The decode kernels with their first weight loads before the PDL wait (the W8A8 GEMMs' "weights
# before the wait" took 5-6 us off that FFN at one row), about 6 minutes: NVFP4's decode kernels
# (configs.NVFP4_FAST_RING_EARLY: the tree's; NVFP4_RUN_RING_EARLY: the chain's), Q2_0's
# (configs.Q2_0_DEC_RING_EARLY) and FP8 / BF16's (configs.FP8_BF16_DEC_W_EARLY), the last two
# tree and chain: every format's FFN but W8A8 at 1 / 2 rows on the routed tree (T), the tree with
# the early loads (U), the chain (C) and the chain with them (E), twice, alternating (the one-row
# parity the switch waits on). Every cell is checked bit for bit against the reference; the GPU
# tests of the forms that win are run_d_tests.sh.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for run in 1T 1U 1C 1E 2T 2U 2C 2E; do
v=${run:1}
timeout 100 python -c "
import sys; from metrale.cuda import configs
configs.NVFP4_RUN_RING_EARLY = int('$v' == 'E')
configs.NVFP4_FAST_RING_EARLY = configs.NVFP4_FAST_KERNELS if '$v' == 'U' else frozenset()
configs.Q2_0_DEC_RING_EARLY = configs.FP8_BF16_DEC_W_EARLY = int('$v' in 'UE')
from metrale.bench.run import main
sys.exit(main([*(['--chain'] if '$v' in 'CE' else []), '--shape', 'qwen3-8b', '--m', '1,2', '--formats', 'nvfp4,w4a4,q2_0,fp8,bf16',
  '--peers', 'bf16', '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '45',
  '--json', '$OUT/ring_$run.json'], prog='bench'))
" 2>&1 | grep -E "^\| (NVFP4 W4A16 \(|NVFP4 W4A4 \(|Q2_0 \(|FP8 W8A16 \(|BF16 \(|peer)|Error|error" | sed "s/^/$run /"
done
python -m metrale.bench --compare $OUT/ring_1T.json $OUT/ring_1U.json $OUT/ring_1C.json $OUT/ring_1E.json \
  $OUT/ring_2T.json $OUT/ring_2U.json $OUT/ring_2C.json $OUT/ring_2E.json 2>&1 | tail -12
