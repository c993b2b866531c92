#!/usr/bin/env bash
# The next session's first call (about 5 minutes): run_pair128.sh (the 128x192 tile pair, with
# and without the SiLU step, against the stream-K pair at 80..128 rows), then Nsight Compute of
# the routed W8A8 FFN at 128 and 256 rows on this GPU (tools/gpu_profile.py: unmodified clocks;
# per-kernel durations and throughput, where the 0.90 / 0.83x cuBLAS of those rows goes).
bash "$(dirname "$0")/run_pair128.sh"
export PYTHONPATH=.
timeout 300 python tools/gpu_profile.py --out $OUT --cells w8a8:128,256 2>&1 | tail -2
head -40 $OUT/ncu_summary.md 2>/dev/null
