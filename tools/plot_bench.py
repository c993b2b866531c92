#!/usr/bin/env python3
"""Redraw the benchmark's PNG from its JSON (``metrale.bench.plot``):

python tools/plot_bench.py bench_ffn.json docs/bench_ffn.png
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metrale.bench.plot import main

if __name__ == "__main__":
    sys.exit(main())
