#!/usr/bin/env bash
# Session (e)'s run_c.sh from line 17 on (its first part ran in run_a.sh): NVFP4's mul.hi nibble
# decode (the chain GEMV tests with it, the chain FFN at 1..3 rows), Q2_0's pipelined chains
# (q2cp_dec_*, the chain FFN at 1, 2 rows).
export PYTHONPATH=.
bash <(sed -n '17,$p' docs/bench/runs-2026-12-07e/run_c.sh)
