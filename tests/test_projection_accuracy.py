"""Projection accuracy against float64 math, batch invariance, and the fixed tree (arithmetic.md § tree).

Error bound (derived from the contract, used by ``check_bound``)
-----------------------------------------------------------------
Let ŵ_k be the dequantized weight (in float64, exact: e2m1·scale·s2, e4m3·scale[n], q·s, (q−1)·d
or bf16) and A_k the activation the projection really multiplies (A16: the codes times 2^(E−14);
A4: e2m1·f32(scale)·input_scale; A8: q·s). The pipeline computes, per block b, the exact
block value V_b = Σ_{k∈b} ŵ_k·A_k (the block dot S_b is exact), then

1. the block value: at most one inexact fp32 operation on it (S_b·wscale, S_b·d or the one
   rounding of the FP8/BF16 value; A4's products of ≤ 20-bit integers are exact; multiplying by
   2^k is exact away from the subnormal range, which the data here stay clear of): |v_b − V_b| ≤ u·|V_b|;
2. the tree: L = ⌈log2 B⌉ levels, each add rounding its partial sum once, so
   |root − Σ v_b| ≤ γ_L·Σ|v_b| (Higham, pairwise summation), γ_n = n·u/(1 − n·u), u = 2^-24;
3. the row scale: one multiply (u), and for A4 one more for f32(input_scale·weight_scale_2).

Together |r − Σ_b V_b| ≤ γ_{L+3}·Σ_b|V_b| ≤ γ_{L+3}·Σ_k|ŵ_k·A_k| for r the fp32 value before the
output rounding. (W8A8 has no tree, L = 0: f32(S), ·s_a, ·s_w are three roundings.)

The oracle y* = Σ_k ŵ_k·x_k uses the *true* activation x for A16, so add the A16 code rounding:
|A_k − x_k| ≤ ½·2^(E_b−14) = 2^(E_b−15) (E_b the block's max exponent, derived here from
``math.frexp``), giving δ_act = Σ_b 2^(E_b−15)·Σ_{k∈b}|ŵ_k|. FP8/BF16 weights go through 24-bit
block codes that are exact for e4m3 and for bf16 blocks spanning < 2^16; beyond that each code
errs by ≤ 2^(F_b−23): δ_w = Σ_b 2^(F_b−23)·Σ_{k∈b}|A_k| (bf16 only). The float64 oracle itself
errs by ≤ γ_{K+1}(2^-53)·Σ|ŵ_k·x_k|. With T = Σ_k|ŵ_k|·|x_k| + δ_act + δ_w (≥ Σ|ŵ_k·A_k|):

    E1 = γ_{L+3}·T + δ_act + δ_w + γ_{K+1}(2^-53)·T

and the final bf16 rounding (8-bit significand, RNE: relative error ≤ 2^-8, plus half the
smallest bf16 subnormal) gives

    |y − y*| ≤ E1 + 2^-8·(|y*| + E1) + 2^-134.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import (
    BF16,
    E2M1_VALUES,
    F32,
    U32,
    assert_bits_equal,
    bf16_block_exponent,
    bits,
    rand_bf16,
    torch_e4m3_decode,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from metrale.reference.activations import quantize_a4, quantize_a8, quantize_a16
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, W8a8Weight
from metrale.reference.projection import project, project_root
from metrale.reference.tree import tree_sum

PAIRS = [("nvfp4", "A16"), ("nvfp4", "A4"), ("q2_0", "A16"), ("fp8", "A16"), ("bf16", "A16"), ("w8a8", "A8")]


def gamma(n: int, u: float = U32) -> float:
    return n * u / (1 - n * u)


def make_weight(fmt: str, w: np.ndarray) -> object:
    if fmt == "nvfp4":
        return Nvfp4Weight.quantize(w, input_amax=3.0, name="proj")
    return {"q2_0": Q2_0Weight, "fp8": Fp8Weight, "bf16": DenseWeight, "w8a8": W8a8Weight}[fmt].quantize(
        w, name="proj"
    )


def dequant64(q: object) -> np.ndarray:
    """Independent float64 dequantization of each format's stored bits."""
    if isinstance(q, Nvfp4Weight):
        nib = np.empty((q.n, q.k), np.int64)
        nib[:, 0::2], nib[:, 1::2] = q.weight & 0xF, q.weight >> 4
        e2m1 = np.array(E2M1_VALUES + tuple(-v for v in E2M1_VALUES))[nib]
        sc = np.repeat(torch_e4m3_decode(bits(q.weight_scale)).astype(np.float64), 16, axis=1)
        return e2m1 * sc * float(q.weight_scale_2)
    if isinstance(q, Fp8Weight):
        return torch_e4m3_decode(bits(q.weight)).astype(np.float64) * q.weight_scale[:, None].astype(
            np.float64
        )
    if isinstance(q, W8a8Weight):
        return q.weight.astype(np.float64) * q.weight_scale[:, None].astype(np.float64)
    if isinstance(q, DenseWeight):
        return q.weight.astype(np.float64)
    assert isinstance(q, Q2_0Weight)
    raw = q.blocks.reshape(q.n, -1, 18)
    d = np.frombuffer(raw[..., :2].tobytes(), dtype="<f2").reshape(q.n, -1).astype(np.float64)
    qs = raw[..., 2:].astype(np.int64)
    j = np.arange(64)
    codes = (qs[..., j // 4] >> (2 * (j % 4))) & 3
    return ((codes - 1) * d[..., None]).reshape(q.n, q.k)


def oracle(x: np.ndarray, q: object, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(y* float64 [m, N], E1 [m, N]) per the derivation in the module docstring (E1: the bound
    before the output rounding)."""
    w = dequant64(q)
    n, k = w.shape
    nb = k // 16
    delta_act = np.zeros((x.shape[0], n))
    delta_w = np.zeros((x.shape[0], n))
    if mode == "A16":
        a = x.astype(np.float64)
        e = bf16_block_exponent(x)  # [m, B]
        wabs_b = np.abs(w).reshape(n, nb, 16).sum(-1)  # [N, B]
        delta_act = np.exp2(e - 15.0) @ wabs_b.T
        if isinstance(q, DenseWeight):
            f = bf16_block_exponent(q.weight)  # [N, B]
            aabs_b = np.abs(a).reshape(-1, nb, 16).sum(-1)  # [m, B] (|A| ≤ |x| + 2^(E-15))
            aabs_b = aabs_b + 16 * np.exp2(e - 15.0)
            delta_w = aabs_b @ np.exp2(f - 23.0).T
        levels = math.ceil(math.log2(nb)) if nb > 1 else 0
    elif mode == "A4":
        assert isinstance(q, Nvfp4Weight)
        a4 = quantize_a4(x, q.input_scale)
        sc = np.repeat(a4.scales.astype(np.float64), 16, axis=1)
        a = a4.codes.astype(np.float64) / 2 * sc * float(q.input_scale)
        levels = math.ceil(math.log2(nb)) if nb > 1 else 0
    else:
        a8 = quantize_a8(x)
        a = a8.q.astype(np.float64) * a8.scale[:, None].astype(np.float64)
        levels = 0
    y = a @ w.T
    t = np.abs(a) @ np.abs(w).T + delta_act + delta_w
    e1 = gamma(levels + 3) * t + delta_act + delta_w + gamma(k + 1, 2.0**-53) * t
    return y, e1


def check_bound(x: np.ndarray, q: object, mode: str, got: np.ndarray | None = None) -> np.ndarray:
    """Per-output |y − y*| − tol (≤ 0 everywhere when the bound holds)."""
    y = project(x, q, mode) if got is None else got  # type: ignore[arg-type]
    assert y.dtype == BF16
    yf = y.astype(np.float64)
    assert np.isfinite(yf).all()
    want, e1 = oracle(x, q, mode)
    tol = e1 + 2.0**-8 * (np.abs(want) + e1) + 2.0**-134
    return np.abs(yf - want) - tol


def _activations(rng: np.random.Generator, m: int, k: int) -> np.ndarray:
    """Rows at different scales, one with a wide exponent spread inside blocks, one zero row."""
    x = rand_bf16(rng, (m, k)).astype(np.float64)
    x *= np.exp2(rng.uniform(-8, 8, size=(m, 1)))
    x[1] *= np.exp2(rng.integers(-24, 1, size=k))
    x[2] = 0.0
    return x.astype(F32).astype(BF16)


@pytest.mark.parametrize(("fmt", "mode"), PAIRS)
@pytest.mark.parametrize("nblocks", [1, 3, 5, 16, 65])
def test_projection_within_derived_bound(rng: np.random.Generator, fmt: str, mode: str, nblocks: int) -> None:
    k = nblocks * (64 if fmt == "q2_0" else 16)
    m, n = 5, 7
    w = (rng.standard_normal((n, k)) * np.exp2(rng.uniform(-6, 2, size=(n, 1)))).astype(F32)
    q = make_weight(fmt, w)
    x = _activations(rng, m, k)
    excess = check_bound(x, q, mode)
    assert (excess <= 0).all(), (
        f"bound exceeded by {excess.max():.3e} at {np.unravel_index(excess.argmax(), excess.shape)}"
    )


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize("nblocks", [3, 16, 65])
def test_fp32_root_within_e1(rng: np.random.Generator, fmt: str, nblocks: int) -> None:
    """Before the bf16 rounding (``project_root``, FP8/BF16) the fp32 value obeys E1 alone, so
    the block-value and tree part of the derivation is checked without the 2^-8 term."""
    k, m, n = 16 * nblocks, 5, 7
    w = (rng.standard_normal((n, k)) * np.exp2(rng.uniform(-6, 2, size=(n, 1)))).astype(F32)
    q = make_weight(fmt, w)
    x = _activations(rng, m, k)
    root = project_root(quantize_a16(x), q).astype(np.float64)  # type: ignore[arg-type]
    want, e1 = oracle(x, q, "A16")
    assert (np.abs(root - want) <= e1).all()


def test_bound_is_not_vacuous(rng: np.random.Generator) -> None:
    """A plausible layout bug (block scales of two blocks swapped) breaks the bound, and so does
    a one-bf16-ulp error on every output; the check can fail."""
    k, n = 64, 9
    w = rng.standard_normal((n, k)).astype(F32)
    w[:, :16] *= 40.0
    q = Nvfp4Weight.quantize(w, input_amax=3.0, name="proj")
    x = _activations(rng, 4, k)
    swapped = q.weight_scale.copy()
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    bad = Nvfp4Weight(
        weight=q.weight, weight_scale=swapped, weight_scale_2=q.weight_scale_2, input_scale=q.input_scale
    )
    assert (check_bound(x, q, "A16", got=project(x, bad, "A16")) > 0).any()
    y = project(x, q, "A16")
    nudged = (bits(y).astype(np.int32) + np.where(bits(y) & 0x7F80, 2, 0)).astype(np.uint16).view(BF16)
    assert (check_bound(x, q, "A16", got=nudged) > 0).any()


# --------------------------------------------------------------------------- batch invariance


@settings(max_examples=40, deadline=None)
@given(
    pair=st.sampled_from(PAIRS),
    m=st.integers(1, 5),
    n=st.sampled_from([1, 3, 5, 7, 9]),
    nblocks=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_batch_invariance(pair: tuple[str, str], m: int, n: int, nblocks: int, seed: int) -> None:
    """Row r of an m-row projection equals the 1-row projection of row r, bit for bit."""
    fmt, mode = pair
    rng = np.random.default_rng(seed)
    k = nblocks * (64 if fmt == "q2_0" else 16)
    q = make_weight(fmt, rng.standard_normal((n, k)).astype(F32))
    x = (rng.standard_normal((m, k)) * np.exp2(rng.uniform(-10, 10, size=(m, 1)))).astype(F32).astype(BF16)
    if m > 1:
        x[rng.integers(m)] = 0.0
    full = project(x, q, mode)  # type: ignore[arg-type]
    assert full.shape == (m, n)
    for r in range(m):
        assert_bits_equal(project(x[r : r + 1], q, mode), full[r : r + 1], f"row {r}")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the tree


def pairwise(v: list[np.float32]) -> np.float32:
    """Hand-written perfect binary tree: pad with −0.0 to a power of two, sum halves recursively."""
    p = 1
    while p < len(v):
        p *= 2
    v = list(v) + [F32(-0.0)] * (p - len(v))

    def rec(a: list[np.float32]) -> np.float32:
        if len(a) == 1:
            return a[0]
        h = len(a) // 2
        return F32(rec(a[:h]) + rec(a[h:]))

    return rec(v)


def f32s(*vals: float) -> np.ndarray:
    return np.array(vals, dtype=F32)


def test_tree_padding_keeps_negative_zero() -> None:
    """−0.0 + −0.0 = −0.0: three −0.0 leaves (padded with a fourth) sum to −0.0; +0.0 padding
    would have given +0.0."""
    got = tree_sum(f32s(-0.0, -0.0, -0.0))
    assert bits(np.array(got, F32)) == 0x80000000
    assert bits(np.array(tree_sum(f32s(-0.0)), F32)) == 0x80000000


def test_tree_positive_zero_blocks() -> None:
    for v in (f32s(0.0, -0.0, -0.0), f32s(-0.0, -0.0, 0.0), f32s(0.0, 0.0, 0.0, 0.0, 0.0)):
        assert bits(np.array(tree_sum(v), F32)) == 0x00000000


def test_tree_order_is_adjacent_pairs_first() -> None:
    """[1, 2^-24, 2^-24, 2^-24]: left to right every add ties back to 1.0; the tree adds the two
    small ones first, (1 + 2^-24) + 2^-23 = 1 + 2^-23."""
    v = f32s(1.0, 2.0**-24, 2.0**-24, 2.0**-24)
    ltr = F32(0.0)
    for e in v:
        ltr = F32(ltr + e)
    assert ltr == F32(1.0)
    assert tree_sum(v) == F32(1.0 + 2.0**-23)
    # and the hand-written order ((v0+v1)+(v2+v3)) agrees
    assert tree_sum(v) == F32(F32(v[0] + v[1]) + F32(v[2] + v[3]))


def test_tree_hand_written_five_blocks() -> None:
    """B = 5: ((v0+v1)+(v2+v3)) + ((v4+(−0))+((−0)+(−0)))."""
    v = f32s(2.0**24, 1.0, -(2.0**24), 1.0, 3.0)
    want = F32(
        F32(F32(v[0] + v[1]) + F32(v[2] + v[3])) + F32(F32(v[4] + F32(-0.0)) + F32(F32(-0.0) + F32(-0.0)))
    )
    assert bits(np.array(tree_sum(v), F32)) == bits(np.array(want, F32))


@pytest.mark.parametrize("b", [1, 2, 3, 5, 6, 7, 9, 16, 17, 33, 65])
def test_tree_matches_hand_pairwise(rng: np.random.Generator, b: int) -> None:
    """Non-power-of-two B and along an axis: equals the recursive-halves tree on every column."""
    v = (rng.standard_normal((b, 6)) * np.exp2(rng.integers(-30, 30, size=(b, 6)))).astype(F32)
    got = tree_sum(v, axis=0)
    want = np.array([pairwise(list(v[:, j])) for j in range(6)], F32)
    assert_bits_equal(got, want, f"tree B={b}")
    assert_bits_equal(tree_sum(v.T, axis=1), want, "axis=1")


def test_tree_nan_propagates() -> None:
    assert np.isnan(tree_sum(f32s(1.0, np.nan, 2.0)))
