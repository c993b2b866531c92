"""Hypothesis strategies for activation rows that reach the contract's edges: each 16-block of
a drawn kind (Gaussian of any magnitude, zeros, signed zeros, subnormals, NaN, ±Inf, A16 ties,
bf16 saturation, a tiny amax beside zeros)."""

from __future__ import annotations

import numpy as np
from helpers import BF16, F32
from hypothesis import strategies as st

_KINDS = (
    "gauss",
    "zeros",
    "signed_zeros",
    "subnormal",
    "nan",
    "pos_inf",
    "neg_inf",
    "ties",
    "saturation",
    "tiny",
)


def _block(kind: str, rng: np.random.Generator) -> np.ndarray:
    """One 16-element bf16 block of ``kind``."""
    sign = np.where(rng.random(16) < 0.5, -1.0, 1.0)
    g = rng.standard_normal(16) * np.exp2(rng.uniform(-20, 20))
    if kind == "zeros":
        v = np.zeros(16)
    elif kind == "signed_zeros":
        v = sign * 0.0
    elif kind == "subnormal":
        v = sign * rng.integers(1, 128, 16) * 2.0**-133
    elif kind in ("nan", "pos_inf", "neg_inf"):
        v = g.copy()
        v[rng.integers(16)] = {"nan": np.nan, "pos_inf": np.inf, "neg_inf": -np.inf}[kind]
    elif kind == "ties":  # block max 2^e; odd multiples of 2^(e-15) sit on the A16 grid's midpoints
        e = int(rng.integers(-40, 40))
        v = sign * (2 * rng.integers(0, 64, 16) + 1) * 2.0 ** (e - 15)
        v[0] = 2.0**e
    elif kind == "saturation":
        v = sign * rng.integers(0x7F70, 0x7F80, 16).astype(np.uint16).view(BF16).astype(np.float64)
    elif kind == "tiny":  # a tiny amax beside zeros: A8's and A4's 1/d overflow to Inf
        v = np.zeros(16)
        v[rng.integers(16)] = sign[0] * 2.0 ** int(rng.integers(-133, -126))
    else:
        v = g
    return v.astype(F32).astype(BF16)


@st.composite
def edge_rows(draw: st.DrawFn, k: int) -> np.ndarray:
    """bf16 rows [m, k], m in 1..70, each 16-block of a drawn kind (seeded from the draw)."""
    m = draw(st.integers(1, 70))
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=m * k // 16, max_size=m * k // 16))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return np.stack(
        [np.concatenate([_block(kinds[r * k // 16 + b], rng) for b in range(k // 16)]) for r in range(m)]
    )
