"""Converter throughput: MB of source per second for each format (``metrale convert``).

Generates a Llama-style bf16 checkpoint (streaming, seeded), converts it to every format with
1 and N workers and prints a Markdown table. Usage:

    python tools/bench_convert.py --hidden 2048 --inter 5632 --layers 2 --workers 1,2
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from metrale.checkpoint.convert import FORMATS, ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import make_example_checkpoint


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    a = ap.parse_args(argv)
    root = Path(a.dir or tempfile.mkdtemp(prefix="metrale-bench-convert-"))
    src = make_example_checkpoint(
        root / "src",
        hidden=a.hidden,
        intermediate=a.inter,
        layers=a.layers,
        vocab=a.vocab,
        heads=max(1, a.hidden // 128),
        kv_heads=max(1, a.hidden // 512),
        shards=a.shards,
    )
    size = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    print(
        f"date {datetime.date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, python {platform.python_version()}"
    )
    print(f"command: python tools/bench_convert.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(
        f"source: hidden {a.hidden}, intermediate {a.inter}, {a.layers} layers, vocab {a.vocab}, bf16, "
        f"{size / 1e6:.1f} MB in {a.shards} shards\n"
    )
    print("| format | workers | seconds | source MB/s | FFN (quantized) MB/s | output MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for fmt in a.formats.split(","):
        for w in (int(x) for x in a.workers.split(",")):
            dst = root / f"{fmt}-{w}"
            t0 = time.perf_counter()
            rep = convert_checkpoint(src, dst, ConvertOptions(fmt, ffn_only=True, workers=w))
            dt = time.perf_counter() - t0
            qbytes = sum(t.source_bytes for t in rep.quantized)
            print(
                f"| {fmt} | {w} | {dt:.2f} | {size / 1e6 / dt:.1f} | {qbytes / 1e6 / dt:.1f} | "
                f"{rep.output_bytes / 1e6:.1f} |",
                flush=True,
            )
            shutil.rmtree(dst)
    if a.dir is None:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
