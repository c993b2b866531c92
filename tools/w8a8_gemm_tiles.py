#!/usr/bin/env python3
"""Time every W8A8 prefill GEMM tile (kernels/w8a8.cu ``w8a8_gemm_*``: mma.sync;
kernels/w8a8_wgmma.cu ``w8a8_wgmma_*``: wgmma, sm_90a) against bf16 cuBLAS and torch's int8
``_int_mm`` on the FFN's projection shapes (gate = up; down), GPU machine only.

Every tile must give the reference's bits on sampled rows and the first tile's bits on all rows
(asserted; the full reference comparison is tests/gpu/test_cuda_w8a8.py). CUDA events around
``iters`` launches after a warm-up; the int32 GEMM alone (the A8 codes made once), so the peers
are the bare GEMMs too (``torch.mm`` in bf16, ``torch._int_mm`` on int8 codes).

Verify rows (``--small``): the routing's kernel (split-K wgmma from SK_MIN_ROWS rows) and the
mma.sync GEMV tiers, timed as CUDA-graph replays (the bench's CupyClock: host launch time
excluded), and bf16 cuBLAS (events around launches), per projection.

    python tools/w8a8_gemm_tiles.py [--shape qwen3-8b] [--m 128,512,2048,4096] [--small 2,4,...]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _time(fn: Callable[[], object], iters: int) -> float:
    import cupy as cp

    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1e3 / iters


def main() -> int:
    import cupy as cp

    from metrale.backend import get_backend
    from metrale.bench.cases import SHAPES
    from metrale.bench.measure import CupyClock, Plan
    from metrale.cuda import configs, w8a8
    from metrale.reference.formats import W8a8Weight
    from metrale.reference.projection import project
    from tests.gpu import gen

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--m", default="128,512,2048,4096")
    ap.add_argument("--small", default="")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    hidden, inter = SHAPES[args.shape]
    be = get_backend("cuda")
    rng = np.random.default_rng(11)
    ms = [int(v) for v in args.m.split(",") if v]
    small = [int(v) for v in args.small.split(",") if v]
    tiles = [*w8a8.GEMM_TILES, *w8a8.WGMMA_TILES]
    clock = CupyClock()
    results = []
    for pname, (n, k) in {"gate": (inter, hidden), "down": (hidden, inter)}.items():
        q = rng.integers(-128, 128, (n, k), dtype=np.int16).astype(np.int8)
        scale = np.exp2(rng.uniform(-12, 2, n)).astype(np.float32)
        host = W8a8Weight(weight=q, weight_scale=scale, name=pname)
        w = be.upload(host)
        x_host = gen.rows(rng, max(ms + small), k, finite=True)
        x = cp.asarray(x_host.view(np.uint16))
        sample = np.unique(rng.integers(0, max(ms + small), 8))
        want = project(x_host[sample], host, "A8").view(np.uint16)
        for m in small:
            codes = w8a8.w8a8_quantize(x[:m])
            want_m = project(x_host[:m], host, "A8").view(np.uint16)
            row = {}
            runs = [("routing", w8a8.SK_MIN_ROWS, w8a8.SK_CTAS_PER_SM), ("without split-K", 1 << 30, 0)]
            runs += [(f"split-K {c} CTAs/SM", 1, c) for c in (2,)]
            for name, min_rows, cps in runs:
                w8a8.SK_MIN_ROWS, w8a8.SK_CTAS_PER_SM = min_rows, cps or configs.W8A8_SK_CTAS_PER_SM
                out = cp.empty((m, n), dtype=cp.uint16)
                w8a8.w8a8_gemv(codes, w, out)
                if not np.array_equal(out.get(), want_m):
                    raise SystemExit(f"{pname} m={m} {name}: bits differ from the reference")
                timing = clock.time(functools.partial(w8a8.w8a8_gemv, codes, w, out), 1, Plan(budget_s=2.0))
                row[name] = timing.us
            w8a8.SK_MIN_ROWS, w8a8.SK_CTAS_PER_SM = configs.W8A8_SK_MIN_ROWS, configs.W8A8_SK_CTAS_PER_SM
            if torch is not None and torch.cuda.is_available():
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                row["bf16 cuBLAS"] = _time(functools.partial(torch.mm, a, b.t()), args.iters)
            gbs = {name: n * k / us / 1e3 for name, us in row.items()}
            results.append({"proj": pname, "m": m, "n": n, "k": k, "us": row, "weight_gb_s": gbs})
            cells = ", ".join(f"{t} {us:.1f} us ({gbs[t]:.0f} GB/s)" for t, us in row.items())
            print(f"{pname} m={m}: {cells}")
        for m in ms:
            codes = w8a8.w8a8_quantize(x[:m])
            first = None
            row: dict[str, float] = {}
            for tile in tiles:
                out = cp.empty((m, n), dtype=cp.uint16)
                try:
                    w8a8.w8a8_gemv(codes, w, out, gemm=tile)
                except Exception as exc:  # a tile that did not build on this device
                    print(f"{pname} m={m} {tile}: {exc}")
                    continue
                got = out.get()
                rows_in = sample[sample < m]
                if not np.array_equal(got[rows_in], want[: len(rows_in)]):
                    raise SystemExit(f"{pname} m={m} {tile}: sampled rows differ from the reference")
                if first is None:
                    first = got
                elif not np.array_equal(got, first):
                    raise SystemExit(f"{pname} m={m} {tile}: bits differ from the first tile")
                row[tile] = _time(functools.partial(w8a8.w8a8_gemv, codes, w, out, gemm=tile), args.iters)
            if torch is not None and torch.cuda.is_available():
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                row["bf16 cuBLAS"] = _time(functools.partial(torch.mm, a, b.t()), args.iters)
                ai = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
                bi = torch.randint(-128, 128, (k, n), device="cuda", dtype=torch.int8).t().contiguous().t()
                row["torch _int_mm"] = _time(functools.partial(torch._int_mm, ai, bi), args.iters)
            tops = {name: 2 * m * n * k / us / 1e6 for name, us in row.items()}
            results.append({"proj": pname, "m": m, "n": n, "k": k, "us": row, "tops": tops})
            cells = ", ".join(f"{t} {us:.1f} us ({tops[t]:.0f} TOPS)" for t, us in row.items())
            print(f"{pname} m={m}: {cells}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
