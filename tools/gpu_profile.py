#!/usr/bin/env python3
"""Nsight Compute summaries of the FFN kernels at the Qwen3-8B shape (GPU machine).

The parent runs ``ncu`` over this script in ``--child`` mode; the child builds one layer per
format (the benchmark's random weights, ``metrale.bench.cases``), warms every (format, m) cell
up, then runs each cell once between cudaProfilerStart/Stop, so ncu profiles exactly the launches of
``DenseFfnLayer.route(m)`` (caches flushed between replays: weights come from HBM).

    python tools/gpu_profile.py --out $OUT [--cells nvfp4:1,8 w8a8:1] [--shape qwen3-8b]

Writes ``ncu.txt`` (ncu's report: SpeedOfLight, LaunchStats, Occupancy, WarpStateStats,
MemoryWorkloadAnalysis per kernel), ``ncu.csv`` (raw metrics), ``launches.txt`` (the cells and
their kernels in launch order) and ``ncu_summary.md`` (one line per kernel: duration, DRAM
throughput, achieved bandwidth, issue-slot use, top stall).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

from metrale.reference.formats.spec import FORMAT_ALIASES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_CELLS = ["nvfp4:1,2,8,32", "w4a4:1,4", "w8a8:1,8", "q2_0:1,4"]
SECTIONS = [
    "SpeedOfLight",
    "LaunchStats",
    "Occupancy",
    "WarpStateStats",
    "MemoryWorkloadAnalysis",
    "ComputeWorkloadAnalysis",
    "InstructionStats",
]
METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
    "smsp__average_warp_latency_issue_stalled_long_scoreboard",
    "smsp__average_warp_latency_issue_stalled_short_scoreboard",
    "smsp__average_warp_latency_issue_stalled_barrier",
    "smsp__average_warp_latency_issue_stalled_wait",
    "smsp__average_warp_latency_issue_stalled_math_pipe_throttle",
    "smsp__average_warp_latency_issue_stalled_mio_throttle",
    "smsp__average_warp_latency_issue_stalled_lg_throttle",
    "smsp__average_warp_latency_issue_stalled_not_selected",
    "smsp__average_warp_latency_issue_stalled_selected",
    "smsp__average_warp_latency_issue_stalled_no_instruction",
]


def parse_cells(specs: list[str]) -> list[tuple[str, int]]:
    cells = []
    for spec in specs:
        fmt, _, ms = spec.partition(":")
        cells += [(FORMAT_ALIASES.get(fmt, fmt), int(m)) for m in ms.split(",") if m]
    return cells


def child(args: argparse.Namespace) -> int:
    import cupy as cp

    from metrale.backend import get_backend
    from metrale.bench import cases as bc
    from metrale.reference.context import ForwardContext
    from metrale.reference.layer import FfnConfig

    os.environ["METRALE_WEIGHT_QUANT"] = "w4a4"
    from metrale.reference.tiers import weight_quantization

    weight_quantization.cache_clear()
    hidden, inter = bc.SHAPES[args.shape]
    cfg = FfnConfig(hidden, inter)
    be = get_backend("cuda")
    cells = parse_cells(args.cells)
    rows = max([64, *(m for _, m in cells)])
    ctx = ForwardContext(cfg, backend=be, max_rows=rows)
    x = be.rows(bc.x_rows(hidden, 0, args.shape, rows), hidden)
    layers = {}
    for fmt in dict.fromkeys(f for f, _ in cells):
        layers[fmt] = bc.make_layer(fmt, bc.build_host(fmt, hidden, inter, 0, args.shape), cfg, be)
    for fmt, m in cells:  # warm-up: compile, allocate, autotune nothing
        for _ in range(2):
            layers[fmt].route(m)[1](x[:m], ctx)
    cp.cuda.Device().synchronize()
    lines = []
    for fmt, m in cells:
        entry, fn = layers[fmt].route(m)
        n0 = len(be.launches)
        cp.cuda.runtime.profilerStart()
        fn(x[:m], ctx)
        cp.cuda.Device().synchronize()
        cp.cuda.runtime.profilerStop()
        lines.append(f"{fmt} m={m} {entry}: {' '.join(be.launches[n0:])}")
    Path(args.out, "launches.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def summarize(csv_text: str, launches: list[str]) -> str:
    rows = list(csv.DictReader(io.StringIO(csv_text[csv_text.find('"ID"') :])))
    by_id: dict[str, dict[str, str]] = {}
    for r in rows:
        d = by_id.setdefault(r["ID"], {"kernel": r["Kernel Name"]})
        d[r["Metric Name"]] = r["Metric Value"].replace(",", "")
    out = [
        "| # | kernel | grid × block | regs | µs | DRAM GB/s | DRAM % peak | SM % | issue active % "
        "| warps active % | top stalls (cycles/instr) |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for i, (_kid, d) in enumerate(sorted(by_id.items(), key=lambda kv: int(kv[0]))):

        def f(name: str, d: dict[str, str] = d) -> float:
            try:
                return float(d.get(name, "nan"))
            except ValueError:
                return float("nan")

        ns = f("gpu__time_duration.sum")
        gbs = f("dram__bytes_read.sum") / ns if ns else float("nan")
        stalls = sorted(
            ((k.split("stalled_")[1], f(k)) for k in d if "stalled_" in k), key=lambda kv: -kv[1]
        )[:3]
        st = ", ".join(f"{k} {v:.1f}" for k, v in stalls)
        out.append(
            f"| {i} | {d['kernel'][:40]} | {d.get('launch__grid_size')} × {d.get('launch__block_size')} | "
            f"{d.get('launch__registers_per_thread')} | {ns / 1e3:.2f} | {gbs:.0f} | "
            f"{f('dram__throughput.avg.pct_of_peak_sustained_elapsed'):.0f} | "
            f"{f('sm__throughput.avg.pct_of_peak_sustained_elapsed'):.0f} | "
            f"{f('smsp__issue_active.avg.pct_of_peak_sustained_active'):.0f} | "
            f"{f('sm__warps_active.avg.pct_of_peak_sustained_active'):.0f} | {st} |"
        )
    cells = "\n".join(f"* {x}" for x in launches)
    return f"Cells (launch order):\n\n{cells}\n\n" + "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--cells", nargs="*", default=DEFAULT_CELLS, help="FORMAT:m1,m2 ...")
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.child:
        return child(args)
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    me = [sys.executable, __file__, "--child", "--out", args.out, "--shape", args.shape]
    me += ["--cells", *args.cells]
    base = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--cache-control", "all"]
    sec = [a for s in SECTIONS for a in ("--section", s)]
    p = subprocess.run([*base, *sec, *me], capture_output=True, text=True, cwd=ROOT)
    Path(args.out, "ncu.txt").write_text(p.stdout + p.stderr)
    if p.returncode:
        print(p.stdout[-3000:], p.stderr[-3000:])
        return p.returncode
    q = subprocess.run(
        [*base, "--csv", "--metrics", ",".join(METRICS), *me], capture_output=True, text=True, cwd=ROOT
    )
    Path(args.out, "ncu.csv").write_text(q.stdout)
    launches = Path(args.out, "launches.txt").read_text().splitlines()
    s = summarize(q.stdout, launches)
    Path(args.out, "ncu_summary.md").write_text(s)
    print(s)
    return q.returncode


if __name__ == "__main__":
    sys.exit(main())
