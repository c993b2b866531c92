"""The activation step alone on the GPU: ``act_mul_silu`` on the whole table
(``act_mul``) against its compact table in shared memory (``act_mul_st``), and the W8A8
SiLU-quantize step routed (cluster / c1 / slice pair) against ``w8a8_silu_quant_st``, at the
Qwen3-8B intermediate size for 64..4096 rows. Gate and up are Gaussian bf16 (gate scaled by 2:
the codes a real FFN's gate gathers); each pair of paths is checked bit for bit on the same
inputs (h, and the codes and scales) before it is timed. Times: CUDA events over 20 launches
after 5 warm-ups, median of 5; the SiLU-quantize step writes h over its gate, so each launch
of a round takes its own copy of the gate.

    PYTHONPATH=. python docs/bench/runs-2026-12-07i/act_time.py [--rows 64,256,1024,4096]
"""

from __future__ import annotations

import argparse
import statistics

import cupy as cp
import numpy as np

from metrale.backend import get_backend
from metrale.cuda import elementwise, w8a8
from metrale.reference.elements import BF16

N = 12288


def timed(fn, reps: int = 20) -> float:
    """Median over 5 rounds of ``reps`` launches ``fn(i)``, i = 0 .. reps - 1, in µs each."""
    for i in range(5):
        fn(i)
    ts = []
    for _ in range(5):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for i in range(reps):
            fn(i)
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1000 / reps)
    return statistics.median(ts)


def one(be: object, rng: np.random.Generator, m: int) -> None:
    """Both comparisons at m rows, printed."""
    g0 = cp.asarray((rng.standard_normal((m, N)) * 2).astype(np.float32).astype(BF16).view(np.uint16))
    u = cp.asarray(rng.standard_normal((m, N)).astype(np.float32).astype(BF16).view(np.uint16))
    out = cp.empty_like(g0)
    res, t = {}, {}
    for st in (None, 1):
        elementwise.ST_MIN_ROWS = st
        be.launch("act_mul_silu", g0, u, out)
        res[st] = out.copy()
        t[st] = timed(lambda i: be.launch("act_mul_silu", g0, u, out))
    elementwise.ST_MIN_ROWS = None
    same = bool((res[None] == res[1]).all())
    print(f"act_mul m={m}: whole table {t[None]:.2f} us, compact in smem {t[1]:.2f} us, same bits {same}")
    codes, parts = w8a8._codes_scratch(m, N)
    for st in (None, 1):
        w8a8.SILU_ST_MIN_ROWS = st
        g = g0.copy()
        w8a8._silu_quant(g, u, codes, parts)
        res[st] = (g.copy(), codes.q.copy(), codes.scale.copy())
        gs = [g0.copy() for _ in range(20)]
        t[st] = timed(lambda i, gs=gs: w8a8._silu_quant(gs[i], u, codes, parts))
    w8a8.SILU_ST_MIN_ROWS = None
    pairs = zip(res[None], res[1], strict=True)
    same = all(bool((a.view(cp.uint8) == b.view(cp.uint8)).all()) for a, b in pairs)
    print(f"w8a8 SiLU-quantize m={m}: routed {t[None]:.2f} us, st {t[1]:.2f} us, same bits {same}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="64,128,256,1024,4096")
    be = get_backend("cuda")
    rng = np.random.default_rng(0)
    for m in (int(r) for r in ap.parse_args().rows.split(",")):
        one(be, rng, m)


if __name__ == "__main__":
    main()
