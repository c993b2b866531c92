#!/usr/bin/env bash
# One device call for everything queued here (starts are scarce): run_next.sh, then the W8A8
# n256 patch applied to the device's copy of the tree (never to the checkout) and run2.sh.
D=docs/bench/runs-2026-12-07c
bash $D/run_next.sh
if patch -p1 --dry-run -s < $D/w8a8_tma_n256.patch >/dev/null 2>&1; then
  patch -p1 -s < $D/w8a8_tma_n256.patch && bash $D/run2.sh
else
  echo "w8a8_tma_n256.patch does not apply"
fi
