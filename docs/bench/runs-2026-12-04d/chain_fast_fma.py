"""A faster exact fma for a chained reference (a probe, not the contract): RNE_f32(p·f + c) from
the float64 sum, which is wrong only where double rounding lands on an f32 midpoint; only the
sums whose low 28 fraction bits are zero (a superset of those) take TwoSum. Timed against
today's tree; checked against exact rationals on 20,000 cases, a quarter of them built so that
the plain float64 sum rounds twice wrongly.

    PYTHONPATH=. python docs/bench/runs-2026-12-04d/chain_fast_fma.py
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from metrale.reference.tree import tree_sum

# the exact-rational rounding of the earlier probe beside the previous run's JSON
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runs-2026-12-04c"))
from chain_reference_proto import rne_f32

F32, F64 = np.float32, np.float64
LOW28 = np.uint64((1 << 28) - 1)
LOW29 = np.uint64((1 << 29) - 1)
HALF29 = np.uint64(1 << 28)


def _fix(s: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """s = RNE64(a + b) at a few positions -> RNE32(a + b)."""
    r = s.astype(F32)
    bits = s.view(np.uint64)
    tiny = np.abs(s) < 2.0**-126
    mid = np.where(tiny, False, (bits & LOW29) == HALF29)
    if tiny.any():
        t = s[tiny] * 2.0**150
        mid[tiny] = (t == np.floor(t)) & (np.fmod(t, 2.0) != 0)
    if not mid.any():
        return r
    bp = s - a
    ap = s - bp
    e = (a - ap) + (b - bp)
    bad = mid & (e != 0)
    r[bad] = np.nextafter(s[bad], np.copysign(np.inf, e[bad])).astype(F32)
    return r


def chain(prod: np.ndarray) -> np.ndarray:
    """prod float64 [L, ...] (exact products) -> f32 [...]: c = fma chain from -0.0."""
    c64 = np.full(prod.shape[1:], -0.0, F64)
    c = c64.astype(F32)
    s = np.empty_like(c64)
    for j in range(prod.shape[0]):
        np.add(prod[j], c64, out=s)
        cand = (s.view(np.uint64) & LOW28) == 0
        if cand.any():
            idx = np.nonzero(cand)
            c = s.astype(F32)
            c[idx] = _fix(s[idx], prod[j][idx], c64[idx])
        else:
            c = s.astype(F32)
        c64 = c.astype(F64)
    return c


def chain_parts(p32: np.ndarray, f32: np.ndarray, part: int = 64) -> np.ndarray:
    """f32 p, f [B, ...] -> f32 [...]: fma chains over aligned parts, the padded tree over parts."""
    b = p32.shape[0]
    prod = p32.astype(F64) * f32.astype(F64)
    nparts = -(-b // part)
    pad = nparts * part - b
    if pad:
        # −0.0 products leave every chain as it is (c + −0.0 = c, −0.0 included)
        prod = np.concatenate([prod, np.full((pad, *prod.shape[1:]), -0.0)])
    prod = prod.reshape(nparts, part, *prod.shape[1:]).swapaxes(0, 1).copy()
    roots = chain(prod)
    return tree_sum(roots, axis=0)


def main():
    rng = np.random.default_rng(0)
    b, n = 256, 64 * 1536
    p = (rng.standard_normal((b, n)) * 1000).astype(F32)
    f = np.ldexp(1.0, rng.integers(-8, 8, (b, n))).astype(F32) * F32(1.125)
    v = (p * f).astype(F32)
    for _ in range(2):
        t0 = time.perf_counter()
        tree_sum(v, axis=0)
        t1 = time.perf_counter()
        chain_parts(p, f)
        t2 = time.perf_counter()
        print(f"tree {t1 - t0:.3f}s chain {t2 - t1:.3f}s ({(t2 - t1) / (t1 - t0):.1f}x)")
    # exactness against rationals, with hard cases: ties made on purpose
    n = 20000
    a = rng.standard_normal(n).astype(F32) * F32(2.0) ** rng.integers(-140, 100, n).astype(F32)
    bb = rng.standard_normal(n).astype(F32) * F32(2.0) ** rng.integers(-30, 30, n).astype(F32)
    c = rng.standard_normal(n).astype(F32) * F32(2.0) ** rng.integers(-149, 120, n).astype(F32)
    # ties: c = midpoint-maker
    k = n // 4
    a[:k] = F32(1.0) + F32(2.0**-23) * rng.integers(0, 2**10, k).astype(F32)
    bb[:k] = F32(1.0)
    c[:k] = (
        (F32(2.0**-24) * rng.choice([1, -1], k).astype(F32))
        * (F32(1) + F32(2.0**-23) * rng.integers(0, 3, k).astype(F32))
        * np.ldexp(F32(1), rng.integers(-30, 1, k)).astype(F32)
    )
    # double-rounding cases: a*b an f32 midpoint (1 + 2^-i + 2^-j patterns), c far below its f64 ulp
    t = n // 4
    i = rng.integers(1, 12, t)
    a[k : k + t] = (1.0 + np.ldexp(1.0, -i)).astype(F32)
    bb[k : k + t] = (1.0 + np.ldexp(1.0, i - 24)).astype(F32)
    c[k : k + t] = (rng.choice([1.0, -1.0], t) * np.ldexp(1.0, rng.integers(-149, -60, t))).astype(F32)
    prod = a.astype(F64) * bb.astype(F64)
    c64 = c.astype(F64)
    s = prod + c64
    got = s.astype(F32)
    cand = (s.view(np.uint64) & LOW28) == 0
    idx = np.nonzero(cand)
    got[idx] = _fix(s[idx], prod[idx], c64[idx])
    bad = 0
    for x, y, z, g in zip(a, bb, c, got, strict=False):
        if not np.isfinite(g):
            continue
        want = rne_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
        bad += int(want.view(np.uint32) != g.view(np.uint32))
    naive = (s.astype(F32).view(np.uint32) != got.view(np.uint32)).sum()
    print(f"fma32: {bad} of {n} differ from exact; the plain f64 sum would differ at {naive}")


main()
