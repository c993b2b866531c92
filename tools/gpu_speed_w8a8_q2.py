"""Device script for the W8A8 and Q2_0 kernels: build, bit-exactness against the numpy
reference on random cases with edge rows, then timings at the Qwen3-8B FFN shape (hidden 4096,
intermediate 12288) against the memory floor, with the copy bandwidth measured in the same run.

Timing: CUDA events around CUDA-graph replays of ``REPS`` launches that rotate over several weight
copies (more bytes than the 50 MB L2), median of 7 replays. Writes ``speed_w8a8_q2.log`` and
``speed_w8a8_q2.json`` under ``$OUT`` (default /tmp).

    PYTHONPATH=$PWD python3 tools/gpu_speed_w8a8_q2.py [--quick]
"""

# The timing lambdas close over loop variables on purpose: timeit() runs them at once.
# ruff: noqa: B023

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())

HIDDEN, INTER = 4096, 12288
REPS = 20


def main() -> None:
    import cupy as cp

    from metrale.backend import get_backend
    from metrale.cuda import q2 as q2mod
    from metrale.cuda import runtime
    from metrale.cuda import w8a8 as w8mod
    from metrale.reference.formats import Q2_0Weight, W8a8Weight
    from metrale.reference.kernels import REFERENCE_KERNELS
    from metrale.reference.projection import project
    from tests.gpu.gen import BF16, rows

    out_dir = os.environ.get("OUT", "/tmp")
    quick = "--quick" in sys.argv
    log = open(os.path.join(out_dir, "speed_w8a8_q2.log"), "w")

    def say(*a: Any) -> None:
        s = " ".join(str(x) for x in a)
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    be = get_backend("cuda")
    props = cp.cuda.runtime.getDeviceProperties(0)
    say(
        "date",
        time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device",
        props["name"].decode(),
        "SMs",
        props["multiProcessorCount"],
    )
    say("build_errors", runtime.build_errors, "import_errors", getattr(be, "import_errors", {}))
    seed = int(os.environ.get("SEED") or time.time())
    say("seed", seed)
    rng = np.random.default_rng(seed)

    def w8w(n: int, k: int) -> W8a8Weight:
        q = rng.integers(-128, 128, (n, k), dtype=np.int16).astype(np.int8)
        q[0, :2] = (-128, 127)
        return W8a8Weight(
            weight=q, weight_scale=np.exp2(rng.uniform(-12, 2, n)).astype(np.float32), name="w8"
        )

    def q2w(n: int, k: int) -> Q2_0Weight:
        q = rng.integers(0, 4, (n, k), dtype=np.uint8)
        d = (rng.standard_normal((n, k // 64)) * np.exp2(rng.integers(-26, 8, (n, k // 64)))).astype(
            np.float16
        )
        d.flat[0] = 0.0
        return Q2_0Weight.from_parts(q, d, name="q2")

    # ---------------- exactness ----------------
    counts: dict[str, list[int]] = {}

    def cmp(name: str, got: Any, want: np.ndarray) -> None:
        g = np.asarray(got).view(np.uint16)
        w = np.asarray(want).view(np.uint16)
        c = counts.setdefault(name, [0, 0])
        c[0] += int((g == w).sum())
        c[1] += int(g.size)
        if (g != w).any():
            i = tuple(np.argwhere(g != w)[0])
            say(f"MISMATCH {name} shape {g.shape} at {i}: got {g[i]:#06x} want {w[i]:#06x}")

    w8_shapes = [(37, 48), (45, 1040), (70, 4112), (129, 4096), (300, 2128), (16, 12288)]
    ms = (1, 2, 3, 5, 8, 9, 16, 17, 32, 33, 64)
    for n, k in w8_shapes:
        h = w8w(n, k)
        wd = be.upload(h)
        x = rows(rng, 64, k)
        want = project(x, h, "A8")
        gate, up = rows(rng, 64, k), rows(rng, 64, k)
        gate[1] = 0
        wantf = np.empty((64, n), BF16)
        REFERENCE_KERNELS["w8a8_silu_quant_gemv"](gate, up, h, wantf)
        gd, ud = cp.asarray(gate.view(np.uint16)), cp.asarray(up.view(np.uint16))
        for m in ms:
            codes = be.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
            for warps in (4, 8):
                o = cp.zeros((m, n), cp.uint16)
                w8mod.w8a8_gemv(codes, wd, o, warps=warps)
                cmp(f"w8a8_gemv(mma w{warps})", o.get(), want[:m])
                o = cp.zeros((m, n), cp.uint16)
                w8mod.w8a8_silu_quant_gemv(gd[:m], ud[:m], wd, o, warps=warps)
                cmp(f"w8a8_silu_quant_gemv(w{warps})", o.get(), wantf[:m])
            o = cp.zeros((m, n), cp.uint16)
            be.launch("w8a8_gemv", codes, wd, o)
            cmp("w8a8_gemv(backend)", o.get(), want[:m])
    for n, k in [(12288, 4096)] if not quick else []:
        h = w8w(n, k)
        wd = be.upload(h)
        x = rows(rng, 32, k, finite=True)
        want = project(x, h, "A8")
        codes = be.launch("w8a8_quantize", cp.asarray(x.view(np.uint16)))
        o = cp.zeros((32, n), cp.uint16)
        be.launch("w8a8_gemv", codes, wd, o)
        cmp("w8a8_gemv(12288x4096 m=32)", o.get(), want)
    for n, k in [(37, 192), (61, 2368), (70, 4160), (129, 4096), (1024, 4096)]:
        h = q2w(n, k)
        wd = be.upload(h)
        x = rows(rng, 64, k)
        want = project(x, h, "A16")
        for m in (1, 2, 3, 4, 5, 8, 13, 32, 64):
            o = cp.zeros((m, n), cp.uint16)
            be.launch("q2_0_gemv_vec_batchm", cp.asarray(x[:m].view(np.uint16)), wd, o, m)
            cmp("q2_0_gemv_vec_batchm", o.get(), want[:m])
        o = cp.zeros((1, n), cp.uint16)
        be.launch("q2_0_gemv_vec", cp.asarray(x[:1].view(np.uint16)), wd, o)
        cmp("q2_0_gemv_vec", o.get(), want[:1])
    exact = True
    for name, (a, b) in sorted(counts.items()):
        say(f"exact {name}: {a}/{b}")
        exact &= a == b
    say("ALL EXACT" if exact else "NOT EXACT: timings below are not results")

    # ---------------- timings ----------------
    a = cp.empty(1 << 30, cp.uint8)
    b = cp.empty_like(a)
    a.fill(1)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for _ in range(12):
        e0.record()
        b[...] = a
        e1.record()
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1))
    bw = 2 * a.nbytes / (float(np.median(ts[2:])) * 1e-3)
    del a, b
    say(f"copy bandwidth {bw / 1e12:.3f} TB/s (read + write of 1 GiB, device to device)")

    def timeit(fn: Callable[[int], None], nrot: int) -> float:
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            for i in range(nrot):
                fn(i)
            s.synchronize()
            s.begin_capture()
            for i in range(REPS):
                fn(i % nrot)
            graph = s.end_capture()
            graph.launch(s)
            s.synchronize()
            t0, t1 = cp.cuda.Event(), cp.cuda.Event()
            tt = []
            for _ in range(7):
                t0.record(s)
                graph.launch(s)
                t1.record(s)
                t1.synchronize()
                tt.append(cp.cuda.get_elapsed_time(t0, t1) / REPS)
        return float(np.median(tt)) * 1e3

    results: list[dict[str, Any]] = []

    def row_out(label: str, m: int, us: float, floor: float) -> None:
        say(f"| {label:44s} | {m:3d} | {us:8.2f} | {floor:6.2f} | {us / floor:5.2f} |")
        results.append(dict(label=label, m=m, us=us, floor_us=floor))

    def xin(m: int, k: int) -> Any:
        return cp.asarray(rows(rng, m, k, finite=True).view(np.uint16))

    say("| kernel | m | us | floor us | ratio |")
    say("| --- | --- | --- | --- | --- |")
    cu = w8mod.CU_FILE
    get = runtime.get_kernel

    for label_n, (n, k) in (("gate", (INTER, HIDDEN)), ("down", (HIDDEN, INTER))):
        nrot = 4
        host = w8w(n, k)  # one host weight, nrot device copies (distinct HBM addresses)
        ws = [be.upload(host) for _ in range(nrot)]
        floor = (n * k + 4 * n) / bw * 1e6
        for m in (1, 2, 4, 8, 16, 32, 64):
            codes = be.launch("w8a8_quantize", xin(m, k))
            o = cp.empty((m, n), cp.uint16)
            row_out(
                f"w8a8_gemv {label_n} {n}x{k} (auto: dp4a at m=1)",
                m,
                timeit(lambda i: w8mod.w8a8_gemv(codes, ws[i], o), nrot),
                floor,
            )
            if not quick:
                for warps in (4, 8):
                    row_out(
                        f"w8a8_gemv {label_n} {n}x{k} (mma w{warps})",
                        m,
                        timeit(lambda i, wp=warps: w8mod.w8a8_gemv(codes, ws[i], o, warps=wp), nrot),
                        floor,
                    )
            if label_n == "down":
                g, u = xin(m, k), xin(m, k)
                row_out(
                    f"w8a8_silu_quant_gemv down {n}x{k}",
                    m,
                    timeit(lambda i: w8mod.w8a8_silu_quant_gemv(g, u, ws[i], o), nrot),
                    floor,
                )
                tq = timeit(
                    lambda i: get(cu, "w8a8_silu_quantize")(
                        (m,),
                        (1024,),
                        (
                            g,
                            np.int64(k),
                            u,
                            np.int64(k),
                            w8mod.silu_table(),
                            np.int32(k),
                            codes.q,
                            codes.scale,
                        ),
                    ),
                    1,
                )
                row_out("  of which w8a8_silu_quantize", m, tq, floor)
        ws.clear()
    for label_n, (n, k) in (("gate", (INTER, HIDDEN)), ("down", (HIDDEN, INTER))):
        nrot = 8
        host = q2w(n, k)
        ws = [be.upload(host) for _ in range(nrot)]
        floor = (n * k * 18 // 64) / bw * 1e6
        for m in (1, 2, 4, 8) if label_n == "gate" else (1, 4):
            x = xin(m, k)
            o = cp.empty((m, n), cp.uint16)
            row_out(
                f"q2_0 {label_n} {n}x{k} (prep + gemv)",
                m,
                timeit(lambda i: be.launch("q2_0_gemv_vec_batchm", x, ws[i], o, m), nrot),
                floor,
            )
            nb = k // 16
            lohi = cp.empty((m * nb * 8,), cp.uint32)
            aux = cp.empty((m * nb * 2,), cp.uint32)
            prep = get(q2mod.CU_FILE, "q2_a16_prep")
            args = (x, np.int64(k), np.int32(k), np.int32(m), lohi, aux)
            prep((q2mod.cdiv(m * nb, q2mod.PREP_THREADS),), (q2mod.PREP_THREADS,), args)
            row_out(
                "  q2_a16_prep alone",
                m,
                timeit(
                    lambda i: prep((q2mod.cdiv(m * nb, q2mod.PREP_THREADS),), (q2mod.PREP_THREADS,), args), 1
                ),
                floor,
            )
            r = q2mod.tier(m, q2mod.Q2_TIERS)
            nc = q2mod.Q2_TIERS[r]
            gk = get(q2mod.CU_FILE, f"q2_0_gemv_r{r}")
            row_out(
                "  q2_0_gemv alone",
                m,
                timeit(
                    lambda i: gk(
                        (q2mod.cdiv(n, 4 * nc), q2mod.cdiv(m, r)),
                        (128,),
                        (
                            ws[i]["qs"],
                            ws[i]["d"],
                            np.int32(n),
                            np.int32(k),
                            lohi,
                            aux,
                            np.int32(m),
                            o,
                            np.int64(n),
                        ),
                    ),
                    nrot,
                ),
                floor,
            )
        ws.clear()
    json.dump(
        dict(bw=bw, seed=seed, exact=exact, counts=counts, times=results),
        open(os.path.join(out_dir, "speed_w8a8_q2.json"), "w"),
        indent=1,
    )
    say("done")


if __name__ == "__main__":
    main()
