#!/usr/bin/env bash
# Session (j)'s sixth and seventh calls: the tree's decode kernels with every early load (U)
# against none (T) at 1 / 2 rows, alternating (run_d.sh's U had run out of its deadline compiling),
# then run_d_tests.sh. The early-load switches as at commit 5037d6f (all off) but for each run's.
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
i=0
for v in U T U T U; do
i=$((i + 1))
timeout 150 python -c "
import sys; from metrale.cuda import configs
configs.NVFP4_FAST_RING_EARLY = configs.NVFP4_FAST_KERNELS if '$v' == 'U' else frozenset()
configs.Q2_0_DEC_RING_EARLY = configs.FP8_BF16_DEC_W_EARLY = int('$v' == 'U')
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '1,2', '--formats', 'nvfp4,w4a4,q2_0,fp8,bf16',
  '--peers', 'bf16', '--kernels', 'none', '--cell-seconds', '0.5', '--samples', '5', '--deadline', '130',
  '--json', '$OUT/ring_${i}$v.json'], prog='bench'))
" 2>&1 | grep -E "^\| (NVFP4 W4A16 \(|NVFP4 W4A4 \(|Q2_0 \(|FP8 W8A16 \(|BF16 \(|peer)|rror" | head -6 | sed "s/^/$v /"
done
timeout 120 bash docs/bench/runs-2026-12-07i/run_d_tests.sh 2>&1 | tail -6
