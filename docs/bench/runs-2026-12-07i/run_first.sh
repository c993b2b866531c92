#!/usr/bin/env bash
# The next session's first call (under 10 minutes): run_b.sh (the activation step with the
# compact table in shared memory: GPU tests of every new kernel, the steps alone, the W8A8 FFN
# with it). Then, each its own call: run_a.sh (the 128x192 tile pair, the SiLU epilogue with the
# compact table, stream-K with 2 K tiles per unit), run_p.sh (Nsight of the W8A8 FFN at 64 / 128 /
# 256 rows), run_c.sh (act_mul_st in the NVFP4 / Q2_0 chain FFNs), run_d.sh (the chain decode's
# ring before the PDL wait), ../runs-2026-12-07h/run_ks.sh,
# ../runs-2026-12-07c/run3.sh, and the float4 timing at the end of ../runs-2026-12-07g/run_next.sh.
bash "$(dirname "$0")/run_b.sh"
