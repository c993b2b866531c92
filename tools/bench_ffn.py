#!/usr/bin/env python3
"""The FFN benchmark from a source checkout: ``metrale bench`` (``metrale/bench``) with the
same options. ``python tools/bench_ffn.py --help`` lists them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metrale.bench import main

if __name__ == "__main__":
    sys.exit(main(prog="tools/bench_ffn.py"))
