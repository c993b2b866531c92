#!/usr/bin/env bash
# The next session's first call (about 5 minutes): run_pair128.sh (the 128x192 tile pair, with
# and without the SiLU step, against the stream-K pair at 80..128 rows), then Nsight Compute of
# the routed W8A8 FFN at 1, 64, 128 and 256 rows on this GPU (tools/gpu_profile.py: unmodified clocks;
# per-kernel durations and throughput: where 0.90 / 0.83x cuBLAS at 128 / 256 rows goes, and
# why the GEMMs stream ~2.3 TB/s at 64 rows against 3.3-3.4 at one). Then, as its own call,
# ../runs-2026-12-07c/run3.sh (its ncu lines now with --clock-control none: the chain
# tile at 64 rows and the chain decode at one row, stall samples per SASS instruction), and
# run_ks.sh and run_tks.sh (split K and stream-K with 2 / 4 K tiles per stage), and
# ../runs-2026-12-07g/run_next.sh (its FP8 / BF16 chain decode timing, parts read as float4:
# tested, not yet timed).
bash "$(dirname "$0")/run_pair128.sh"
export PYTHONPATH=.
timeout 300 python tools/gpu_profile.py --out $OUT --cells w8a8:1,64,128,256 2>&1 | tail -2
head -40 $OUT/ncu_summary.md 2>/dev/null
