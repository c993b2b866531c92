"""The FP8 chain tile's two-fma epilogue (docs/chain-revision.md, "The FP8 chain tile"): per
block, from the exact limb dots D_1 = 2^(F−10) I_1 and D_0 = 2^(F−10) I_0 (F the weight block's
exponent, −6 ≤ F ≤ 8; I_l the integer dot of the 11-bit weight codes with limb l of the A16 codes),
t = fma(D_1, 256, D_0) and c ← fma(t, 2^(E−14), c) give the contract's c ← c + v,
v = f32(S · 2^(E+F−24)) with S = 256 I_1 + I_0 (chain.py), for every E of the fast window
−119 ≤ E ≤ 114 and every f32 c: t = 2^(F−10) · RNE_24(S) (normal), and t · 2^(E−14) is v itself —
RNE commutes with a power of two where v is normal, and where v is subnormal |S| < 2^23 (E + F − 24
≥ −149), so t is exact and v a multiple of 2^−149. Above E = 114 the exact t · 2^(E−14) may pass
f32's largest value where v is Inf, and a finite c then keeps the fma finite: the window's top.
Exact rationals decide (tests/oracle.py)."""

from __future__ import annotations

import numpy as np
import oracle
import pytest
from helpers import F32, bits
from hypothesis import given, settings
from hypothesis import strategies as st

from metrale.reference.chain import FP8_FRAC

#: The fast window of E (the A16 block exponent) and the weight block exponents F of e4m3
#: (chain.py's weight_codes: the block's exponent field minus 7, a zero field counted as 1).
E_LO, E_HI = -119, 114
F_LO, F_HI = -6, 8
#: |codes| <= 1920 (FP8_FRAC = 10), limb 0 in 0 .. 255, limb 1 in -128 .. 127, 16 per block.
I0_MAX, I1_MAX = 16 * 1920 * 255, 16 * 1920 * 128
MAX = float(np.finfo(np.float32).max)


def contract(i1: int, i0: int, e: int, f: int, c: float) -> F32:
    """c + v, v = f32(S · 2^(E+F−24)) rounded once (S < 2^31: float64 holds S · 2^k exactly)."""
    v = oracle.f32(np.ldexp(float(256 * i1 + i0), e + f - 24))
    return oracle.fma(v, 1.0, c)


def kernel(i1: int, i0: int, e: int, f: int, c: float) -> F32:
    """fma(fma(D_1, 256, D_0), 2^(E−14), c) of the f32 limb dots (exact: |I_l| < 2^23)."""
    d1, d0 = F32(np.ldexp(float(i1), f - FP8_FRAC)), F32(np.ldexp(float(i0), f - FP8_FRAC))
    assert float(d1) == i1 * 2.0 ** (f - FP8_FRAC) and float(d0) == i0 * 2.0 ** (f - FP8_FRAC)
    t = oracle.fma(d1, 256.0, d0)
    return oracle.fma(t, F32(np.ldexp(1.0, e - 14)), c)


def same(a: F32, b: F32) -> bool:
    return bool(np.isnan(a) and np.isnan(b)) or bits(a) == bits(b)


# name: (I_1, I_0, E, F, c)
CASES = {
    "largest_sum_at_the_top": (I1_MAX - 1, I0_MAX, E_HI, F_HI, 0.0),
    "largest_negative_sum_at_the_top": (-I1_MAX, 0, E_HI, F_HI, -MAX),
    "top_against_max_c": (I1_MAX - 1, I0_MAX, E_HI, F_HI, MAX),
    "smallest_term": (0, 1, E_LO, F_LO, 0.0),  # v = 2^-149
    "smallest_term_negative_c": (0, -1, E_LO, F_LO, -(2.0**-149)),
    "subnormal_23_bits": (2**14 - 1, 255, E_LO, F_LO, 0.0),  # S < 2^23: exact
    "subnormal_edge": (2**15, 0, E_LO, F_LO, 0.0),  # S = 2^23: v = 2^-126
    "tie_to_even_in_t": (2**17, 1, 0, 0, 0.0),  # S = 2^25 + 1: t rounds down
    "tie_to_even_in_t_up": (2**17, 3, 0, 0, 0.0),  # S = 2^25 + 3: t rounds up
    "tie_in_t_subnormal_scale": (2**17, 3, E_LO, F_LO, 0.0),  # v normal, t rounds
    "cancelling_limbs": (1, -256, 0, 0, 5.0),  # S = 0: t = +0
    "zero_sum_negative_zero_c": (0, 0, 3, 2, -0.0),  # +0 + -0 = +0
    "c_infinite": (5, 7, 0, 0, float("inf")),
    "c_nan": (5, 7, 0, 0, float("nan")),
    "v_cancels_c": (1, 0, 0, 10 - FP8_FRAC, -(2.0 ** (8 + 0 - 14))),  # c + v = 0 exactly
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_two_fma_epilogue_named(name: str) -> None:
    i1, i0, e, f, c = CASES[name]
    got, want = kernel(i1, i0, e, f, c), contract(i1, i0, e, f, c)
    assert same(got, want), f"{name}: {got!r} != {want!r}"


def test_negative_zero_limbs() -> None:
    """Both limb dots −0 (every product a negative zero): t = −0, and −0 · 2^(E−14) + (−0) is −0
    as the contract's (−0) + (−0)."""
    t = oracle.fma(F32(-0.0), 256.0, F32(-0.0))
    got = oracle.fma(t, F32(2.0**-14), F32(-0.0))
    want = oracle.fma(oracle.fma(F32(-0.0), F32(2.0**-6), F32(-0.0)), 1.0, F32(-0.0))  # c + v, v = −0
    assert bits(t) == bits(F32(-0.0)) and bits(got) == bits(want) == bits(F32(-0.0))


def test_the_window_top_is_needed() -> None:
    """At E = 115 the largest sum's v is Inf but t · 2^(E−14) is an exact finite rational: c =
    −MAX keeps the two-fma result finite where the contract's c + v is Inf."""
    i1, i0, e, f, c = I1_MAX - 1, I0_MAX, E_HI + 1, F_HI, -MAX
    want = contract(i1, i0, e, f, c)
    got = kernel(i1, i0, e, f, c)
    assert np.isinf(want) and np.isfinite(got)


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=600, deadline=None)
@given(
    st.integers(-I1_MAX, I1_MAX - 1),
    st.integers(-I0_MAX // 2, I0_MAX),
    st.integers(E_LO, E_HI),
    st.integers(F_LO, F_HI),
    finite32,
)
def test_two_fma_epilogue_matches_contract(i1: int, i0: int, e: int, f: int, c: float) -> None:
    assert same(kernel(i1, i0, e, f, c), contract(i1, i0, e, f, c))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-(2**10), 2**10),
    st.integers(-(2**12), 2**12),
    st.sampled_from([E_LO, E_LO + 1, -112, -100, E_HI - 1, E_HI]),
    st.sampled_from([F_LO, F_LO + 1, 0, F_HI]),
    st.sampled_from([0.0, -0.0, 2.0**-149, -(2.0**-126), 1.0, -MAX]),
)
def test_two_fma_epilogue_at_the_edges(i1: int, i0: int, e: int, f: int, c: float) -> None:
    """Small sums at the window's edges (subnormal v at the bottom) against edge c values."""
    assert same(kernel(i1, i0, e, f, c), contract(i1, i0, e, f, c))
