"""One projection y[m, N] = x[m, K] · Wᵀ for every (format, mode) pair (arithmetic.md § projection).

Exact block dots (a float32 or float64 matmul whose every partial sum is an exactly
representable integer, so BLAS's order cannot matter), the fixed fp32 block-value sequence,
the tree, the row scale and bf16 output. One row or many rows is the same function; the work
is chunked over N so memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from metrale.errors import MetraleError, a_kind
from metrale.reference.activations import (
    A4Codes,
    A8Codes,
    A16Codes,
    Mode,
    check_rows,
    quantize_a4,
    quantize_a8,
    quantize_a16,
    weight_codes,
)
from metrale.reference.elements import E2M1_CODE2, E4M3, to_bf16
from metrale.reference.formats import (
    DenseWeight,
    Fp8Weight,
    Nvfp4Weight,
    Q2_0Weight,
    QuantWeight,
    W8a8Weight,
)
from metrale.reference.tiers import W4A4_MAX_ROWS, weight_quantization
from metrale.reference.tree import Span, finish_tree, subtree_roots, subtree_spans

F32 = np.float32
BLOCK = 16
#: Elements of the [B, Nc, max(m, 16)] block-value array per chunk (4 MiB of f32: the chunk's
#: passes stay in cache, which measured 2-4x faster than 64 MiB chunks on 2 cores).
_CHUNK_ELEMS = 1 << 20


def _byte_lut(codes_per_byte: np.ndarray) -> np.ndarray:
    """A 256-entry table mapping a packed byte to its codes as f32, stored as one wide word per
    byte (uint64 for 2 codes, 16 bytes for 4) so a single gather unpacks a whole row."""
    t = np.ascontiguousarray(codes_per_byte.astype(F32))
    return t.view(np.uint64)[:, 0] if t.shape[1] == 2 else t.view(np.dtype((np.void, 16)))[:, 0]


_B = np.arange(256)
#: NVFP4 byte -> (2·e2m1 of the low nibble, of the high nibble) as f32.
_NVFP4_LUT = _byte_lut(np.stack([E2M1_CODE2[_B & 15], E2M1_CODE2[_B >> 4]], axis=1))
#: Q2_0 qs byte -> (q − 1) of its 4 elements in K order (shifts 0, 2, 4, 6) as f32.
_Q2_LUT = _byte_lut(np.stack([((_B >> (2 * i)) & 3) - 1 for i in range(4)], axis=1))
#: e4m3 byte -> f32 (the exact value of every code).
_E4M3_F32 = np.arange(256, dtype=np.uint8).view(E4M3).astype(F32)


def _pow2_f32(e: np.ndarray) -> np.ndarray:
    """2^e as f32, for integer e ∈ [−149, 127] (exact, subnormal included)."""
    return np.ldexp(F32(1.0), e.astype(np.int32)).astype(F32)


def _chunks(n: int, m: int, nblocks: int) -> list[tuple[int, int]]:
    step = max(1, _CHUNK_ELEMS // (max(16, m) * nblocks))
    return [(s, min(n, s + step)) for s in range(0, n, step)]


def _masked(v: np.ndarray, finite: np.ndarray | None) -> np.ndarray:
    """Non-finite activation blocks → NaN block value. ``v`` [B, Nc, m]; ``finite`` [m, B]."""
    if finite is not None and not finite.all():
        v = np.where(finite.T[:, None, :], v, F32(np.nan))
    return v


def _nvfp4_codes(w: Nvfp4Weight, n0: int, n1: int, nb: int) -> np.ndarray:
    """Weight codes 2·e2m1 of rows n0:n1 as f32 [B, Nc, 16] (a strided view)."""
    wc = _NVFP4_LUT[w.weight[n0:n1]].view(F32)
    return wc.reshape(n1 - n0, nb, BLOCK).transpose(1, 0, 2)


def _act_f32(codes: np.ndarray) -> np.ndarray:
    """Activation codes [m, B, 16] -> f32 [B, 16, m] (contiguous) for ``wc @ ac``."""
    return np.ascontiguousarray(codes.astype(F32).transpose(1, 2, 0))


BlockValues = Callable[[int, int], np.ndarray]
BlockDots = Callable[[int, int], tuple[np.ndarray, np.ndarray]]


def _e4m3_scales(w: Nvfp4Weight, n0: int, n1: int) -> np.ndarray:
    """f32(wscale) of rows n0:n1 as [B, Nc, 1] (every e4m3 code exact in f32)."""
    return _E4M3_F32[w.weight_scale[n0:n1].view(np.uint8)].T[:, :, None]


def block_dots(a: A16Codes | A4Codes, w: Nvfp4Weight | Q2_0Weight) -> BlockDots:
    """(n0, n1) -> (f32(S_b) [B, Nc, m], the weight's block factor f32 [B, Nc, 1]) for weight
    rows n0:n1: NVFP4 wscale_b (A16 or A4 codes), Q2_0 d of the block's 64-element group. S_b is
    exact (every partial sum an integer below 2^23: NVFP4 × A16; 2304: × A4; 2^20: Q2_0)."""
    if isinstance(a, A4Codes):
        m, k = a.codes.shape
        ac = _act_f32(a.codes.reshape(m, k // BLOCK, BLOCK))
    else:
        ac = _act_f32(a.codes)  # [B, 16, m]
    nb = ac.shape[0]
    if isinstance(w, Nvfp4Weight):
        return lambda n0, n1: (np.matmul(_nvfp4_codes(w, n0, n1, nb), ac), _e4m3_scales(w, n0, n1))

    def q2(n0: int, n1: int) -> tuple[np.ndarray, np.ndarray]:
        blocks = w.blocks[n0:n1]
        wc = _Q2_LUT[np.ascontiguousarray(blocks[..., 2:])].view(F32)  # [Nc, K/64, 64]
        wc = wc.reshape(n1 - n0, nb, BLOCK).transpose(1, 0, 2)
        d = np.ascontiguousarray(blocks[..., :2]).view(np.float16)[..., 0].astype(F32)  # [Nc, K/64]
        return np.matmul(wc, ac), np.repeat(d, 4, axis=1).T[:, :, None]

    return q2


def _nvfp4_a16(a: A16Codes, w: Nvfp4Weight) -> BlockValues:
    dots = block_dots(a, w)
    p2 = _pow2_f32(a.exp.T - 15)[:, None, :]  # [B, 1, m]

    def values(n0: int, n1: int) -> np.ndarray:
        s, ws = dots(n0, n1)
        v = np.multiply(s, ws, out=s)
        return np.multiply(v, p2, out=v)  # v = (f32(S) · wscale) · 2^(E−15)

    return values


def _nvfp4_a4(a: A4Codes, w: Nvfp4Weight) -> BlockValues:
    if w.input_scale is None:
        raise MetraleError(f"{w.name}: A4 needs an input_scale (the weight declares no FP4 activations)")
    dots = block_dots(a, w)
    asc = a.scales.astype(F32).T[:, None, :]  # [B, 1, m]

    def values(n0: int, n1: int) -> np.ndarray:
        s, ws = dots(n0, n1)
        v = np.multiply(s, ws, out=s)
        v = np.multiply(v, asc, out=v)
        return np.multiply(v, F32(0.25), out=v)  # v = ((f32(S) · wscale) · ascale) · 0.25

    return values


def _q2_a16(a: A16Codes, w: Q2_0Weight) -> BlockValues:
    dots = block_dots(a, w)
    p2 = _pow2_f32(a.exp.T - 14)[:, None, :]  # [B, 1, m]

    def values(n0: int, n1: int) -> np.ndarray:
        s, d = dots(n0, n1)
        v = np.multiply(s, d, out=s)
        return np.multiply(v, p2, out=v)  # v = (f32(S) · f32(d)) · 2^(E−14)

    return values


def wide_values(a: A16Codes, w: Fp8Weight | DenseWeight, frac: int = 22) -> BlockValues:
    """(n0, n1) -> FP8/BF16 × A16 block values f32 [B, Nc, m] of weight rows n0:n1: the exact
    float64 S_b · 2^(E_b + F_b − 14 − frac), rounded once (weight codes of ``frac`` fraction
    bits: 22 for § codes24)."""
    ac = np.ascontiguousarray(a.codes.transpose(1, 2, 0))  # float64 [B, 16, m]

    def values(n0: int, n1: int) -> np.ndarray:
        wb = weight_codes(w.weight[n0:n1], frac)
        s = np.matmul(wb.codes.transpose(1, 0, 2), ac)  # [B, Nc, m], exact in float64: < 2^42
        e = wb.exp.T[:, :, None] + a.exp.T[:, None, :] - 14 - frac  # [B, Nc, m]
        return np.ldexp(s, e).astype(F32)  # one rounding from the exact value

    return values


def _block_values(a: A16Codes | A4Codes, w: QuantWeight) -> BlockValues:
    if isinstance(w, Nvfp4Weight) and isinstance(a, A16Codes):
        return _nvfp4_a16(a, w)
    if isinstance(w, Nvfp4Weight) and isinstance(a, A4Codes):
        return _nvfp4_a4(a, w)
    if isinstance(w, Q2_0Weight) and isinstance(a, A16Codes):
        return _q2_a16(a, w)
    if isinstance(w, (Fp8Weight, DenseWeight)) and isinstance(a, A16Codes):
        return wide_values(a, w)
    raise MetraleError(f"{w.name}: no projection for format {w.format} with {type(a).__name__}")


def project_roots(
    a: A16Codes | A4Codes, w: QuantWeight, blocks: tuple[int, int] | None = None, first_block: int = 0
) -> tuple[list[Span], np.ndarray]:
    """Subtree roots of a block range (arithmetic.md § tree): the part of the tree one
    tensor-parallel rank owns.

    ``a`` codes [m, B_w] and ``w`` [N, 16·B_w] cover blocks ``first_block`` … of the full K;
    ``blocks`` = (b0, b1) is the owned range inside them (default: all of them). Returns the
    aligned spans covering [b0, b1) (``subtree_spans``) and their roots f32 [S, m, N]: block
    values (arithmetic.md § projection, NaN for a non-finite activation block) summed by the
    tree inside each span.
    """
    m = a.codes.shape[0]
    nb = w.k // BLOCK
    b0, b1 = (first_block, first_block + nb) if blocks is None else blocks
    if not first_block <= b0 < b1 <= first_block + nb:
        raise MetraleError(f"{w.name}: blocks [{b0}, {b1}) outside [{first_block}, {first_block + nb})")
    spans = subtree_spans(b0, b1)
    values = _block_values(a, w)
    out = np.empty((len(spans), m, w.n), dtype=F32)
    with np.errstate(over="ignore", invalid="ignore"):
        for n0, n1 in _chunks(w.n, m, nb):
            v = _masked(values(n0, n1), a.finite)  # [B_w, Nc, m]
            out[:, :, n0:n1] = subtree_roots(v, spans, first_block).transpose(0, 2, 1)
    return spans, out


def finish_roots(
    nodes: Mapping[Span, np.ndarray], nblocks: int, w: QuantWeight, a: A16Codes | A4Codes
) -> np.ndarray:
    """The full-K tree from subtree roots covering [0, nblocks) (``finish_tree``), then the
    row scale (arithmetic.md § projection): f32 [m, N] before ``to_bf16`` (NVFP4 × A16:
    root · weight_scale_2; × A4: root · f32(input_scale · weight_scale_2); FP8: root · scale[n];
    Q2_0, BF16: root)."""
    with np.errstate(over="ignore", invalid="ignore"):
        root = finish_tree(nodes, nblocks)
        if isinstance(w, Nvfp4Weight) and isinstance(a, A4Codes):
            return root * F32(F32(w.input_scale) * F32(w.weight_scale_2))
        if isinstance(w, Nvfp4Weight):
            return root * F32(w.weight_scale_2)
        if isinstance(w, Fp8Weight):
            return root * w.weight_scale[None, :]
        return root


def _tree_projection(a: A16Codes | A4Codes, w: QuantWeight) -> np.ndarray:
    """f32 [m, N] before ``to_bf16``: the whole K as one rank's range, finished."""
    spans, roots = project_roots(a, w)
    return finish_roots(dict(zip(spans, roots, strict=True)), w.k // BLOCK, w, a)


def project_root(a: A16Codes, w: Fp8Weight | DenseWeight) -> np.ndarray:
    """FP8/BF16 × A16 up to the row scale: f32 [m, N] = root · scale[n] (BF16: root)."""
    return _tree_projection(a, w)


def w8a8_dot(a: A8Codes, w: W8a8Weight) -> np.ndarray:
    """S = Σ_k q_a·q_w over the weight's K: exact integers int64 [m, N] (|S| < 2^31 for K ≤
    131072), so partial sums over K ranges add exactly in any order."""
    return (a.q.astype(np.float64) @ w.weight.astype(np.float64).T).astype(np.int64)


def w8a8_output(s: np.ndarray, a_scale: np.ndarray, w: W8a8Weight) -> np.ndarray:
    """y = to_bf16((f32(S) · s_a) · s_w[n]) for the full-K integer dot ``s`` [m, N]."""
    with np.errstate(over="ignore", invalid="ignore"):
        return to_bf16((s.astype(F32) * a_scale[:, None]) * w.weight_scale[None, :])


def infer_mode(weight: QuantWeight, m: int) -> Mode:
    """The activation mode the layer's rules give an m-row projection of ``weight``: A8 for
    W8A8; A4 for NVFP4 declaring ``input_scale`` when the process-wide weight-quantization
    tier admits m rows (up to W4A4_MAX_ROWS; any m under ``w4a4-all``); A16 otherwise."""
    if isinstance(weight, W8a8Weight):
        return "A8"
    tier = weight_quantization()
    if (
        isinstance(weight, Nvfp4Weight)
        and weight.declares_a4
        and (m <= W4A4_MAX_ROWS or tier.all_rows)
        and tier.admits(m, True)
    ):
        return "A4"
    return "A16"


def activation_codes(
    x: np.ndarray | None,
    weight: QuantWeight,
    mode: Mode | None,
    codes: A16Codes | A4Codes | A8Codes | None,
) -> A16Codes | A4Codes | A8Codes:
    """``codes`` if given, else x's codes under ``mode`` (None: ``infer_mode``), after the
    checks every projection makes (weight kind, x's shape against the weight's K)."""
    if not isinstance(weight, QuantWeight):
        raise MetraleError(
            f"project: weight is {a_kind(weight)}, want one of "
            "Nvfp4Weight, Fp8Weight, W8a8Weight, Q2_0Weight, DenseWeight"
        )
    if codes is None:
        if x is None:
            raise MetraleError("project: give x or codes")
        check_rows(x, weight.k, name="project: x")
        if mode is None:
            mode = infer_mode(weight, x.shape[0])
        if mode == "A16":
            codes = quantize_a16(x)
        elif mode == "A4":
            if not isinstance(weight, Nvfp4Weight) or weight.input_scale is None:
                raise MetraleError(f"{weight.name}: mode A4 needs an NVFP4 weight that declares input_scale")
            codes = quantize_a4(x, weight.input_scale)
        elif mode == "A8":
            codes = quantize_a8(x)
        else:
            raise MetraleError(f"project: unknown mode {mode!r} (want A16, A4 or A8)")
    return codes


def project(
    x: np.ndarray | None,
    weight: QuantWeight,
    mode: Mode | None = None,
    *,
    codes: A16Codes | A4Codes | A8Codes | None = None,
) -> np.ndarray:
    """y = bf16 [m, N] for bf16 rows x [m, K] under ``mode`` (None: ``infer_mode``).

    Pairs: NVFP4×{A16, A4}, Q2_0×A16, FP8×A16, BF16×A16, W8A8×A8. ``codes`` may carry the
    activation codes already computed (gate and up share one quantization of x).
    """
    codes = activation_codes(x, weight, mode, codes)
    if isinstance(weight, W8a8Weight) and isinstance(codes, A8Codes):
        return w8a8_output(w8a8_dot(codes, weight), codes.scale, weight)
    if isinstance(codes, A8Codes):
        raise MetraleError(f"{weight.name}: no projection for format {weight.format} with A8Codes")
    # Overflow to ±Inf and Inf − Inf = NaN are IEEE fp32 behaviour the contract keeps, not errors.
    with np.errstate(over="ignore", invalid="ignore"):
        return to_bf16(_tree_projection(codes, weight))
