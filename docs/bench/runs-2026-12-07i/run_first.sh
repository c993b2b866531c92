#!/usr/bin/env bash
# Session (i)'s first call where the device comes late (under 10 minutes): run_b.sh (the SiLU
# step with the compact table in shared memory: tests, then the FFN twice each way), then one
# alternation of run_a.sh's benchmarks (pair128 A / B / C at 96 / 128 rows, stream-K R / T at
# 64..256 rows); run_a.sh's Nsight part comes in the next call.
bash "$(dirname "$0")/run_b.sh"
export PYTHONPATH=. OPENBLAS_NUM_THREADS=1
sed -n '/^bench() {/,/^}/p' "$(dirname "$0")/run_a.sh" > /tmp/bench_fn.sh
source /tmp/bench_fn.sh
PAIR="configs.W8A8_TMA_PAIR_MAX_ROWS = 64; configs.W8A8_WGMMA_ROUTED['pair'] = (*configs.W8A8_WGMMA_ROUTED['pair'], 'w8a8_wgmma_128x192')"
TKS="configs.W8A8_TMA_KS, t = configs.W8A8_TMA_KS_VARIANT; configs.W8A8_TMA_TIERS.update(t)"
bench pair128_1A "" 96,128 25
bench pair128_1B "$PAIR" 96,128 25
bench pair128_1C "$PAIR; w8a8.FUSED_SILU = True" 96,128 25
bench tks_1R "" 64,128,256 30
bench tks_1T "$TKS" 64,128,256 30
