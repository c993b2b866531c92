"""One projection y[m, N] = x[m, K] · Wᵀ for every (format, mode) pair (CONTRACT §5).

Exact block dots (a float32 or float64 matmul whose every partial sum is an exactly
representable integer, so BLAS's order cannot matter), the fixed fp32 block-value sequence,
the tree, the row scale and bf16 output. One row or many rows is the same function; the work
is chunked over N so memory stays bounded.
"""

from __future__ import annotations

import numpy as np

from metrale.errors import MetraleError
from metrale.reference.activations import (
    A4Codes,
    A8Codes,
    A16Codes,
    Mode,
    check_rows,
    quantize_a4,
    quantize_a8,
    quantize_a16,
    weight_codes24,
)
from metrale.reference.elements import BF16, E2M1_CODE2, to_bf16
from metrale.reference.formats import (
    DenseWeight,
    Fp8Weight,
    Nvfp4Weight,
    Q2_0Weight,
    QuantWeight,
    W8a8Weight,
)
from metrale.reference.formats.nvfp4 import unpack_nibbles
from metrale.reference.tree import tree_sum

F32 = np.float32
BLOCK = 16
#: Elements of the [B, m, Nc] block-value array per chunk (bounds memory at ~64 MiB).
_CHUNK_ELEMS = 1 << 24


def _pow2_f32(e: np.ndarray) -> np.ndarray:
    """2^e as f32, for integer e ∈ [−149, 127] (exact, subnormal included)."""
    return np.ldexp(F32(1.0), e.astype(np.int32)).astype(F32)


def _chunks(n: int, m: int, nblocks: int) -> list[tuple[int, int]]:
    step = max(1, _CHUNK_ELEMS // max(1, m * nblocks))
    return [(s, min(n, s + step)) for s in range(0, n, step)]


def _finish(v: np.ndarray, finite: np.ndarray | None) -> np.ndarray:
    """Non-finite activation blocks → NaN block value, then the tree over axis 0 (blocks)."""
    if finite is not None:
        v = np.where(finite.T[:, :, None], v, F32(np.nan))
    return tree_sum(v, axis=0)


def _nvfp4_a16(a: A16Codes, w: Nvfp4Weight) -> np.ndarray:
    m, nb = a.exp.shape
    ac = a.codes.astype(F32).transpose(1, 0, 2)  # [B, m, 16]
    p2 = _pow2_f32(a.exp.T - 15)[:, :, None]  # [B, m, 1]
    out = np.empty((m, w.n), dtype=BF16)
    for n0, n1 in _chunks(w.n, m, nb):
        wc = E2M1_CODE2[unpack_nibbles(w.weight[n0:n1])].astype(F32)
        wc = wc.reshape(n1 - n0, nb, BLOCK).transpose(1, 2, 0)  # [B, 16, Nc]
        s = np.matmul(ac, wc)  # exact: |partial sums| < 2^23
        ws = w.weight_scale[n0:n1].astype(F32).T[:, None, :]  # [B, 1, Nc]
        v = (s * ws) * p2
        out[:, n0:n1] = to_bf16(_finish(v, a.finite) * F32(w.weight_scale_2))
    return out


def _nvfp4_a4(a: A4Codes, w: Nvfp4Weight) -> np.ndarray:
    if w.input_scale is None:
        raise MetraleError(f"{w.name}: A4 needs an input_scale (the weight declares no FP4 activations)")
    m, k = a.codes.shape
    nb = k // BLOCK
    ac = a.codes.astype(F32).reshape(m, nb, BLOCK).transpose(1, 0, 2)
    asc = a.scales.astype(F32).T[:, :, None]  # [B, m, 1]
    row = F32(F32(w.input_scale) * F32(w.weight_scale_2))
    out = np.empty((m, w.n), dtype=BF16)
    for n0, n1 in _chunks(w.n, m, nb):
        wc = E2M1_CODE2[unpack_nibbles(w.weight[n0:n1])].astype(F32)
        wc = wc.reshape(n1 - n0, nb, BLOCK).transpose(1, 2, 0)
        s = np.matmul(ac, wc)  # exact: |S| <= 2304
        ws = w.weight_scale[n0:n1].astype(F32).T[:, None, :]
        v = ((s * ws) * asc) * F32(0.25)
        out[:, n0:n1] = to_bf16(_finish(v, a.finite) * row)
    return out


def _q2_a16(a: A16Codes, w: Q2_0Weight) -> np.ndarray:
    m, nb = a.exp.shape
    ac = a.codes.astype(F32).transpose(1, 0, 2)
    p2 = _pow2_f32(a.exp.T - 14)[:, :, None]
    out = np.empty((m, w.n), dtype=BF16)
    for n0, n1 in _chunks(w.n, m, nb):
        sub = Q2_0Weight(blocks=w.blocks[n0:n1], name=w.name)
        wc = sub.codes().astype(F32).reshape(n1 - n0, nb, BLOCK).transpose(1, 2, 0)
        s = np.matmul(ac, wc)  # exact: |S| < 2^20
        d = np.repeat(sub.d().astype(F32), 4, axis=1).T[:, None, :]  # [B, 1, Nc]
        v = (s * d) * p2
        out[:, n0:n1] = to_bf16(_finish(v, a.finite))
    return out


def project_root(a: A16Codes, w: Fp8Weight | DenseWeight) -> np.ndarray:
    """FP8/BF16 × A16 up to the row scale: f32 [m, N] = root · scale[n] (BF16: root)."""
    m, nb = a.exp.shape
    ac = a.codes.transpose(1, 0, 2)  # float64 [B, m, 16]
    out = np.empty((m, w.n), dtype=F32)
    for n0, n1 in _chunks(w.n, m, nb):
        wb = weight_codes24(w.weight[n0:n1])
        wc = wb.codes.transpose(1, 2, 0)  # [B, 16, Nc]
        s = np.matmul(ac, wc)  # exact in float64: |partial sums| < 2^42
        e = a.exp.T[:, :, None] + wb.exp.T[:, None, :] - 36  # [B, m, Nc]
        v = np.ldexp(s, e).astype(F32)  # one rounding from the exact value
        root = _finish(v, a.finite)
        if isinstance(w, Fp8Weight):
            root = root * w.weight_scale[n0:n1][None, :]
        out[:, n0:n1] = root
    return out


def _w8a8(a: A8Codes, w: W8a8Weight) -> np.ndarray:
    s = a.q.astype(np.float64) @ w.weight.astype(np.float64).T  # exact int32-range integers
    y = (s.astype(F32) * a.scale[:, None]) * w.weight_scale[None, :]
    return to_bf16(y)


def project(
    x: np.ndarray | None,
    weight: QuantWeight,
    mode: Mode = "A16",
    *,
    codes: A16Codes | A4Codes | A8Codes | None = None,
) -> np.ndarray:
    """y = bf16 [m, N] for bf16 rows x [m, K] under ``mode``.

    Pairs: NVFP4×{A16, A4}, Q2_0×A16, FP8×A16, BF16×A16, W8A8×A8. ``codes`` may carry the
    activation codes already computed (gate and up share one quantization of x).
    """
    if codes is None:
        if x is None:
            raise MetraleError("project: give x or codes")
        check_rows(x, weight.k)
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
    if isinstance(weight, Nvfp4Weight) and isinstance(codes, A16Codes):
        return _nvfp4_a16(codes, weight)
    if isinstance(weight, Nvfp4Weight) and isinstance(codes, A4Codes):
        return _nvfp4_a4(codes, weight)
    if isinstance(weight, Q2_0Weight) and isinstance(codes, A16Codes):
        return _q2_a16(codes, weight)
    if isinstance(weight, (Fp8Weight, DenseWeight)) and isinstance(codes, A16Codes):
        return to_bf16(project_root(codes, weight))
    if isinstance(weight, W8a8Weight) and isinstance(codes, A8Codes):
        return _w8a8(codes, weight)
    raise MetraleError(f"{weight.name}: no projection for format {weight.format} with {type(codes).__name__}")
