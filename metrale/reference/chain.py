"""The block-value chain: the revision of arithmetic.md § projection and § tree the kernels are
moving to (docs/chain-revision.md), defined here beside the contract until every kernel has moved.

Per output, the B blocks of K fall into aligned parts of ``PART_BLOCKS`` = 64 blocks (1024
elements; the last part holds what is left). Inside a part the block terms are chained in K
order from −0.0: ``c ← fma(P_b, f_b, c)``, one IEEE rounding per block (NVFP4, Q2_0), or
``c ← c + v_b`` (FP8, BF16: v_b the contract's block value, FP8's from 11-bit weight codes,
``FP8_FRAC``). The part roots are summed by § tree's padded tree over parts; the row scale and
``to_bf16`` follow unchanged.

| pair | P_b (f32) | f_b (f32) |
| --- | --- | --- |
| NVFP4 × A16 | ``f32(S_b) · 2^(E_b−15)`` | ``f32(wscale_b)`` |
| NVFP4 × A4 | ``(f32(S_b) · f32(ascale_b)) · 0.25`` (exact) | ``f32(wscale_b)`` |
| Q2_0 × A16 | ``f32(S_b) · 2^(E_b−14)`` | ``f32(d_⌊b/4⌋)`` |

| add pair | v_b (f32) |
| --- | --- |
| FP8 × A16 | ``f32(S_b · 2^(E_b+F_b−24))``, S_b over the codes ``rne(w · 2^(10−F_b))``: one rounding |
| BF16 × A16 | ``f32(S_b · 2^(E_b+F_b−36))`` over § codes24, one rounding (unchanged) |

A non-finite activation block has P_b = NaN (FP8/BF16: v_b = NaN), as in § non-finite.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from metrale.errors import MetraleError
from metrale.reference.activations import A4Codes, A8Codes, A16Codes, Mode, weight_codes
from metrale.reference.elements import E4M3, to_bf16
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, QuantWeight, W8a8Weight
from metrale.reference.projection import (
    activation_codes,
    block_dots,
    finish_roots,
    w8a8_dot,
    w8a8_output,
    wide_values,
)
from metrale.reference.tree import Span, subtree_roots, subtree_spans

F32, F64 = np.float32, np.float64
#: Blocks per part: one chain covers at most 64 blocks (1024 elements) of K.
PART_BLOCKS = 64
#: Fraction bits of FP8's weight block codes: |c| <= 1920 < 2^11, so a block dot against one
#: 8-bit limb of the A16 codes stays below 2^23 and an f16 tensor core's f32 sum is exact.
FP8_FRAC = 10

_LOW28 = np.uint64((1 << 28) - 1)
_LOW29 = np.uint64((1 << 29) - 1)
_HALF29 = np.uint64(1 << 28)


def part_count(nblocks: int) -> int:
    """Parts of a row of ``nblocks`` blocks: ⌈nblocks / 64⌉."""
    return -(-nblocks // PART_BLOCKS)


def _off_midpoints(s: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """f32 RNE(a + b) from s = RNE64(a + b), float64 arrays of one shape. s rounds to f32 wrongly
    only where it landed on an f32 midpoint (every f32 midpoint is a float64): there TwoSum's
    error e says on which side a + b lies, and s steps one float64 ulp toward it."""
    r = s.astype(F32)
    tiny = np.abs(s) < 2.0**-126  # f32 subnormal range: midpoints are odd multiples of 2^-150
    mid = np.where(tiny, False, (s.view(np.uint64) & _LOW29) == _HALF29)
    if tiny.any():
        t = s[tiny] * 2.0**150
        mid[tiny] = (t == np.floor(t)) & (np.fmod(t, 2.0) != 0)
    if mid.any():
        bp = s - a
        e = (a - (s - bp)) + (b - bp)
        bad = mid & (e != 0)
        r[bad] = np.nextafter(s[bad], np.copysign(np.inf, e[bad])).astype(F32)
    return r


def _round_sum(prod: np.ndarray, c64: np.ndarray) -> np.ndarray:
    """f32 RNE(prod + c64) for float64 arrays (prod an exact product, c64 an f32 value)."""
    s = prod + c64
    r = s.astype(F32)
    cand = (s.view(np.uint64) & _LOW28) == 0  # a superset of the f32 midpoints
    if cand.any():
        idx = np.nonzero(cand)
        r[idx] = _off_midpoints(s[idx], prod[idx], c64[idx])
    return r


def fma_f32(p: np.ndarray, f: np.ndarray, c: np.ndarray) -> np.ndarray:
    """IEEE fma on f32 arrays (broadcast): RNE_f32(p·f + c), one rounding. p·f is exact in
    float64 (24 + 24 bits); the float64 sum rounds to f32 correctly off f32 midpoints, and on
    one TwoSum decides. Signed zeros, ±Inf, NaN and overflow as IEEE's fma gives them."""
    with np.errstate(over="ignore", invalid="ignore"):
        prod = np.asarray(p, F32).astype(F64) * np.asarray(f, F32).astype(F64)
        c64 = np.broadcast_to(np.asarray(c, F32).astype(F64), prod.shape)
        prod = np.broadcast_to(prod, c64.shape)
        return _round_sum(np.ascontiguousarray(prod), np.ascontiguousarray(c64))


def _by_parts(t: np.ndarray, fill: float) -> np.ndarray:
    """[B, ...] -> [64, parts, ...] (position in part first), the last part padded with
    ``fill`` (a term that leaves every chain as it is)."""
    b = t.shape[0]
    parts = part_count(b)
    pad = parts * PART_BLOCKS - b
    if pad:
        t = np.concatenate([t, np.full((pad, *t.shape[1:]), fill, dtype=t.dtype)])
    return np.ascontiguousarray(t.reshape(parts, PART_BLOCKS, *t.shape[1:]).swapaxes(0, 1))


def chain_parts(p: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Part roots of fma chains: f32 P [B, ...] and f [B, ...] (broadcastable to P) -> f32
    [parts, ...], part q the chain ``c ← fma(P_b, f_b, c)`` from −0.0 over its blocks in K order."""
    with np.errstate(over="ignore", invalid="ignore"):
        prod = np.asarray(p, F32).astype(F64) * np.asarray(f, F32).astype(F64)
    prod = _by_parts(np.broadcast_to(prod, np.shape(p)), -0.0)  # fma(P, f, c) = c for P·f = −0.0
    c = np.full(prod.shape[1:], -0.0, dtype=F32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(PART_BLOCKS):
            c = _round_sum(prod[j], c.astype(F64))
    return c


def add_parts(v: np.ndarray) -> np.ndarray:
    """Part roots of add chains: f32 v [B, ...] -> f32 [parts, ...], ``c ← c + v_b`` from −0.0."""
    v = _by_parts(np.asarray(v, F32), -0.0)
    c = np.full(v.shape[1:], -0.0, dtype=F32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(PART_BLOCKS):
            c = c + v[j]
    return c


def fp8_effective(w: np.ndarray) -> np.ndarray:
    """e4m3 [N, K]: the FP8 weight values the chain's codes stand for, c · 2^(F−10) per block
    (``FP8_FRAC``); every one is an e4m3 value (at most 4 significant bits, no larger than its
    block's maximum), so an uploader can store them as e4m3 bytes."""
    wb = weight_codes(w, FP8_FRAC)
    v = np.ldexp(wb.codes, (wb.exp - FP8_FRAC)[..., None]).reshape(w.shape)
    return v.astype(E4M3)


Terms = Callable[[int, int], tuple[np.ndarray, np.ndarray | None]]


def _masked(t: np.ndarray, a: A16Codes | A4Codes) -> np.ndarray:
    """Non-finite activation blocks → NaN. ``t`` [B, Nc, m]."""
    if not a.finite.all():
        t = np.where(a.finite.T[:, None, :], t, F32(np.nan))
    return t


def _terms(a: A16Codes | A4Codes, w: QuantWeight) -> Terms:
    """(n0, n1) -> (P [B, Nc, m], f [B, Nc, 1]) of the fma pairs, or (v [B, Nc, m], None) of the
    add pairs (FP8, BF16), for weight rows n0:n1."""
    if isinstance(w, (Fp8Weight, DenseWeight)) and isinstance(a, A16Codes):
        values = wide_values(a, w, FP8_FRAC if isinstance(w, Fp8Weight) else 22)
        return lambda n0, n1: (_masked(values(n0, n1), a), None)
    if not isinstance(w, Nvfp4Weight) and not (isinstance(w, Q2_0Weight) and isinstance(a, A16Codes)):
        raise MetraleError(f"{w.name}: no projection for format {w.format} with {type(a).__name__}")
    dots = block_dots(a, w)  # (n0, n1) -> (f32(S) [B, Nc, m], weight factor f [B, Nc, 1])
    if isinstance(a, A4Codes):
        if not isinstance(w, Nvfp4Weight) or w.input_scale is None:
            raise MetraleError(f"{w.name}: A4 needs an input_scale (the weight declares no FP4 activations)")
        asc = a.scales.astype(F32).T[:, None, :]  # [B, 1, m]

        def a4(n0: int, n1: int) -> tuple[np.ndarray, np.ndarray]:
            s, f = dots(n0, n1)
            return _masked((s * asc) * F32(0.25), a), f  # exact: |S| <= 2304, 4-bit ascale

        return a4
    shift = 14 if isinstance(w, Q2_0Weight) else 15
    p2 = np.ldexp(F32(1.0), a.exp.T.astype(np.int32) - shift).astype(F32)[:, None, :]  # [B, 1, m]

    def a16(n0: int, n1: int) -> tuple[np.ndarray, np.ndarray]:
        s, f = dots(n0, n1)
        return _masked(s * p2, a), f  # exact but where the product is subnormal (ldexpf there)

    return a16


def chain_roots(a: A16Codes | A4Codes, w: QuantWeight, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Part roots f32 [parts, m, N] of blocks [lo, hi) (default all) of ``w`` [N, K] against codes
    ``a`` [m, K/16 blocks], parts counted from ``lo``."""
    m, nb = a.finite.shape
    hi = nb if hi is None else hi
    terms = _terms(a, w)
    out = np.empty((part_count(hi - lo), m, w.n), dtype=F32)
    step = max(1, (1 << 19) // (max(16, m) * nb))
    for n0 in range(0, w.n, step):
        n1 = min(w.n, n0 + step)
        p, f = terms(n0, n1)
        p = p[lo:hi]
        roots = add_parts(p) if f is None else chain_parts(p, f[lo:hi])  # [parts, Nc, m]
        out[:, :, n0:n1] = roots.transpose(0, 2, 1)
    return out


def part_ranges(nblocks: int, size: int) -> list[tuple[int, int]]:
    """[b0, b1) per tensor-parallel rank under the revision (docs/chain-revision.md,
    Invariance): rank r owns parts [⌊rQ/T⌋, ⌊(r+1)Q/T⌋) of the Q parts of ``nblocks`` blocks, as
    blocks (part-aligned; the last range ends at ``nblocks``)."""
    q = part_count(nblocks)
    if size < 1 or q < size:
        raise MetraleError(
            f"tensor parallel: tp_size={size} needs 1 <= tp_size <= {q} (K = {16 * nblocks} has {q} "
            f"chain parts of {16 * PART_BLOCKS} elements)"
        )
    return [
        (min(nblocks, PART_BLOCKS * (r * q // size)), min(nblocks, PART_BLOCKS * ((r + 1) * q // size)))
        for r in range(size)
    ]


def chain_range_roots(
    a: A16Codes | A4Codes, w: QuantWeight, blocks: tuple[int, int] | None = None, first_block: int = 0
) -> tuple[list[Span], np.ndarray]:
    """A rank's share of the tree over parts (``projection.project_roots`` under the revision):
    ``a`` [m, B_w] and ``w`` [N, 16·B_w] cover blocks ``first_block`` … of the full K, the rank
    owns ``blocks`` = [b0, b1) (part-aligned: ``part_ranges``; default all of them). Returns the
    aligned spans over parts covering its parts and their roots f32 [S, m, N]."""
    nb = a.finite.shape[1]
    b0, b1 = (first_block, first_block + nb) if blocks is None else blocks
    if not first_block <= b0 < b1 <= first_block + nb:
        raise MetraleError(f"{w.name}: blocks [{b0}, {b1}) outside [{first_block}, {first_block + nb})")
    if b0 % PART_BLOCKS or (b1 % PART_BLOCKS and b1 != first_block + nb):
        raise MetraleError(f"{w.name}: blocks [{b0}, {b1}) cut a chain part of {PART_BLOCKS} blocks")
    roots = chain_roots(a, w, b0 - first_block, b1 - first_block)
    p0 = b0 // PART_BLOCKS
    spans = subtree_spans(p0, p0 + roots.shape[0])
    return spans, subtree_roots(roots, spans, p0)


def chain_projection(a: A16Codes | A4Codes, w: QuantWeight) -> np.ndarray:
    """f32 [m, N] before ``to_bf16``: the whole K as one rank's range (part roots, the padded tree
    over parts), finished and row-scaled."""
    spans, roots = chain_range_roots(a, w)
    return finish_roots(dict(zip(spans, roots, strict=True)), part_count(w.k // 16), w, a)


def project_chain(
    x: np.ndarray | None,
    weight: QuantWeight,
    mode: Mode | None = None,
    *,
    codes: A16Codes | A4Codes | A8Codes | None = None,
) -> np.ndarray:
    """``projection.project`` under the revision: bf16 [m, N] for bf16 rows x [m, K] (or
    ``codes``); W8A8 has no blocks and is unchanged."""
    codes = activation_codes(x, weight, mode, codes)
    if isinstance(weight, W8a8Weight) and isinstance(codes, A8Codes):
        return w8a8_output(w8a8_dot(codes, weight), codes.scale, weight)
    if isinstance(codes, A8Codes):
        raise MetraleError(f"{weight.name}: no projection for format {weight.format} with A8Codes")
    with np.errstate(over="ignore", invalid="ignore"):
        return to_bf16(chain_projection(codes, weight))
