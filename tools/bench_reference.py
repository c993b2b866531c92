"""Time one dense FFN of Qwen3-8B shape on the reference (numpy) backend.

hidden 4096, intermediate 12288, NVFP4 weights without ``input_scale`` (so every row runs A16),
SiLU. The weights are quantized once, outside the timing; each timed call runs the layer's own
entry point for m rows (``DenseFfnLayer.__call__``: m = 1 -> ``forward``, m = 32 ->
``forward_km``). Prints a Markdown table of the median and min over ``--repeats`` runs.

    python tools/bench_reference.py [--rows 1 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from metrale.backend import get_backend
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.elements import BF16
from metrale.reference.formats import Nvfp4Weight
from metrale.reference.layer import DenseFfnLayer, FfnWeights

HIDDEN = 4096
INTER = 12288


def build_layer(seed: int = 0, progress: Progress | None = None) -> DenseFfnLayer:
    """Random NVFP4 gate/up [INTER, HIDDEN] and down [HIDDEN, INTER], quantized once (one
    step of ``progress`` per weight)."""
    rng = np.random.default_rng(seed)
    task = progress.add_task("quantizing gate_proj, up_proj, down_proj", total=3) if progress else None

    def q(n: int, k: int, name: str) -> Nvfp4Weight:
        w = (rng.standard_normal((n, k), dtype=np.float32) * np.float32(0.02)).astype(np.float32)
        out = Nvfp4Weight.quantize(w, name=name)
        if progress is not None and task is not None:
            progress.advance(task)
        return out

    weights = FfnWeights(
        q(INTER, HIDDEN, "gate_proj"), q(INTER, HIDDEN, "up_proj"), q(HIDDEN, INTER, "down_proj")
    )
    return DenseFfnLayer(FfnConfig(HIDDEN, INTER), weights=weights, backend=get_backend("reference"))


def time_rows(
    layer: DenseFfnLayer, m: int, repeats: int, seed: int = 1
) -> tuple[list[float], list[float], str]:
    """Wall and CPU times (s, ``time.process_time``: every thread of the process) of
    ``repeats`` calls on m random rows, after one warm-up call; and the entry point's kernels
    (from the launch log). On a shared machine the CPU time is the wall time the call would
    take with a core to itself."""
    x = np.random.default_rng(seed).standard_normal((m, HIDDEN), dtype=np.float32).astype(BF16)
    ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=max(64, m))
    layer(x, ctx)  # warm-up (table load, BLAS threads)
    layer.backend.launches.clear()
    layer(x, ctx)
    groups = [(k, len(list(g))) for k, g in itertools.groupby(layer.backend.launches)]
    kernels = ", ".join(f"{k} ×{c}" if c > 1 else k for k, c in groups)
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        layer(x, ctx)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return times, cpu, kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    ) as progress:
        layer = build_layer(progress=progress)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(
        f"quantized 3 NVFP4 weights ({HIDDEN}x{INTER}) in {time.perf_counter() - t0:.1f} s (not timed); "
        f"{os.cpu_count()} CPUs, load average {load} (1, 5, 15 min)\n"
    )
    print("| m | kernels launched | median (s) | min (s) | ms per row | CPU median (s) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for m in args.rows:
        times, cpu, kernels = time_rows(layer, m, args.repeats)
        med = statistics.median(times)
        print(
            f"| {m} | {kernels} | {med:.3f} | {min(times):.3f} | {1e3 * med / m:.1f} "
            f"| {statistics.median(cpu):.3f} |"
        )


if __name__ == "__main__":
    main()
