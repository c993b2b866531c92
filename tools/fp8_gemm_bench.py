#!/usr/bin/env python3
"""Time the FP8 (W8A16) and BF16 overlay projections at prefill sizes, the K-split tensor-core
kernels (``{fp8,bf16}_mma_nt*``, fp8_bf16_gemv.cu) against the prefill GEMM (fp8_bf16_mma.cu on
mma_gemm.cuh's wide mode) and its table variants, beside bf16 cuBLAS (torch) -- GPU machine only.

One FFN's projections (gate, up: N = intermediate, K = hidden; down: N = hidden, K =
intermediate) through ``w8a16_gemm`` / ``dense_gemm`` for each m. Exactness: the old and new
paths' bits equal on every row; the rows of a smaller m equal the first rows of the largest m
(batch invariance); ``--ref-rows`` rows sampled across the largest m's chunks equal the numpy
reference (``project``). Timed by CUDA events around the host launches (no graphs), median of
``--iters`` (one run for the old path above 512 rows: it takes up to a second).

    python tools/fp8_gemm_bench.py [--shape qwen3-8b] [--m 8,16,64,512,4096] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: Read-only stream bandwidth of an H200 the floors are computed with (docs/performance.md).
STREAM_BYTES_S = 4.4e12


def _time(fn: Any, iters: int, warm_s: float = 0.1) -> float:
    """Median µs of ``iters`` timed calls of fn, after untimed calls for at least ``warm_s``
    seconds (the first timing after the host-side checks ran slow as a whole on the H200: FP8
    m = 8 705 µs where the same routing timed later took 289 µs)."""
    import cupy as cp

    t_end = time.perf_counter() + warm_s
    while True:
        fn()
        cp.cuda.Device().synchronize()
        if time.perf_counter() >= t_end:
            break
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for _ in range(iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ts.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
    return float(np.median(ts))


def _cublas_us(hidden: int, inter: int, m: int, iters: int) -> float | None:
    """bf16 cuBLAS (torch.matmul) over the same three projections, µs; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    from metrale.bench.measure import torch_loop_ms

    dev = torch.device("cuda")
    x = torch.randn(m, hidden, device=dev, dtype=torch.bfloat16)
    h = torch.randn(m, inter, device=dev, dtype=torch.bfloat16)
    wg, wu = (torch.randn(hidden, inter, device=dev, dtype=torch.bfloat16) for _ in range(2))
    wd = torch.randn(inter, hidden, device=dev, dtype=torch.bfloat16)

    def run() -> None:
        torch.matmul(x, wg)
        torch.matmul(x, wu)
        torch.matmul(h, wd)

    run()
    torch.cuda.synchronize()
    return float(np.median([torch_loop_ms(torch, run, 1) * 1e3 for _ in range(iters)]))


def main() -> int:
    import cupy as cp

    from metrale.backend import get_backend
    from metrale.bench.cases import SHAPES
    from metrale.cuda import configs, fp8_bf16
    from metrale.reference.formats import DenseWeight, Fp8Weight
    from metrale.reference.projection import project
    from tests.gpu import gen

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--m", default="8,16,64,512,4096")
    ap.add_argument("--formats", default="fp8,bf16")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--ref-rows", type=int, default=3)
    ap.add_argument("--variants-m", default="512,4096", help="m at which the table variants are timed")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    t_start = time.time()
    hidden, inter = SHAPES[args.shape]
    be = get_backend("cuda")
    rng = np.random.default_rng(11)
    ms = sorted(int(v) for v in args.m.split(","))
    vms = {int(v) for v in args.variants_m.split(",") if v}
    mmax = ms[-1]
    x_host = gen.rows(rng, mmax, max(hidden, inter), finite=True)
    xs = {k: cp.asarray(np.ascontiguousarray(x_host[:, :k]).view(np.uint16)) for k in (hidden, inter)}
    projs = (("gate", inter, hidden), ("up", inter, hidden), ("down", hidden, inter))
    floors = {"fp8": 1, "bf16": 2}
    report: dict[str, Any] = {
        "shape": args.shape,
        "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv),
        "tables": {"tiles": configs.FP8_BF16_GEMM_TILES, "small": configs.FP8_BF16_GEMM_SMALL_TILES},
        "rows": [],
        "exact": True,
    }
    wbytes = 3 * hidden * inter
    for fmt in args.formats.split(","):
        kernel = fp8_bf16.w8a16_gemm if fmt == "fp8" else fp8_bf16.dense_gemm
        hosts, devs = [], []
        for name, n, k in projs:
            if fmt == "fp8":
                codes = rng.choice(gen.E4M3_FINITE, (n, k))
                scale = np.exp2(rng.uniform(-8, 0, n)).astype(np.float32)
                h: Any = Fp8Weight(weight=codes.view(gen.E4M3), weight_scale=scale, name=name)
            else:
                w = (
                    (rng.standard_normal((n, k)) * np.exp2(rng.integers(-6, 2, (n, 1))))
                    .astype(np.float32)
                    .astype(gen.BF16)
                )
                h = DenseWeight(weight=w, name=name)
            hosts.append(h)
            devs.append(be.upload(h))
        outs = [cp.zeros((mmax, n), dtype=cp.uint16) for _, n, _ in projs]

        def ffn(m: int, outs: list = outs, devs: list = devs, kernel: Any = kernel) -> None:
            for (_, _, k), dw, o in zip(projs, devs, outs, strict=True):
                kernel(xs[k][:m], dw, o[:m])

        def path(name: str) -> None:
            # "old": the K-split kernels; "new": the prefill GEMM whatever m
            fp8_bf16.GEMM_MIN_ROWS = 1 << 30 if name == "old" else 1

        largest: list[np.ndarray] = []
        for m in reversed(ms):
            per: dict[str, Any] = {}
            bits: dict[str, list[np.ndarray]] = {}
            for name in ("new", "old"):
                path(name)
                ffn(m)
                cp.cuda.Device().synchronize()
                bits[name] = [o[:m].get() for o in outs]
                per[name] = _time(lambda m=m: ffn(m), 1 if (name == "old" and m > 512) else args.iters)
            same = all(np.array_equal(a, b) for a, b in zip(bits["new"], bits["old"], strict=True))
            if not largest:
                largest = bits["new"]
            invariant = all(np.array_equal(a, b[:m]) for a, b in zip(bits["new"], largest, strict=True))
            variants = {}
            if m in vms:
                # one depth's entry replaced at a time (suffix, tile, raster); the FFN's
                # projections use depths 5 (K = hidden) and 7 (K = intermediate) at Qwen3-8B
                base = dict(configs.FP8_BF16_GEMM_TILES)
                base_suffix, base_raster = dict(fp8_bf16.GEMM_SUFFIX), fp8_bf16.GEMM_ROWS_FIRST
                builds = [(*v, "p") for v in configs.fp8_bf16_gemm_builds()]
                builds += [(*v, "l") for v in configs.fp8_bf16_gemm_late_builds()]
                combos = [(d, nt, b, sfx, rf) for d, nt, b, sfx in builds for rf in (False, True)]
                # both depths at once: each suffix with the table's tiles, both rasters
                combos += [(None, 0, 0, sfx, rf) for sfx in ("p", "l") for rf in (False, True)]
                for d, nt, b, suffix, rows_first in combos:
                    if d is None:
                        fp8_bf16.GEMM_SUFFIX.update({k: suffix for k in base_suffix})
                    else:
                        configs.FP8_BF16_GEMM_TILES[d] = (nt, b)
                        fp8_bf16.GEMM_SUFFIX[d] = suffix
                    fp8_bf16.GEMM_ROWS_FIRST = rows_first
                    path("new")
                    ffn(m)
                    ok = all(np.array_equal(o[:m].get(), r) for o, r in zip(outs, bits["new"], strict=True))
                    us = _time(lambda m=m: ffn(m), args.iters)
                    name = "all" if d is None else f"d{d}_nt{nt}_b{b}"
                    variants[f"{name}_{suffix}_{'rows' if rows_first else 'cols'}"] = {"us": us, "exact": ok}
                    same = same and ok
                    configs.FP8_BF16_GEMM_TILES.clear()
                    configs.FP8_BF16_GEMM_TILES.update(base)
                    fp8_bf16.GEMM_SUFFIX.clear()
                    fp8_bf16.GEMM_SUFFIX.update(base_suffix)
                    fp8_bf16.GEMM_ROWS_FIRST = base_raster
            cublas = _cublas_us(hidden, inter, m, args.iters)
            floor_us = wbytes * floors[fmt] / STREAM_BYTES_S * 1e6
            row = {
                "format": fmt,
                "m": m,
                "old_us": per["old"],
                "new_us": per["new"],
                "speedup": per["old"] / per["new"],
                "cublas_bf16_us": cublas,
                "new_vs_cublas": None if cublas is None else per["new"] / cublas,
                "floor_us": floor_us,
                "new_vs_floor": per["new"] / floor_us,
                "old_equals_new": same,
                "batch_invariant": invariant,
                "variants": variants,
            }
            report["rows"].append(row)
            report["exact"] = report["exact"] and same and invariant
            print(json.dumps(row), flush=True)
        # sampled rows of the largest m against the reference (one per chunk region)
        picks = sorted({0, mmax - 1, *rng.choice(mmax, max(0, args.ref_rows - 2), replace=False).tolist()})
        for (name, _, k), h, got in zip(projs, hosts, largest, strict=True):
            want = project(x_host[picks, :k], h, "A16").view(np.uint16)
            ok = bool(np.array_equal(got[picks], want))
            report["rows"].append({"format": fmt, "proj": name, "ref_rows": picks, "reference_exact": ok})
            report["exact"] = report["exact"] and ok
            print(f"{fmt} {name}: rows {picks} equal the reference: {ok}", flush=True)
        fp8_bf16.GEMM_MIN_ROWS = configs.FP8_BF16_GEMM_MIN_ROWS
    report["seconds"] = time.time() - t_start
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"exact: {report['exact']}  ({report['seconds']:.0f} s)")
    return 0 if report["exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
