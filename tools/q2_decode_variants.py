#!/usr/bin/env python3
"""Check and time every Q2_0 decode kernel variant (kernels/q2_0_dec.cu, configs.Q2_0_DEC_VARIANTS)
beside the paths they replace (``gemv``: q2_0_gemv_r*; ``mma``: the tensor-core kernels, m >= 2) on
the FFN projections of Qwen3-8B and Llama-3-8B at m = 1, 2, 3. GPU machine only.

Every cell's output bits must equal the numpy reference (``metrale.reference.projection.project``)
before it is timed: a mismatch is reported in the JSON and on stderr and the run exits 1. Times are
µs per projection (prologue + GEMV) from CUDA events around CUDA-graph replays
(``metrale.bench.measure.CupyClock``, median of the samples), cycling through enough device copies
of the weight to exceed 4x the L2 (``measure.rotation``), so the weights come from HBM; each
projection starts a fresh launch chain (``pdl.entry_start``), as the first projection of an FFN
does. GB/s = weight bytes / time; floor = weight bytes / the read-only bandwidth measured in the
same run (``measure.ceilings_gpu``).

    python3 tools/q2_decode_variants.py --out q2dec.json [--shapes qwen3-8b,llama3-8b] [--m 1,2,3]
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


def q2_weight(rng: np.random.Generator, n: int, k: int, name: str) -> Any:
    """Uniform 2-bit codes, f16 scales ~ N(0, 2^-6)."""
    from metrale.reference.formats import Q2_0Weight

    blocks = np.empty((n, k // 64, 18), np.uint8)
    blocks[..., 2:] = rng.integers(0, 256, (n, k // 64, 16), dtype=np.uint8)
    d = (rng.standard_normal((n, k // 64)) * 2.0**-6).astype(np.float16)
    blocks[..., :2] = d.view(np.uint8).reshape(n, k // 64, 2)
    return Q2_0Weight(blocks=blocks, name=name)


def _rotate(fn: Any, start: Any, x: Any, ws: list[Any], out: Any, m: int) -> Any:
    """One call of ``fn`` per weight copy, each a fresh launch chain."""

    def body() -> None:
        for w in ws:
            start()
            fn(x, w, out, m)

    return body


def main() -> int:
    import cupy as cp

    from metrale.backend import get_backend
    from metrale.bench import measure
    from metrale.bench.cases import SHAPES
    from metrale.cuda import configs, mma, pdl, q2_0, runtime
    from metrale.cuda.weights import DeviceWeight
    from metrale.reference.projection import project
    from tests.gpu import gen

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--shapes", default="qwen3-8b,llama3-8b")
    ap.add_argument("--m", default="1,2,3")
    ap.add_argument("--samples", type=int, default=9)
    ap.add_argument("--target-ms", type=float, default=1.0, help="GPU time per timed graph replay")
    args = ap.parse_args()
    t_start = time.time()
    be = get_backend("cuda")
    rng = np.random.default_rng(13)
    ms = [int(v) for v in args.m.split(",")]
    dev = runtime.device_props(runtime.device_id())
    ceil = measure.ceilings_gpu(5)
    read_bps = float(ceil["read_Bps"])
    l2 = int(dev.get("l2CacheSize", 50 << 20))
    plan = measure.Plan(target_ms=args.target_ms, samples=args.samples, budget_s=2.0)
    clock = measure.CupyClock()
    paths: list[tuple[str, str, bool]] = [(v, v, True) for v in configs.Q2_0_DEC_VARIANTS]
    paths += [("gemv", "off", False), ("mma", "off", True)]
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    saved = (q2_0.DEC_VARIANT, mma.ENABLED)
    for shape in args.shapes.split(","):
        hidden, inter = SHAPES[shape]
        for proj, (n, k) in {"gate/up": (inter, hidden), "down": (hidden, inter)}.items():
            host = q2_weight(rng, n, k, f"{shape} {proj}")
            w0 = be.upload(host)
            copies = measure.rotation(host.nbytes, l2, 1, 8)
            ws = [w0] + [
                DeviceWeight(host=host, arrays={a: v.copy() for a, v in w0.arrays.items()})
                for _ in range(copies - 1)
            ]
            x_host = np.stack([gen.row(rng, k, "gauss") for _ in range(max(ms))])
            want = project(x_host, host, "A16").view(np.uint16)
            x = cp.asarray(x_host.view(np.uint16))
            floor_us = measure.floor_us(host.nbytes, read_bps)
            for m in ms:
                out = cp.zeros((m, n), dtype=cp.uint16)
                for pname, variant, use_mma in paths:
                    if pname == "mma" and m < q2_0.MMA_MIN_ROWS:
                        continue
                    q2_0.DEC_VARIANT, mma.ENABLED = variant, use_mma
                    cell: dict[str, Any] = {
                        "shape": shape,
                        "proj": proj,
                        "n": n,
                        "k": k,
                        "m": m,
                        "path": pname,
                    }
                    if variant != "off":
                        cell["kernel"] = q2_0.dec_kernel_name(variant, m, k)[0]
                    out.fill(0)
                    pdl.entry_start()
                    q2_0.q2_0_gemv_vec_batchm(x[:m], w0, out, m)
                    got = out.get()
                    bad = np.argwhere(got != want[:m])
                    cell["bit_exact"] = bad.size == 0
                    if bad.size:
                        i = tuple(bad[0])
                        msg = (
                            f"{shape} {proj} m={m} {pname}: {len(bad)} of {got.size} outputs differ, first "
                            f"{i}: got {got[i]:#06x}, want {want[:m][i]:#06x}"
                        )
                        failures.append(msg)
                        cell["mismatch"] = msg
                        print(msg, file=sys.stderr)
                        results.append(cell)
                        continue

                    body = _rotate(q2_0.q2_0_gemv_vec_batchm, pdl.entry_start, x[:m], ws, out, m)
                    t = clock.time(body, len(ws), plan)
                    cell.update(
                        us=round(t.us, 3),
                        gbps=round(host.nbytes / (t.us * 1e-6) / 1e9, 1),
                        floor_us=round(floor_us, 3),
                        floor_ratio=round(t.us / floor_us, 3),
                        timing=t.js(),
                        weight_copies=len(ws),
                    )
                    results.append(cell)
                    print(
                        f"{shape:10s} {proj:7s} m={m} {pname:5s} {t.us:8.2f} us  "
                        f"{cell['gbps']:7.1f} GB/s  {cell['floor_ratio']:5.2f}x floor",
                        flush=True,
                    )
            ws.clear()
            cp.get_default_memory_pool().free_all_blocks()
    q2_0.DEC_VARIANT, mma.ENABLED = saved
    ffn = []
    for shape in args.shapes.split(","):
        for m in ms:
            for pname, _, _ in paths:
                cells = {
                    c["proj"]: c
                    for c in results
                    if c["shape"] == shape and c["m"] == m and c["path"] == pname and "us" in c
                }
                if len(cells) == 2:
                    us = 2 * cells["gate/up"]["us"] + cells["down"]["us"]
                    fl = 2 * cells["gate/up"]["floor_us"] + cells["down"]["floor_us"]
                    ffn.append(
                        {
                            "shape": shape,
                            "m": m,
                            "path": pname,
                            "us_3proj": round(us, 3),
                            "floor_ratio": round(us / fl, 3),
                        }
                    )
    doc = {
        "tool": "tools/q2_decode_variants.py",
        "argv": sys.argv[1:],
        "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t_start)),
        "device": str(dev.get("name", b"?"), "utf-8", "replace")
        if isinstance(dev.get("name"), bytes)
        else str(dev.get("name")),
        "sms": runtime.sm_count(),
        "read_Bps": read_bps,
        "ceilings": {kk: v for kk, v in ceil.items() if isinstance(v, (int, float))},
        "route": [list(r) for r in configs.Q2_0_DEC_ROUTE],
        "variants": {v: list(c) for v, c in configs.Q2_0_DEC_VARIANTS.items()},
        "cells": results,
        "ffn_three_projections": ffn,
        "failures": failures,
        "seconds": round(time.time() - t_start, 1),
    }
    Path(args.out).write_text(json.dumps(doc, indent=1))
    for f in ffn:
        print(
            f"3 projections {f['shape']:10s} m={f['m']} {f['path']:5s} {f['us_3proj']:8.2f} us  "
            f"{f['floor_ratio']:5.2f}x floor"
        )
    print(f"wrote {args.out} ({doc['seconds']} s, {len(failures)} mismatching cells)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
