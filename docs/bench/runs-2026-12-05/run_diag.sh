#!/usr/bin/env bash
# Diagnostics: the failing Q2_0 chain-tile and FP8 limb-premise tests with their messages, the
# SASS of the chain tile (opcode histogram of w4c_gemm_f16 / f8), ncu stall reasons of NF = 16.
export PYTHONPATH=.
P=docs/bench/runs-2026-12-05/chain_tile.py
METRALE_REQUIRE_GPU=1 timeout 200 python -m pytest "tests/gpu/test_cuda_chain_tile.py::test_chain_tile_q2" \
    tests/gpu/test_fp8_limb_block_dot.py -n 8 -p no:benchmark -p no:cacheprovider -q --tb=short >"$OUT/fail.txt" 2>&1
grep -E "^E |passed|failed" "$OUT/fail.txt" | cut -c1-300 | head -40
for f in ~/.cache/metrale/kernels/*; do
  if cuobjdump -sass "$f" 2>/dev/null | grep -q "Function : w4c_gemm_f16"; then
    for k in w4c_gemm_f16 w4c_gemm_f8 w4c_gemm_f1 w8c_gemm_f8; do
      cuobjdump -sass -fun $k "$f" >"$OUT/sass_$k.txt" 2>&1
      echo "== $k: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$OUT/sass_$k.txt") instructions"
    done
    grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' "$OUT/sass_w4c_gemm_f16.txt" | awk '{print $NF}' \
      | sed 's/\..*//' | sort | uniq -c | sort -rn | head -30
    break
  fi
done
MS=4096 VARS=chain16 TAG=_ncu timeout 150 ncu --kernel-name regex:w4c_gemm_f16 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --print-details all \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio python $P >"$OUT/ncu_stall.txt" 2>&1
grep -E "stalled_.*ratio|Stall|stall" "$OUT/ncu_stall.txt" | grep -vE " 0(\.0+)?$" | head -40
