"""Device script for the FP8/BF16 × A16 integer tensor-core GEMM (``w8a16_gemm`` / ``dense_gemm``):
build, bit-exactness against the numpy reference (full comparison for m ≤ 300, sampled rows
against one-row results at prefill sizes), then µs per Qwen3-8B FFN's three projections (hidden
4096, intermediate 12288) against the memory floor and bf16 cuBLAS (torch) in the same run.

Timing: CUDA events around ``REPS`` back-to-back launches after a warm-up, median of 3.
Writes ``speed_fp8_bf16.log`` under ``$OUT`` (default /tmp).

    PYTHONPATH=$PWD python3 tools/gpu_speed_fp8_bf16.py
"""

# ruff: noqa: B023

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())

HIDDEN, INTER = 4096, 12288
M_VALUES = (2, 3, 4, 8, 16, 32, 64, 512, 2048, 4096)
#: Rows also timed through the CUDA-core GEMV kernels (the tensor-core GEMM switched off).
GEMV_M = (2, 3, 4, 8)
FLOOR_TBS = 4.4


def main() -> None:
    import cupy as cp
    import torch

    from metrale.backend import get_backend
    from metrale.cuda import fp8_bf16 as wide
    from metrale.reference.formats import DenseWeight, Fp8Weight
    from metrale.reference.projection import project
    from tests.gpu.gen import BF16, E4M3, E4M3_FINITE, F32, rows

    out_dir = os.environ.get("OUT", "/tmp")
    log = open(os.path.join(out_dir, "speed_fp8_bf16.log"), "w")

    def say(*a: Any) -> None:
        s = " ".join(str(x) for x in a)
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    be = get_backend("cuda")
    props = cp.cuda.runtime.getDeviceProperties(0)
    say("date", time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device", props["name"].decode())
    rng = np.random.default_rng(20261201)

    def fp8(n: int, k: int, name: str) -> Fp8Weight:
        scale = np.exp2(rng.uniform(-8, -4, n)).astype(F32)
        return Fp8Weight(weight=rng.choice(E4M3_FINITE, (n, k)).view(E4M3), weight_scale=scale, name=name)

    def bf16(n: int, k: int, name: str) -> DenseWeight:
        return DenseWeight(weight=(rng.standard_normal((n, k), dtype=F32) * 0.02).astype(BF16), name=name)

    def run(kernel: str, x: np.ndarray | Any, wd: Any, n: int) -> np.ndarray:
        xa = x if isinstance(x, cp.ndarray) else cp.asarray(x.view(np.uint16))
        o = cp.empty((xa.shape[0], n), dtype=cp.uint16)
        be.launch(kernel, xa, wd, o)
        return cp.asnumpy(o)

    # ---- exactness ----
    bad = 0
    for fmt, kern, mk in (("fp8", "w8a16_gemm", fp8), ("bf16", "dense_gemm", bf16)):
        host = mk(1000, HIDDEN, "w")
        wd = be.upload(host)
        x = rows(rng, 300, HIDDEN)
        want = project(x, host, "A16").view(np.uint16)
        for m in (2, 3, 5, 17, 64, 300):
            got = run(kern, x[:m], wd, host.n)
            d = int((got != want[:m]).sum())
            bad += d
            say(f"exact {fmt} m={m}: {d} of {got.size} differ")
        big = rows(rng, 2050, HIDDEN)
        got = run(kern, big, wd, host.n)
        for r in (0, 1, 1023, 1024, 1500, 2049):
            one = project(big[r : r + 1], host, "A16").view(np.uint16)[0]
            d = int((got[r] != one).sum())
            bad += d
            say(f"exact {fmt} m=2050 row {r}: {d} differ")
    say("EXACT" if bad == 0 else f"MISMATCH {bad}")

    # ---- timing ----
    def timeit(fn: Callable[[], None], reps: int) -> float:
        fn()
        cp.cuda.Device().synchronize()
        t0, t1 = cp.cuda.Event(), cp.cuda.Event()
        tt = []
        for _ in range(3):
            t0.record()
            for _ in range(reps):
                fn()
            t1.record()
            t1.synchronize()
            tt.append(cp.cuda.get_elapsed_time(t0, t1) / reps)
        return float(np.median(tt)) * 1e3

    tw = {
        "gate": torch.randn(INTER, HIDDEN, device="cuda", dtype=torch.bfloat16),
        "up": torch.randn(INTER, HIDDEN, device="cuda", dtype=torch.bfloat16),
        "down": torch.randn(HIDDEN, INTER, device="cuda", dtype=torch.bfloat16),
    }
    cublas = {}
    for m in M_VALUES:
        xt = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)
        ht = torch.randn(m, INTER, device="cuda", dtype=torch.bfloat16)

        def tfn() -> None:
            torch.mm(xt, tw["gate"].T)
            torch.mm(xt, tw["up"].T)
            torch.mm(ht, tw["down"].T)

        cublas[m] = timeit(tfn, 20)
    for fmt, kern, mk, wbytes in (("fp8", "w8a16_gemm", fp8, 1), ("bf16", "dense_gemm", bf16, 2)):
        t_up = time.time()
        ws = {
            "gate": be.upload(mk(INTER, HIDDEN, "gate")),
            "up": be.upload(mk(INTER, HIDDEN, "up")),
            "down": be.upload(mk(HIDDEN, INTER, "down")),
        }
        for name, wd in ws.items():  # the first call with m >= MMA_MIN_M builds the fragments
            k = HIDDEN if name != "down" else INTER
            run(kern, cp.zeros((wide.MMA_MIN_M, k), dtype=cp.uint16), wd, wd.n)
        say(f"{fmt} upload and tensor-core fragments {time.time() - t_up:.1f} s")
        floor = 3 * HIDDEN * INTER * wbytes / (FLOOR_TBS * 1e12) * 1e6
        for m in M_VALUES:
            x = cp.asarray(rows(rng, m, HIDDEN, finite=True).view(np.uint16))
            h = cp.asarray(rows(rng, m, INTER, finite=True).view(np.uint16))
            og = cp.empty((m, INTER), dtype=cp.uint16)
            ou = cp.empty((m, INTER), dtype=cp.uint16)
            od = cp.empty((m, HIDDEN), dtype=cp.uint16)

            def fn() -> None:
                be.launch(kern, x, ws["gate"], og)
                be.launch(kern, x, ws["up"], ou)
                be.launch(kern, h, ws["down"], od)

            t0 = time.time()
            fn()
            cp.cuda.Device().synchronize()
            once = time.time() - t0
            t = timeit(fn, 1 if once > 0.05 else 5)
            say(
                f"{fmt} m={m}: {t:.1f} us = {t / floor:.2f}x floor ({floor:.1f} us); "
                f"bf16 cuBLAS {cublas[m]:.1f} us, ratio {t / cublas[m]:.2f}"
            )
            if m in GEMV_M:
                keep, wide.MMA_MIN_M = wide.MMA_MIN_M, 1 << 30
                tg = timeit(fn, 5)
                wide.MMA_MIN_M = keep
                say(f"{fmt} m={m}: CUDA-core GEMV kernels {tg:.1f} us = {tg / floor:.2f}x floor")
            if once > 3.0:
                say(f"{fmt}: stopping at m={m} (one FFN took {once:.1f} s)")
                break
    log.close()


if __name__ == "__main__":
    main()
