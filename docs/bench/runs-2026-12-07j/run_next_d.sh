#!/usr/bin/env bash
# The NVFP4 / W4A4 fast decode kernels at three rows with their rings' first items before the PDL
# wait (E: the routed set plus ("a16", 3), ("a4", 3)) against the routed set (R), twice,
# alternating, about 3 minutes. The kernels are the GPU-tested all-early forms
# (test_fast_kernels_ring_early builds them).
export PYTHONPATH=. METRALE_REQUIRE_GPU=1 OPENBLAS_NUM_THREADS=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for run in 1R 1E 2R 2E; do
timeout 100 python -c "
import sys; from metrale.cuda import configs
if '${run:1}' == 'E': configs.NVFP4_FAST_RING_EARLY = configs.NVFP4_FAST_RING_EARLY | {('a16', 3), ('a4', 3)}
from metrale.bench.run import main
sys.exit(main(['--shape', 'qwen3-8b', '--m', '3', '--formats', 'nvfp4,w4a4', '--peers', 'bf16', '--kernels', 'none',
  '--cell-seconds', '0.5', '--samples', '5', '--deadline', '80', '--json', '$OUT/r3_$run.json'], prog='bench'))
" 2>&1 | grep -E "^\| (NVFP4 W4A16 \(|NVFP4 W4A4 \(|peer)|Error|error" | sed "s/^/$run /"
done
python -m metrale.bench --compare $OUT/r3_1R.json $OUT/r3_1E.json $OUT/r3_2R.json $OUT/r3_2E.json 2>&1 | tail -3
