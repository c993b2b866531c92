"""The block-value chain of the contract revision (``metrale/reference/chain.py``,
docs/chain-revision.md) against ``tests/oracle.py``: the exact fma on named bitwise cases, on
crafted double-rounding traps and hypothesis-drawn f32 triples (rationals decide); the part
chains over every part length; every (format, mode) projection's root and bf16 output, bit for
bit, on seeded and edge rows, K over one, two and three parts (a padded tree over parts)."""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise

import numpy as np
import oracle
import pytest
from helpers import BF16, E4M3, F32, bits
from hypothesis import given, settings
from hypothesis import strategies as st
from test_root_oracle import PAIRS, make_weight, same, seeded_rows

from metrale.errors import MetraleError
from metrale.reference.activations import quantize_a4, quantize_a16, weight_codes
from metrale.reference.chain import (
    FP8_FRAC,
    PART_BLOCKS,
    add_parts,
    chain_parts,
    chain_projection,
    chain_range_roots,
    fma_f32,
    fp8_effective,
    part_count,
    part_ranges,
    project_chain,
)
from metrale.reference.elements import to_bf16
from metrale.reference.formats import Fp8Weight
from metrale.reference.projection import finish_roots, project

TINY = float(np.float32(2.0**-149))
MAX = float(np.finfo(np.float32).max)
ULP1 = 2.0**-23

# name: (p, f, c); every want is oracle.fma's (exact rationals, IEEE signed zeros)
FMA_CASES = {
    "zero_prod_plus_neg_zero": (0.0, 3.0, -0.0),
    "neg_zero_prod_plus_neg_zero": (-0.0, 3.0, -0.0),
    "neg_zero_prod_plus_zero": (-2.0, 0.0, 0.0),
    "exact_cancellation": (3.0, 2.0, -6.0),
    "tie_to_even_down": (1.0, 1.0, 2.0**-24),
    "tie_to_even_up": (1.0 + ULP1, 1.0, 2.0**-24),
    "one_rounding_not_two": (1.0 + 2.0**-12, 1.0 + 2.0**-12, 2.0**-30),  # p·f = 1 + 2^-11 + 2^-24
    # p·f an f32 midpoint whose tie goes down (up); c, far below p·f's float64 ulp, says up (down)
    "double_rounding_trap": (3.0, 1.0 + 3 * ULP1, 2.0**-80),
    "double_rounding_trap_neg": (3.0, 1.0 + ULP1, -(2.0**-80)),
    "subnormal_result": (2.0**-75, 2.0**-74, 0.0),
    "subnormal_tie": (TINY, 0.5, 0.0),
    "subnormal_tie_odd": (3 * TINY, 0.5, 0.0),
    "subnormal_plus_tiny_prod": (TINY, 0.5, TINY),
    "subnormal_sum": (TINY, 3.0, -TINY),
    "overflow_to_inf": (MAX, 2.0, 0.0),
    "overflow_threshold_tie": (MAX, 1.0, 2.0**103),
    "below_overflow_threshold": (MAX, 1.0, 2.0**102),
    "max_finite": (MAX, 1.0, 0.0),
    "nan_operand": (float("nan"), 1.0, 2.0),
    "inf_times_zero": (float("inf"), 0.0, 1.0),
    "inf_minus_inf": (float("inf"), 1.0, float("-inf")),
    "inf_prod": (float("inf"), -2.0, 5.0),
}


@pytest.mark.parametrize("name", sorted(FMA_CASES))
def test_fma_named_cases(name: str) -> None:
    p, f, c = (np.float32(v) for v in FMA_CASES[name])
    with np.errstate(all="ignore"):
        got = fma_f32(np.array([p]), np.array([f]), np.array([c]))[0]
    want = oracle.fma(p, f, c)
    assert (np.isnan(got) and np.isnan(want)) or bits(got) == bits(want), f"{name}: {got!r} != {want!r}"


def test_fma_one_rounding_differs_from_two() -> None:
    """The trap cases are traps: rounding the product first, or the float64 sum straight to
    f32, gives another f32 there, so the test above sees a two-rounding fma."""
    for name in ("one_rounding_not_two", "double_rounding_trap", "double_rounding_trap_neg"):
        p, f, c = (np.float32(v) for v in FMA_CASES[name])
        two = np.float32(np.float64(p) * np.float64(f) + np.float64(c))
        prod_first = np.float32(p * f) + c
        want = oracle.fma(p, f, c)
        assert bits(two) != bits(want) or bits(prod_first) != bits(want), name


def test_fma_seeded_traps() -> None:
    """4,000 seeded triples over f32's range, half of them built to land the float64 sum on an
    f32 midpoint (p·f a midpoint, c far below its float64 ulp)."""
    rng = np.random.default_rng(11)
    n = 4000
    p = (rng.standard_normal(n) * np.exp2(rng.integers(-140, 100, n))).astype(F32)
    f = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(F32)
    c = (rng.standard_normal(n) * np.exp2(rng.integers(-149, 120, n))).astype(F32)
    t = n // 2
    i = rng.integers(1, 12, t)
    p[:t] = (1.0 + np.ldexp(1.0, -i)).astype(F32)
    f[:t] = (1.0 + np.ldexp(1.0, i - 24)).astype(F32)
    c[:t] = (rng.choice([1.0, -1.0], t) * np.ldexp(1.0, rng.integers(-149, -60, t))).astype(F32)
    with np.errstate(all="ignore"):
        got = fma_f32(p, f, c)
        naive = (p.astype(np.float64) * f + c).astype(F32)
    want = np.array([oracle.fma(a, b, z) for a, b, z in zip(p, f, c, strict=True)], dtype=F32)
    assert np.array_equal(bits(got), bits(want))
    assert (bits(naive) != bits(want)).sum() > 100  # the traps are there


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(finite32, finite32, finite32)
def test_fma_matches_rationals(p: float, f: float, c: float) -> None:
    with np.errstate(all="ignore"):
        got = fma_f32(np.array([p], F32), np.array([f], F32), np.array([c], F32))[0]
    assert bits(got) == bits(oracle.fma(p, f, c))


@pytest.mark.parametrize("nb", [1, 2, 63, 64, 65, 130, 192])
def test_chain_parts_match_oracle(nb: int) -> None:
    """Part roots of fma chains and of add chains, every part length (a last part of 1, 63, 64
    blocks and whole parts), with a NaN term, ±0 and subnormal terms."""
    rng = np.random.default_rng(nb)
    p = (rng.standard_normal((nb, 3, 2)) * np.exp2(rng.integers(-30, 30, (nb, 3, 2)))).astype(F32)
    f = np.exp2(rng.integers(-9, 9, (nb, 3, 1))).astype(F32) * F32(1.125)
    p[0, 0, 0] = -0.0
    p[-1, 1, 0] = TINY
    if nb > 2:
        p[nb // 2, 2, 1] = np.nan
    assert part_count(nb) == -(-nb // PART_BLOCKS)
    with np.errstate(all="ignore"):
        same(chain_parts(p, f), oracle.chain(p, f), f"fma chain, {nb} blocks")
        same(add_parts(p), oracle.chain(p, None), f"add chain, {nb} blocks")


def test_all_zero_row_is_plus_zero() -> None:
    """+0 products chain from −0.0 to +0 (fma(+0, f, −0) = +0), as the tree gives."""
    z = np.zeros((70, 2), F32)
    assert bits(chain_parts(z, np.ones((70, 1), F32))).tolist() == [[0, 0], [0, 0]]
    neg = np.full((70, 2), -0.0, F32)
    assert (bits(add_parts(neg)) == 0x8000_0000).all()  # −0.0 + −0.0 stays −0.0


@pytest.mark.parametrize(("fmt", "mode"), [p for p in PAIRS if p[1] != "A8"])
@pytest.mark.parametrize("k", [16 * 40, 16 * 68, 16 * 132])
def test_chain_projection_matches_oracle(fmt: str, mode: str, k: int) -> None:
    """Root (after the row scale) and bf16 output of every pair: one part, two parts (the last
    partial), three parts (the tree over parts padded to four), seeded and edge rows."""
    w = make_weight(fmt, 5, k, seed=k + 3)
    x = seeded_rows(k, 3, k)
    codes = quantize_a4(x, w.input_scale) if mode == "A4" else quantize_a16(x)
    with np.errstate(all="ignore"):
        want = oracle.root(x, w, mode, summed=oracle.chain_root)
        same(chain_projection(codes, w), want, f"{fmt}x{mode} chain root, K = {k}")
        got = project_chain(x, w, mode)
    assert np.array_equal(bits(got), bits(oracle.to_bf16(want))), f"{fmt}x{mode} output, K = {k}"


def test_reference_backend_on_the_chain() -> None:
    """ReferenceBackend(chain=True) (metrale bench --chain's reference) projects by
    project_chain, the default one by project: on rows where one bf16 output of the two differs,
    each backend's kernels give its own, for a single and a dual launch."""
    from metrale.reference.kernels import ReferenceBackend

    w = make_weight("nvfp4", 64, 2048, seed=1)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((16, 2048)) * 4).astype(F32).astype(BF16)
    with np.errstate(all="ignore"):
        tree, chain = project(x, w, "A16"), project_chain(x, w, "A16")
        assert (bits(tree) != bits(chain)).sum() == 1  # the case is a case
        for backend, want in ((ReferenceBackend(), tree), (ReferenceBackend(chain=True), chain)):
            out, out1 = np.empty_like(want), np.empty_like(want)
            backend.launch("w4a16_gemm", x, w, out)
            assert np.array_equal(bits(out), bits(want))
            backend.launch("w4a16_gemm_dual", x, w, out, w, out1)
            assert np.array_equal(bits(out1), bits(want))


def test_chain_differs_from_tree_where_it_should() -> None:
    """The chain is a different sum: on long rows with cancellation some roots differ from the
    tree's (so the GPU tests of the chain kernels cannot pass on the tree's bits)."""
    w = make_weight("nvfp4", 64, 16 * 256, seed=5)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, 16 * 256)) * 4).astype(F32).astype(BF16)
    codes = quantize_a16(x)
    from metrale.reference.projection import finish_roots, project_roots

    spans, roots = project_roots(codes, w)
    tree = finish_roots(dict(zip(spans, roots, strict=True)), 256, w, codes)
    with np.errstate(all="ignore"):
        chain = chain_projection(codes, w)
    assert (bits(chain) != bits(tree)).sum() > 0


@pytest.mark.parametrize("mode", ["A16", "A4"])
@pytest.mark.parametrize("k", [16 * 40, 16 * 132])
def test_chain_with_8_block_parts_matches_oracle(monkeypatch: pytest.MonkeyPatch, mode: str, k: int) -> None:
    """The reference at another part size (chain.PART_BLOCKS = 8: the decode probe's,
    docs/chain-revision.md "The part size") against the oracle at the same size, NVFP4 × A16 /
    A4, K of 5 parts (padded to 8) and 17 (to 32); then, on a 64 x 4096 projection of rows whose
    blocks span 2^23, that its bits are not the 64-block chain's (so the probe kernels' GPU tests,
    on such rows, cannot pass on that chain)."""
    from metrale.reference import chain

    w = make_weight("nvfp4", 5, k, seed=k + 7)
    x = seeded_rows(k, 3, k)
    codes = quantize_a4(x, w.input_scale) if mode == "A4" else quantize_a16(x)
    big = make_weight("nvfp4", 64, 4096, seed=3)
    rng = np.random.default_rng(5)  # blocks 2^-12 .. 2^11 apart: chains round at different steps
    scale = np.repeat(np.exp2(rng.integers(-12, 12, (8, 256))), 16, axis=1)
    xb = (rng.standard_normal((8, 4096)) * scale).astype(F32).astype(BF16)
    cb = quantize_a4(xb, big.input_scale) if mode == "A4" else quantize_a16(xb)
    with np.errstate(all="ignore"):
        at64 = chain_projection(cb, big)
        monkeypatch.setattr(chain, "PART_BLOCKS", 8)
        monkeypatch.setattr(oracle, "PART", 8)
        want = oracle.root(x, w, mode, summed=oracle.chain_root)
        same(chain_projection(codes, w), want, f"nvfp4x{mode} 8-block chain root, K = {k}")
        assert (bits(chain_projection(cb, big)) != bits(at64)).any(), "the part size changed no root"


def test_w8a8_unchanged() -> None:
    w = make_weight("w8a8", 6, 16 * 70, seed=1)
    x = seeded_rows(2, 4, 16 * 70)
    with np.errstate(all="ignore"):
        assert np.array_equal(bits(project_chain(x, w, "A8")), bits(project(x, w, "A8")))


def test_refused_pairs() -> None:
    x = seeded_rows(3, 2, 64)
    q2 = make_weight("q2_0", 4, 64, seed=2)
    with pytest.raises(MetraleError, match="no projection for format q2_0 with A4Codes"):
        project_chain(None, q2, codes=quantize_a4(x, 1.0))
    w8 = make_weight("w8a8", 4, 64, seed=2)
    with pytest.raises(MetraleError, match="no projection for format w8a8 with A16Codes"):
        project_chain(None, w8, codes=quantize_a16(x))


# ---- FP8's 11-bit weight codes (FP8_FRAC): rounding at 2^(F−10), F the block's max exponent ----

E4M3_MAXIMA = {
    "max_448": 448.0,
    "one": 1.0,
    "min_normal": 2.0**-6,
    "max_subnormal": 7 * 2.0**-9,
    "min_subnormal": 2.0**-9,
}


def _rne_code(v: float, f: int) -> int:
    """rne(v · 2^(10−f)) from exact rationals (ties to the even integer)."""
    q = Fraction(v) * Fraction(2) ** (10 - f)
    fl = q.numerator // q.denominator
    rest = q - fl
    return fl + (1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and fl % 2) else 0)


@pytest.mark.parametrize("name", sorted(E4M3_MAXIMA))
def test_fp8_codes_every_e4m3_code(name: str) -> None:
    """Every finite e4m3 code no larger than the block maximum, beside it in one block: the code
    is rne(w · 2^(10−F)) with F the maximum's exponent (a zero field counting as 1), |c| < 2^11,
    and the value it stands for, c · 2^(F−10), is an e4m3 (fp8_effective)."""
    top = E4M3_MAXIMA[name]
    allc = np.arange(256, dtype=np.uint8).view(E4M3)
    allc = allc[np.isfinite(allc.astype(np.float64)) & (np.abs(allc.astype(np.float64)) <= top)]
    w = np.zeros((allc.size, 16), dtype=E4M3)
    w[:, 0] = E4M3.type(top)
    w[:, 5] = allc
    f = max(int(np.floor(np.log2(top))), -6)
    wb = weight_codes(w, FP8_FRAC)
    assert (wb.exp == f).all(), name
    want = np.array([_rne_code(float(v), f) for v in allc.astype(np.float64)], dtype=np.float64)
    assert np.array_equal(wb.codes[:, 0, 5], want), name
    assert (np.abs(wb.codes) < 2**11).all()
    eff = fp8_effective(w).astype(np.float64)
    assert np.array_equal(eff[:, 5], np.ldexp(want, f - 10)), name
    small = np.abs(allc.astype(np.float64)) >= 2.0 ** (f - 7)  # within 2^7 of the maximum: exact
    assert np.array_equal(eff[small, 5], allc.astype(np.float64)[small]), name


# name: (block maximum, element, the element's effective value): F = 8, grid 2^-2
FP8_ROUNDING_CASES = {
    "tie_down_to_zero": (448.0, 0.125, 0.0),
    "tie_up_to_even": (448.0, 0.375, 0.5),
    "tie_down_to_even": (448.0, 0.625, 0.5),
    "min_subnormal_to_zero": (448.0, 2.0**-9, 0.0),
    "neg_tie_to_even": (448.0, -0.375, -0.5),
    "neg_zero": (448.0, -0.0, -0.0),
    "exact_at_grid": (448.0, 1.75, 1.75),
    "within_2_7": (256.0, 2.0, 2.0),
}


@pytest.mark.parametrize("name", sorted(FP8_ROUNDING_CASES))
def test_fp8_rounding_named(name: str) -> None:
    top, v, want = FP8_ROUNDING_CASES[name]
    w = np.zeros((1, 16), dtype=E4M3)
    w[0, 3], w[0, 9] = top, v
    eff = fp8_effective(w)
    assert bits16(eff[0, 9]) == bits16(np.array(want, dtype=E4M3)), name
    assert eff[0, 3] == top


def bits16(x: np.ndarray) -> int:
    return int(np.asarray(x).view(np.uint8))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 255).filter(lambda b: b & 0x7F != 0x7F), min_size=16, max_size=16))
def test_fp8_effective_is_a_fixed_point(codes: list[int]) -> None:
    """fp8_effective's values are e4m3 and their own codes: rounding twice changes nothing, and
    a block spanning at most 2^7 is kept as it is."""
    w = np.array(codes, dtype=np.uint8).view(E4M3).reshape(1, 16)
    eff = fp8_effective(w)
    assert np.array_equal(weight_codes(eff, FP8_FRAC).codes, weight_codes(w, FP8_FRAC).codes)
    assert np.array_equal(fp8_effective(eff).view(np.uint8), eff.view(np.uint8))
    a = np.abs(w.astype(np.float64))
    nz = a[a > 0]
    if nz.size == 0 or nz.max() < 2.0**-6 or nz.max() / nz.min() < 2.0**7:
        assert np.array_equal(eff.astype(np.float64), w.astype(np.float64))


def test_fp8_chain_uses_the_rounded_weights() -> None:
    """One block (no sum to differ): the chain's FP8 output is the product with the rounded
    weights, the tree's with the exact ones, and they differ by the rounding alone."""
    w = np.zeros((2, 16), dtype=E4M3)
    w[:, 0] = 448.0
    w[1, 1:] = 0.375  # rounds to 0.5 fifteen times
    wt = Fp8Weight(weight=w, weight_scale=np.ones(2, F32), name="w")
    x = np.ones((1, 16), dtype=BF16)
    with np.errstate(all="ignore"):
        got = chain_projection(quantize_a16(x), wt)
    from metrale.reference.projection import project_root

    tree = project_root(quantize_a16(x), wt)
    assert float(got[0, 1]) == 448.0 + 15 * 0.5
    assert float(tree[0, 1]) == 448.0 + 15 * 0.375
    assert float(got[0, 0]) == float(tree[0, 0])  # a block without small elements: unchanged


TP_CASES = [(nb, size) for nb in (64, 200, 768, 896) for size in (1, 2, 3, 4, 8) if size <= part_count(nb)]


@pytest.mark.parametrize(("fmt", "mode"), [p for p in PAIRS if p[1] != "A8"])
@pytest.mark.parametrize(("nb", "size"), TP_CASES, ids=[f"B{nb}-T{t}" for nb, t in TP_CASES])
def test_k_split_by_parts_gives_the_single_device_bits(fmt: str, mode: str, nb: int, size: int) -> None:
    """The revision's tensor-parallel K split: each rank's part range (``part_ranges``) of a
    ``k_slice`` shard against its columns' codes, the ranks' roots over parts gathered and
    finished, equals ``project_chain`` bit for bit: one part to 14, a partial last part (B = 200),
    1 to 8 ranks, every format."""
    from metrale.distributed.shard import k_slice

    w = make_weight(fmt, 6, 16 * nb, seed=nb + size)
    x = seeded_rows(nb * size, 2, 16 * nb)
    codes = quantize_a4(x, w.input_scale) if mode == "A4" else quantize_a16(x)
    nodes: dict[tuple[int, int], np.ndarray] = {}
    ranges = part_ranges(nb, size)
    assert ranges[0][0] == 0 and ranges[-1][1] == nb
    assert all(r0[1] == r1[0] for r0, r1 in pairwise(ranges))
    for b0, b1 in ranges:
        shard = k_slice(w, b0, b1)
        k0, k1 = 16 * shard.first_block, 16 * shard.first_block + shard.weight.k
        xs = x[:, k0:k1]
        a = quantize_a4(xs, w.input_scale) if mode == "A4" else quantize_a16(xs)
        with np.errstate(all="ignore"):
            spans, roots = chain_range_roots(a, shard.weight, (b0, b1), shard.first_block)
        nodes.update(zip(spans, roots, strict=True))
    with np.errstate(all="ignore"):
        got = to_bf16(finish_roots(nodes, part_count(nb), w, codes))
        want = project_chain(x, w, mode)
    assert np.array_equal(bits(got), bits(want)), f"{fmt}x{mode} B={nb} T={size}"


def test_part_ranges_refuse_more_ranks_than_parts() -> None:
    with pytest.raises(MetraleError, match=r"tp_size=5 needs 1 <= tp_size <= 4 \(K = 4096 has 4 chain parts"):
        part_ranges(256, 5)
    with pytest.raises(MetraleError, match="cut a chain part"):
        w = make_weight("nvfp4", 2, 16 * 128, seed=1)
        chain_range_roots(quantize_a16(seeded_rows(1, 1, 16 * 128)), w, (32, 128))
