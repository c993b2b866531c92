#!/usr/bin/env python3
"""Benchmark the NVFP4 W4A16 dense FFN on the CUDA backend (first version, issue 3 item 5).

Shape: Qwen3-8B's FFN (hidden 4096, intermediate 12288) unless --hidden/--inter say otherwise.
For each m the layer's real entry point runs (m=1 ``forward``, 2 ``forward_k2``, 3
``forward_k3``, else ``forward_km``): gate + up + act_mul + down (+ the launches the routing
makes). Several layers with distinct weights rotate so their weights (4 x 85 MB > the 60 MB
L2) come from HBM. Times: CUDA events around CUDA-graph replays (each graph holds ``reps``
FFN steps over the rotating layers), median over ``--samples`` replays. In the same run: a
device-to-device copy of 1 GiB (cudaMemcpyAsync), bandwidth counted as bytes read + written.

It first checks every timed m for bit-exactness of layer 0's output against the numpy
reference layer (same weights, same rows) and refuses to report (exit 2) if any bit differs.
Prints JSON and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np

from metrale.backend import get_backend
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.elements import BF16, E4M3
from metrale.reference.formats import Nvfp4Weight
from metrale.reference.layer import DenseFfnLayer, FfnWeights

F32 = np.float32


def nvfp4_weight(rng: np.random.Generator, n: int, k: int, name: str) -> Nvfp4Weight:
    """Random NVFP4 weight: uniform nibbles, block scales around 1 (e4m3 codes 0x28..0x47)."""
    return Nvfp4Weight(
        weight=rng.integers(0, 256, (n, k // 2), dtype=np.uint8),
        weight_scale=rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8).view(E4M3),
        weight_scale_2=F32(1.0 / 2688.0),
        input_scale=None,
        name=name,
    )


def entry(layer: DenseFfnLayer, m: int, x: Any, ctx: ForwardContext) -> None:
    if m == 1:
        layer.forward(x, ctx)
    elif m == 2:
        layer.forward_k2(x, ctx)
    elif m == 3:
        layer.forward_k3(x, ctx)
    else:
        layer.forward_km(x, m, ctx)


def time_graph(cp: Any, body: Any, reps: int, samples: int) -> float:
    """Median milliseconds of one replay of a graph capturing ``reps`` calls of ``body``."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        body()
        body()
        stream.synchronize()
        relaxed = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", None)
        stream.begin_capture() if relaxed is None else stream.begin_capture(mode=relaxed)
        for _ in range(reps):
            body()
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        t = []
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        for _ in range(samples):
            e0.record(stream)
            graph.launch(stream)
            e1.record(stream)
            e1.synchronize()
            t.append(cp.cuda.get_elapsed_time(e0, e1))
    return statistics.median(t)


def copy_bandwidth(cp: Any, nbytes: int = 1 << 30, samples: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    src = cp.empty(nbytes, dtype=cp.uint8)
    src.fill(1)
    dst = cp.empty_like(src)
    stream = cp.cuda.Stream(non_blocking=True)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    t = []
    with stream:
        for i in range(samples + 3):
            e0.record(stream)
            dst.data.copy_from_device_async(src.data, nbytes, stream)
            e1.record(stream)
            e1.synchronize()
            if i >= 3:
                t.append(cp.cuda.get_elapsed_time(e0, e1))
    del src, dst
    return 2 * nbytes / (statistics.median(t) * 1e-3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=12288)
    ap.add_argument("--m", default="1,2,3,4,8,16,32", help="row counts, comma-separated")
    ap.add_argument("--layers", type=int, default=4, help="rotating layers (weights from HBM)")
    ap.add_argument("--reps", type=int, default=8, help="rotations captured per graph")
    ap.add_argument("--samples", type=int, default=25)
    ap.add_argument("--floor", type=float, default=0.60, help="m=1 target: fraction of copy bandwidth")
    ap.add_argument("--json", help="write the JSON result here")
    ap.add_argument("--md", help="write the Markdown table here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--profile", action="store_true", help="only launch the m=1 gate and down GEMVs a few times"
    )
    args = ap.parse_args()
    import cupy as cp

    if args.profile:
        rng = np.random.default_rng(args.seed)
        cuda = get_backend("cuda")
        for n, k in ((args.inter, args.hidden), (args.hidden, args.inter)):
            w = cuda.upload(nvfp4_weight(rng, n, k, "w"))
            x = cuda.rows((rng.standard_normal((1, k)) * 0.5).astype(F32).astype(BF16), k)
            out = cuda.empty_bf16((1, n))
            for _ in range(3):
                cuda.launch("w4a16_gemv", x, w, out)
        cp.cuda.Device().synchronize()
        return 0

    from metrale.cuda import runtime

    ms = [int(v) for v in args.m.split(",") if v]
    cfg = FfnConfig(args.hidden, args.inter)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    host = [
        FfnWeights(
            nvfp4_weight(rng, args.inter, args.hidden, "gate"),
            nvfp4_weight(rng, args.inter, args.hidden, "up"),
            nvfp4_weight(rng, args.hidden, args.inter, "down"),
        )
        for _ in range(args.layers)
    ]
    cuda = get_backend("cuda")
    layers = [DenseFfnLayer(cfg, weights=w, backend=cuda) for w in host]
    ref_layer = DenseFfnLayer(cfg, weights=host[0], backend="reference")
    weight_bytes = sum(p.nbytes for p in host[0].all())
    mmax = max(ms)
    x_host = (rng.standard_normal((mmax, args.hidden)) * 0.5).astype(F32).astype(BF16)
    x = cuda.rows(x_host, args.hidden)
    ctx = ForwardContext(cfg, backend=cuda, max_rows=mmax)
    ref_ctx = ForwardContext(cfg, backend=ref_layer.backend, max_rows=mmax)
    print(f"setup {time.time() - t0:.1f}s; weights per FFN {weight_bytes / 1e6:.2f} MB", flush=True)

    # ---- exactness first ----
    for m in ms:
        entry(layers[0], m, x[:m], ctx)
        got = cuda.to_numpy(ctx.buffers.moe_output()[:m]).view(np.uint16)
        with np.errstate(all="ignore"):
            entry(ref_layer, m, x_host[:m], ref_ctx)
        want = ref_ctx.buffers.moe_output()[:m].view(np.uint16)
        bad = int((got != want).sum())
        if bad:
            print(f"NOT EXACT: m={m}: {bad} of {got.size} outputs differ from the reference; no report")
            return 2
        print(f"exact: m={m} ({got.size} outputs, launches {cuda.launches[-4:]})", flush=True)

    # ---- timings ----
    bw = copy_bandwidth(cp)
    results = []
    for m in ms:
        xm = x[:m]

        def body(m: int = m, xm: Any = xm) -> None:
            for lay in layers:
                entry(lay, m, xm, ctx)

        ms_per = time_graph(cp, body, args.reps, args.samples) / (args.reps * args.layers)
        us = ms_per * 1e3
        ach = weight_bytes / (us * 1e-6)
        results.append(
            {"m": m, "us": round(us, 2), "weight_GBps": round(ach / 1e9, 1), "of_copy_bw": round(ach / bw, 3)}
        )
        print(
            f"m={m}: {us:.2f} us/FFN, {ach / 1e12:.2f} TB/s of weights, {ach / bw:.1%} of copy bw", flush=True
        )

    # single projections at m = 1 (weights rotating over the layers)
    proj = []
    for nm, pick in (
        (f"gate {args.inter}x{args.hidden}", lambda lay: lay.weights.gate_proj),
        (f"down {args.hidden}x{args.inter}", lambda lay: lay.weights.down_proj),
    ):
        outs = {id(lay): cuda.empty_bf16((1, pick(lay).n)) for lay in layers}

        def pbody(pick: Any = pick, outs: Any = outs) -> None:
            for lay in layers:
                w = pick(lay)
                src = x[:1] if w.k == args.hidden else ctx.buffers.expert_gate_out()[:1]
                cuda.launch("w4a16_gemv", src, w, outs[id(lay)])

        us = time_graph(cp, pbody, args.reps, args.samples) / (args.reps * args.layers) * 1e3
        wb = pick(layers[0]).nbytes
        proj.append({"projection": nm, "us": round(us, 2), "of_copy_bw": round(wb / (us * 1e-6) / bw, 3)})
        print(f"w4a16_gemv {nm}: {us:.2f} us, {wb / (us * 1e-6) / 1e12:.2f} TB/s", flush=True)

    props = runtime.device_props(runtime.device_id())
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    m1 = next((r for r in results if r["m"] == 1), None)
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": name,
        "host": platform.node(),
        "shape": {"hidden": args.hidden, "intermediate": args.inter},
        "format": "NVFP4 W4A16",
        "weight_bytes_per_ffn": weight_bytes,
        "copy_bandwidth_GBps_read_plus_write": round(bw / 1e9, 1),
        "layers_rotating": args.layers,
        "results": results,
        "single_projection_m1": proj,
        "floor": args.floor,
        "m1_meets_floor": None if m1 is None else bool(m1["of_copy_bw"] >= args.floor),
        "exact": True,
    }
    md = [
        f"NVFP4 W4A16 FFN {args.hidden}x{args.inter}, {name}, {out['date']}; copy bandwidth "
        f"{bw / 1e12:.2f} TB/s (read+write); weights {weight_bytes / 1e6:.1f} MB per FFN; "
        "every result bit-exact",
        "",
        "| m | µs / FFN | weight TB/s | of copy bw |",
        "| ---: | ---: | ---: | ---: |",
    ]
    md += [
        f"| {r['m']} | {r['us']:.1f} | {r['weight_GBps'] / 1e3:.2f} | {r['of_copy_bw']:.0%} |"
        for r in results
    ]
    text = "\n".join(md)
    print(json.dumps(out, indent=1))
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
