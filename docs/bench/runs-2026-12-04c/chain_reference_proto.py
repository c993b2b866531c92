"""CPU cost of a chained reference (a probe, not the contract): block products chained by an
exact fma emulation over aligned 64-block parts, then the padded tree over parts, timed against
today's tree over blocks; the emulation checked against exact rationals.

    python docs/bench/runs-2026-12-04c/chain_reference_proto.py
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from metrale.reference.tree import tree_sum

F32, F64 = np.float32, np.float64


def fma32(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """RNE_f32(p + c) for float64 p (exact block products) and f32 c: the float64 sum rounded to
    odd (TwoSum gives its error), then to f32, which is exact since 53 >= 24 + 2."""
    c64 = c.astype(F64)
    s = p + c64
    bp = s - c64
    e = (p - bp) + (c64 - (s - bp))
    fix = (e != 0) & ((s.view(np.uint64) & 1) == 0)
    s = np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


def chain_parts(p: np.ndarray, part: int = 64) -> np.ndarray:
    """Block products p float64 [B, n] -> f32 [n]: a chain from -0.0 within each part, the padded
    tree over the parts' chains."""
    b, n = p.shape
    roots = []
    for lo in range(0, b, part):
        c = np.full(n, -0.0, dtype=F32)
        for j in range(lo, min(b, lo + part)):
            c = fma32(p[j], c)
        roots.append(c)
    return tree_sum(np.stack(roots), axis=0)


def rne_f32(x: Fraction) -> np.float32:
    """The f32 nearest to the rational x, ties to the even code."""
    f = F32(float(x))
    cands = [f, np.nextafter(f, F32(np.inf)), np.nextafter(f, F32(-np.inf))]
    dist = [abs(Fraction(float(y)) - x) for y in cands]
    best = [y for y, d in zip(cands, dist, strict=True) if d == min(dist)]
    return best[0] if len(best) == 1 else next(y for y in best if int(y.view(np.uint32)) % 2 == 0)


def main() -> None:
    rng = np.random.default_rng(0)
    b, n = 256, 64 * 1536  # K = 4096; 64 rows x 1536 columns
    p = rng.standard_normal((b, n)) * np.ldexp(1.0, rng.integers(-8, 8, (b, 1)))
    v = p.astype(F32)
    t0 = time.perf_counter()
    tree_sum(v, axis=0)
    t1 = time.perf_counter()
    chain_parts(p)
    t2 = time.perf_counter()
    print(f"tree over {b} blocks x {n}: {t1 - t0:.3f} s; chain over 64-block parts: {t2 - t1:.3f} s")
    c = rng.standard_normal(2000).astype(F32) * F32(2.0) ** rng.integers(-30, 30, 2000).astype(F32)
    q = rng.standard_normal(2000) * 2.0 ** rng.integers(-60, 60, 2000)
    got = fma32(q, c)
    bad = sum(
        int(rne_f32(Fraction(float(a)) + Fraction(float(x))).view(np.uint32) != g.view(np.uint32))
        for a, x, g in zip(q, c, got, strict=True)
    )
    print(f"fma32 against exact rationals: {bad} of {len(q)} differ")


if __name__ == "__main__":
    main()
