"""Time the W8A8 FFN (decode tiers and the prefill GEMM) beside bf16 cuBLAS and torch ``_int_mm``
in one run on one GPU, after checking sampled rows bit for bit against the reference layer.

Each row's bits are its one-row result (the arithmetic is per row), so the reference runs once
per sampled row (first, last, tile boundaries, random) and every timed m is checked on the
sampled rows it holds. µs are medians of CUDA-event-timed CUDA-graph replays over two layers
with distinct weights (weights ≥ 4× the L2). The floor is the W8A8 FFN's weight bytes over the
same run's read-only streaming bandwidth.

    PYTHONPATH=$PWD python3 tools/time_w8a8.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.formats import W8a8Weight
from metrale.reference.layer import DenseFfnLayer
from metrale.reference.w8a8_arm import W8a8Ffn

READ_KERNEL = r"""
extern "C" __global__ void read_stream(const uint4* __restrict__ p, unsigned long long n,
                                       unsigned int* __restrict__ out) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned int acc = 0;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += stride) {
        uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9E3779B9u) out[0] = acc;
}
"""


def w8a8_ffn(rng: np.random.Generator, hidden: int, inter: int) -> W8a8Ffn:
    def w(n: int, k: int, name: str) -> W8a8Weight:
        q = rng.integers(-127, 128, (n, k), dtype=np.int8)
        s = np.exp2(rng.uniform(-10, -6, n)).astype(np.float32)
        return W8a8Weight(weight=q, weight_scale=s, name=name)

    return W8a8Ffn(w(inter, hidden, "gate"), w(inter, hidden, "up"), w(hidden, inter, "down"))


def cupy_graph_us(body: Any, samples: int, target_ms: float = 3.0) -> float:
    """Median µs of one body() from CUDA-graph replays (CuPy stream capture)."""
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        body()
        stream.synchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(stream)
        body()
        body()
        e1.record(stream)
        e1.synchronize()
        est = cp.cuda.get_elapsed_time(e0, e1) / 2
        reps = max(2, min(64, math.ceil(target_ms / max(est, 1e-3))))
        relaxed = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", None)
        stream.begin_capture() if relaxed is None else stream.begin_capture(mode=relaxed)
        try:
            for _ in range(reps):
                body()
        finally:
            graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        ts = []
        for _ in range(samples):
            e0.record(stream)
            graph.launch(stream)
            e1.record(stream)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1))
    return statistics.median(ts) / reps * 1e3


def torch_graph_us(body: Any, samples: int, target_ms: float = 3.0) -> float:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    body()
    e1.record()
    e1.synchronize()
    reps = max(2, min(64, math.ceil(target_ms / max(e0.elapsed_time(e1), 1e-3))))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            body()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(samples):
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return statistics.median(ts) / reps * 1e3


def read_bandwidth() -> float:
    import cupy as cp

    k = cp.RawKernel(READ_KERNEL, "read_stream")
    n = (2 << 30) // 16
    buf = cp.empty(n * 4, dtype=cp.uint32)
    buf.fill(1)
    out = cp.zeros(1, dtype=cp.uint32)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    us = cupy_graph_us(lambda: k((sms * 8,), (256,), (buf, np.uint64(n), out)), 7, 10.0)
    buf = None
    return n * 16 / (us * 1e-6)


def torch_peers(hidden: int, inter: int, ms: list[int], samples: int) -> dict[str, dict[int, float]]:
    """bf16 cuBLAS (gate+up as one [2I, H] matmul) and torch int8 ``_int_mm`` with per-token
    int8 quantization of x and h (rows padded to 17 where the op refuses m ≤ 16)."""
    import torch

    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    out: dict[str, dict[int, float]] = {"bf16 cuBLAS": {}, "torch int8 _int_mm": {}}
    layers = []
    for _ in range(2):
        wgu = (torch.randn(2 * inter, hidden, device=dev, generator=g) * 0.02).to(torch.bfloat16)
        wd = (torch.randn(hidden, inter, device=dev, generator=g) * 0.02).to(torch.bfloat16)
        qgu = torch.randint(-127, 128, (2 * inter, hidden), device=dev, dtype=torch.int8, generator=g)
        qd = torch.randint(-127, 128, (hidden, inter), device=dev, dtype=torch.int8, generator=g)
        sgu = torch.rand(2 * inter, device=dev, generator=g) * 1e-3
        sd = torch.rand(hidden, device=dev, generator=g) * 1e-3
        layers.append((wgu, wd, qgu.t(), qd.t(), sgu, sd))

    def quant(a: Any) -> tuple[Any, Any]:
        s = a.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / 127
        return (a.float() / s).round().clamp(-127, 127).to(torch.int8), s

    state = {"i": 0}
    for m in ms:
        xm = torch.randn(m, hidden, device=dev, generator=g).to(torch.bfloat16) * 0.5
        xpm = torch.cat([xm, xm[:1].expand(17 - m, hidden)]) if m < 17 else xm

        def bf16(x: Any = xm) -> None:
            wgu, wd = layers[state["i"] % 2][:2]
            state["i"] += 1
            gu = x @ wgu.t()
            h = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
            _ = h @ wd.t()

        def int8(xp: Any = xpm) -> None:
            _, _, qgu, qd, sgu, sd = layers[state["i"] % 2]
            state["i"] += 1
            xq, xs = quant(xp)
            gu = (torch._int_mm(xq, qgu).float() * xs * sgu).to(torch.bfloat16)
            h = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
            hq, hs = quant(h)
            _ = (torch._int_mm(hq, qd).float() * hs * sd).to(torch.bfloat16)

        out["bf16 cuBLAS"][m] = torch_graph_us(bf16, samples)
        out["torch int8 _int_mm"][m] = torch_graph_us(int8, samples)
    layers.clear()
    torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=12288)
    ap.add_argument("--m", default="4,8,16,32,64,128,512,2048,4096,8192")
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--baseline", default="128,512,4096", help="m timed on the previous route too")
    ap.add_argument("--proj-m", default="128,512,4096", help="m of the per-tile projection timings")
    ap.add_argument("--out", help="directory for time_w8a8.json")
    args = ap.parse_args(argv)
    import cupy as cp

    import metrale.cuda.w8a8 as w8
    import metrale.reference.layer as layer_mod
    from metrale.backend import get_backend

    hidden, inter = args.hidden, args.inter
    ms = [int(v) for v in args.m.split(",")]
    mmax = max(ms)
    t0 = time.time()
    bw = read_bandwidth()
    rng = np.random.default_rng(7)
    hosts = [w8a8_ffn(rng, hidden, inter) for _ in range(2)]
    nbytes = sum(w.weight.nbytes + w.weight_scale.nbytes for w in (hosts[0].gate, hosts[0].up, hosts[0].down))
    floor_us = nbytes / bw * 1e6
    cfg = FfnConfig(hidden, inter)
    cuda = get_backend("cuda")
    layers = []
    for h in hosts:
        layer = DenseFfnLayer(cfg, backend=cuda)
        layer.set_w8a8_decode_weights(h, hidden, inter)
        layers.append(layer)
    ref = DenseFfnLayer(cfg, backend=get_backend("reference"))
    ref.set_w8a8_decode_weights(hosts[0], hidden, inter)
    x = (rng.standard_normal((mmax, hidden)) * 0.5).astype(np.float32)
    import ml_dtypes

    x = x.astype(ml_dtypes.bfloat16)
    x[5] = 0  # a zero row
    xd = cuda.rows(x, hidden, name="x")

    # exactness: sampled rows of every m against their one-row reference results
    sample = {0, 1, 5, 63, 64, 127, 128, 129, 511, 2047, 4095, *(m - 1 for m in ms)}
    sample |= {int(v) for v in rng.integers(0, mmax, 4)}
    sample = {s for s in sample if s < mmax}
    want = {s: np.asarray(ref(x[s : s + 1])).view(np.uint16)[0] for s in sorted(sample)}
    print(f"reference rows: {len(want)} in {time.time() - t0:.1f} s", flush=True)
    exact: dict[int, bool] = {}
    for m in ms:
        ctx = ForwardContext(cfg, backend=cuda, max_rows=m)
        _, fn = layers[0].route(m)
        fn(xd[:m], ctx)
        got = cuda.to_numpy(ctx.buffers.output()[:m]).view(np.uint16)
        exact[m] = all(np.array_equal(got[s], want[s]) for s in want if s < m)
        print(f"m={m}: sampled rows bit-exact: {exact[m]}", flush=True)

    def time_route(m: int) -> float:
        ctxs = [ForwardContext(cfg, backend=cuda, max_rows=m) for _ in layers]
        fns = [ly.route(m)[1] for ly in layers]

        def body() -> None:
            for fn, ctx in zip(fns, ctxs, strict=True):
                fn(xd[:m], ctx)

        return cupy_graph_us(body, args.samples) / len(layers)

    res: dict[str, Any] = {"metrale W8A8": {}, "previous route": {}}
    for m in ms:
        res["metrale W8A8"][m] = time_route(m)
        print(f"m={m}: {res['metrale W8A8'][m]:.1f} us", flush=True)
    # the previous route: 64-row chunks through the GEMV tiers (row groups of 32)
    base = [int(v) for v in args.baseline.split(",") if v]
    saved = (layer_mod.W8A8_PREFILL_ROWS, w8.GEMM_MIN_ROWS)
    layer_mod.W8A8_PREFILL_ROWS, w8.GEMM_MIN_ROWS = 64, 1 << 30
    for m in base:
        res["previous route"][m] = time_route(m)
    layer_mod.W8A8_PREFILL_ROWS, w8.GEMM_MIN_ROWS = saved
    # single projections through each GEMM tile: int8 TOPS
    proj: dict[str, float] = {}
    outb = cp.empty((mmax, inter), dtype=cp.uint16)
    h_codes = w8.DeviceA8Codes(q=cp.ones((mmax, inter), dtype=cp.int8), scale=cp.ones(mmax, dtype=cp.float32))
    for mp in [int(v) for v in args.proj_m.split(",") if v and int(v) <= mmax]:
        x_codes = w8.w8a8_quantize(xd[:mp])
        hc = w8.DeviceA8Codes(q=h_codes.q[:mp], scale=h_codes.scale[:mp])
        for nm, c, wt in (("gate", x_codes, layers[0].w8a8.gate), ("down", hc, layers[0].w8a8.down)):
            for tile in w8.GEMM_TILES:

                def one(c: Any = c, wt: Any = wt, tile: str = tile, mp: int = mp) -> None:
                    w8.w8a8_gemv(c, wt, outb[:mp, : wt.n], gemm=tile)

                us = cupy_graph_us(one, args.samples)
                proj[f"{tile} {nm} m={mp}"] = us
                tops = 2 * mp * wt.n * wt.k / us / 1e6
                pick = " (routing's pick)" if w8.gemm_tile(mp, wt.n).name == tile else ""
                print(f"{tile} {nm} m={mp}: {us:.1f} us = {tops:.0f} TOPS{pick}", flush=True)
    layers.clear()
    cp.get_default_memory_pool().free_all_blocks()
    peers = torch_peers(hidden, inter, ms, args.samples)
    res.update(peers)

    print(
        f"\nW8A8 FFN {hidden}x{inter}, weights {nbytes / 1e6:.1f} MB, read-only {bw / 1e12:.2f} TB/s, "
        f"floor {floor_us:.1f} us; {time.time() - t0:.0f} s"
    )
    print("| | " + " | ".join(f"m={m}" for m in ms) + " |")
    print("| --- |" + " ---: |" * len(ms))
    for name, row in res.items():
        print(f"| {name} | " + " | ".join(f"{row[m]:.1f}" if m in row else "" for m in ms) + " |")
    print("| × floor | " + " | ".join(f"{res['metrale W8A8'][m] / floor_us:.2f}" for m in ms) + " |")
    for peer in peers:
        print(
            f"| {peer} / metrale | "
            + " | ".join(f"{peers[peer][m] / res['metrale W8A8'][m]:.2f}" for m in ms)
            + " |"
        )
    print("| bit-exact | " + " | ".join("yes" if exact[m] else "NO" for m in ms) + " |")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        doc = {
            "hidden": hidden,
            "inter": inter,
            "weight_bytes": nbytes,
            "read_bw": bw,
            "floor_us": floor_us,
            "us": {k: {str(m): v for m, v in r.items()} for k, r in res.items()},
            "projections_us": proj,
            "exact": {str(m): v for m, v in exact.items()},
        }
        (Path(args.out) / "time_w8a8.json").write_text(json.dumps(doc, indent=1))
    return 0 if all(exact.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
