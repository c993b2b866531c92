#!/usr/bin/env bash
# Instruction mix of the fast NVFP4 decode kernels at one row on the Qwen3-8B down projection,
# tree (nvfp4_a16f_r1) against chain (nvfp4_a16fc_r1, one lane per run): ncu's executed
# instructions per opcode, then their SASS (opcode histograms of the whole kernels).
export PYTHONPATH=.
D=docs/bench/runs-2026-12-06b
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
PROJ=down timeout 200 ncu --kernel-name regex:nvfp4_a16fc?_r1 --launch-skip 0 --launch-count 4 \
  --section InstructionStats --section WarpStateStats --section SpeedOfLight --print-details all \
  --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum,smsp__thread_inst_executed.sum \
  python $D/gemv_prof.py >"$OUT/ncu_instr_down.txt" 2>&1
grep -E "^  nvfp4|Executed Instructions  |inst_executed.sum|Duration" "$OUT/ncu_instr_down.txt" | head -30
for f in ~/.cache/metrale/kernels/nvfp4_gemv.cu.*; do
  for k in nvfp4_a16f_r1 nvfp4_a16fc_r1; do
    cuobjdump -sass -fun $k "$f" >"$OUT/sass_$k.txt" 2>/dev/null
    n=$(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$OUT/sass_$k.txt")
    [ "$n" -gt 0 ] || continue
    echo "== $k: $n instructions"
    grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' "$OUT/sass_$k.txt" | awk '{print $NF}' \
      | sed 's/\..*//' | sort | uniq -c | sort -rn | head -24 | tr '\n' ' '; echo
  done
done
