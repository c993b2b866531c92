#!/usr/bin/env bash
# The next session's first call (under 10 minutes): run_b.sh (the activation step with the
# compact table in shared memory: tests, the steps alone, the W8A8 FFN with it). Then, as their
# own calls: run_a.sh (the 128x192 tile pair, stream-K with 2 K tiles per unit, Nsight of the
# W8A8 FFN at 64 / 128 / 256 rows), ../runs-2026-12-07h/run_ks.sh, ../runs-2026-12-07c/run3.sh,
# the float4 timing of ../runs-2026-12-07g/run_next.sh (its part after the tests).
bash "$(dirname "$0")/run_b.sh"
