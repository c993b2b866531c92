#!/usr/bin/env python3
"""Time every built FP8 / BF16 decode configuration (kernels/fp8_bf16_gemv.cu
``{fp8,bf16}_dec_*``, configs.FP8_BF16_DEC and FP8_BF16_DEC_VARIANTS) at m = 1, 2, 3 beside
the GEMV tiers (``gemv``) and, at m = 3, the tensor-core GEMM (``mma``), on the FFN's
projection shapes; GPU machine only.

Bits: each variant's full output must equal the ``gemv`` path's (asserted, every column), and
a sample of output columns (the first, a middle and the last 64) must equal the numpy
reference (``metrale.reference``), so a failure names the variant. Time: CUDA graphs of many
launches (``metrale.bench.measure.CupyClock``) cycling through weight copies that together
exceed 4× the L2, median of the replays; ``floor`` = weight bytes / the run's read-only
bandwidth (``ceilings_gpu``). The FFN figure is 2 × gate/up + down.

    python tools/fp8_decode_variants.py --out fp8_decode.json [--shapes qwen3-8b,llama3-8b]
        [--m 1,2,3] [--formats fp8,bf16] [--all-shapes-variants]
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

#: Output columns compared with the numpy reference per projection: (start, count).
_REF_COLS = 64


def _weight(rng: np.random.Generator, fmt: str, n: int, k: int) -> Any:
    """Random FP8 (every finite e4m3 code, row scales 2^[-12, 4)) or Gaussian BF16 [n, k]."""
    from metrale.reference.formats import DenseWeight, Fp8Weight
    from tests.gpu.gen import BF16, E4M3, E4M3_FINITE, F32

    if fmt == "fp8":
        codes = E4M3_FINITE[rng.integers(0, E4M3_FINITE.size, (n, k))]
        scale = np.exp2(rng.uniform(-12, 4, n)).astype(F32)
        return Fp8Weight(weight=codes.view(E4M3), weight_scale=scale, name=f"fp8_{n}x{k}")
    w = (rng.standard_normal((n, k), dtype=np.float32) * F32(0.02)).astype(BF16)
    return DenseWeight(weight=w, name=f"bf16_{n}x{k}")


def _sub(host: Any, cols: np.ndarray) -> Any:
    """The weight restricted to output columns ``cols`` (each output column is its own row)."""
    from metrale.reference.formats import DenseWeight, Fp8Weight

    if isinstance(host, Fp8Weight):
        return Fp8Weight(weight=host.weight[cols], weight_scale=host.weight_scale[cols], name=host.name)
    return DenseWeight(weight=host.weight[cols], name=host.name)


def _body(launch: Any, xm: Any, copies: list[Any], outs: list[Any]) -> Any:
    """One timed call: the projection once per weight copy."""

    def body() -> None:
        for wc, o in zip(copies, outs, strict=True):
            launch(xm, wc, o)

    return body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="fp8_decode_variants.json")
    ap.add_argument("--shapes", default="qwen3-8b,llama3-8b")
    ap.add_argument("--m", default="1,2,3")
    ap.add_argument("--formats", default="fp8,bf16")
    ap.add_argument(
        "--all-shapes-variants",
        action="store_true",
        help="time every variant on every shape (default: the variants on the first shape only)",
    )
    args = ap.parse_args()
    import cupy as cp

    from metrale.backend import get_backend
    from metrale.bench.cases import SHAPES
    from metrale.bench.measure import CupyClock, Plan, ceilings_gpu, rotation
    from metrale.cuda import configs, fp8_bf16
    from metrale.cuda.weights import DeviceWeight
    from metrale.reference.projection import project
    from tests.gpu import gen

    t_start = time.time()
    be = get_backend("cuda")
    ceil = ceilings_gpu(5)
    read_bps = float(ceil["read_Bps"])
    l2 = int(cp.cuda.Device().attributes["L2CacheSize"])
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    gpu = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    ms = [int(v) for v in args.m.split(",")]
    clock = CupyClock()
    plan = Plan(target_ms=1.0, samples=7, budget_s=1.0)
    saved = (fp8_bf16.DECODE, dict(fp8_bf16.DEC_TIERS), fp8_bf16.MMA_MIN_M)

    def use(variant: tuple[str, Any], m: int) -> None:
        kind, cfg = variant
        fp8_bf16.DECODE = "dec" if kind == "dec" else "gemv"
        fp8_bf16.DEC_TIERS = {m: cfg} if kind == "dec" else {}
        fp8_bf16.MMA_MIN_M = 1 if kind == "mma" else 1 << 30

    def label(variant: tuple[str, Any], m: int, fmt: str) -> str:
        kind, cfg = variant
        tag = " (routing)" if kind == "dec" and configs.FP8_BF16_DEC.get(m) == cfg else ""
        return cfg.name(fmt, m) + tag if kind == "dec" else kind

    results: list[dict[str, Any]] = []
    rng = np.random.default_rng(2026)
    for si, shape in enumerate(args.shapes.split(",")):
        hidden, inter = SHAPES[shape]
        x_host = gen.rows(rng, max(ms), max(hidden, inter), finite=True)
        for fmt in args.formats.split(","):
            kernel = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
            launch = getattr(fp8_bf16, kernel)
            for proj, (n, k) in {"gate_up": (inter, hidden), "down": (hidden, inter)}.items():
                host = _weight(rng, fmt, n, k)
                base = be.upload(host)
                nbytes = int(sum(a.nbytes for a in base.arrays.values()))
                copies = [base] + [
                    DeviceWeight(host=host, arrays={key: a.copy() for key, a in base.arrays.items()})
                    for _ in range(rotation(nbytes, l2, 1, 1 << 30) - 1)
                ]
                x = cp.asarray(np.ascontiguousarray(x_host[:, :k]).view(np.uint16))
                cols = np.unique(np.r_[0:_REF_COLS, n // 2 : n // 2 + _REF_COLS, n - _REF_COLS : n])
                want_all = project(x_host[: max(ms), :k], _sub(host, cols), "A16").view(np.uint16)
                for m in ms:
                    every = si == 0 or args.all_shapes_variants
                    variants: list[tuple[str, Any]] = [("gemv", None)]
                    if m == 3 and every:  # the tensor cores served m = 3 before the decode kernels
                        variants.append(("mma", None))
                    builds = [d for r, d in configs.fp8_bf16_dec_builds() if r == m]
                    if not every:
                        builds = [d for d in builds if configs.FP8_BF16_DEC.get(m) == d]
                    variants += [("dec", d) for d in builds]
                    ref = None
                    for variant in variants:
                        use(variant, m)
                        name = label(variant, m, fmt)
                        out = cp.zeros((m, n), dtype=cp.uint16)
                        launch(x[:m], base, out)
                        got = out.get()
                        if ref is None:
                            ref = got
                        ok_all = bool(np.array_equal(got, ref))
                        ok_ref = bool(np.array_equal(got[:, cols], want_all[:m]))
                        for wc in copies[1:]:  # tensor-core fragments built once, on base
                            wc.arrays.update(
                                {key: a for key, a in base.arrays.items() if key not in wc.arrays}
                            )
                        outs = [cp.zeros((m, n), dtype=cp.uint16) for _ in copies]
                        t = clock.time(_body(launch, x[:m], copies, outs), len(copies), plan)
                        floor = nbytes / read_bps * 1e6
                        rec = {
                            "gpu": gpu,
                            "shape": shape,
                            "format": fmt,
                            "proj": proj,
                            "n": n,
                            "k": k,
                            "m": m,
                            "variant": name,
                            "us": round(t.us, 3),
                            "GBps": round(nbytes / t.us / 1e3, 1),
                            "floor_us": round(floor, 3),
                            "floor_ratio": round(t.us / floor, 3),
                            "method": t.method,
                            "spread": round(t.spread, 3),
                            "bits_equal_gemv": ok_all,
                            "bits_equal_reference": ok_ref,
                        }
                        results.append(rec)
                        flag = "" if ok_all and ok_ref else "  BITS DIFFER"
                        print(
                            f"{shape:9s} {fmt:4s} {proj:7s} m={m} {name:34s} {t.us:8.1f} us "
                            f"{rec['GBps']:7.0f} GB/s {rec['floor_ratio']:5.2f}x floor{flag}",
                            flush=True,
                        )
                del copies, base, host
                cp.get_default_memory_pool().free_all_blocks()
    fp8_bf16.DECODE, fp8_bf16.DEC_TIERS, fp8_bf16.MMA_MIN_M = saved
    ffn = []
    for r in results:
        if r["proj"] != "down":
            continue
        gu = [
            g
            for g in results
            if g["proj"] == "gate_up" and all(g[f] == r[f] for f in ("shape", "format", "m", "variant"))
        ]
        if gu:
            us = 2 * gu[0]["us"] + r["us"]
            floor = 2 * gu[0]["floor_us"] + r["floor_us"]
            ffn.append(
                {
                    **{f: r[f] for f in ("shape", "format", "m", "variant")},
                    "ffn_us": round(us, 2),
                    "ffn_floor_us": round(floor, 2),
                    "floor_ratio": round(us / floor, 3),
                }
            )
    print("\nFFN (2 x gate/up + down):")
    for f in ffn:
        print(
            f"{f['shape']:9s} {f['format']:4s} m={f['m']} {f['variant']:34s} {f['ffn_us']:8.1f} us "
            f"{f['floor_ratio']:5.2f}x floor"
        )
    bad = [r for r in results if not (r["bits_equal_gemv"] and r["bits_equal_reference"])]
    doc = {
        "command": " ".join(sys.argv),
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t_start)),
        "gpu": gpu,
        "ceilings": ceil,
        "l2_bytes": l2,
        "seconds": round(time.time() - t_start, 1),
        "projections": results,
        "ffn": ffn,
        "bits_differ": len(bad),
    }
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out} ({len(results)} timings, {len(bad)} with differing bits, {doc['seconds']} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
