"""Activation modes A16, A4 and A8 (arithmetic.md § modes), and the 24-bit weight block codes (§ codes24).

All functions take bf16 rows ``x`` [m, K] (K a multiple of 16) and return integer codes with
their scales; none modifies its input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from metrale.errors import MetraleError
from metrale.reference.elements import (
    BF16,
    E2M1_CODE2,
    E4M3,
    bf16_exponent_field,
    e2m1_rne,
    e4m3_exponent_field,
    e4m3_saturate,
)

BLOCK = 16
F32 = np.float32
Mode = Literal["A16", "A4", "A8"]
MODES: tuple[Mode, ...] = ("A16", "A4", "A8")


def check_rows(x: object, k: int | None = None, name: str = "x") -> np.ndarray:
    """Validate bf16 activation rows [m, K]: dtype, 2-D, K a multiple of 16 (and == k if given)."""
    if not isinstance(x, np.ndarray):
        raise MetraleError(f"{name}: expected a numpy bf16 array, got {type(x).__name__}")
    if x.dtype != BF16:
        raise MetraleError(f"{name}: dtype {x.dtype}, want bfloat16")
    check_row_shape(x.shape, k, name)
    return x


def check_row_shape(shape: tuple[int, ...], k: int | None = None, name: str = "x") -> None:
    """The shape rule of activation rows on every backend: 2-D [m, K], K a positive multiple
    of 16 (and == k if given); MetraleError naming ``name`` otherwise."""
    if len(shape) != 2:
        raise MetraleError(f"{name}: shape {tuple(shape)}, want 2-D [m, K]")
    if shape[1] % BLOCK != 0 or shape[1] == 0:
        raise MetraleError(f"{name}: K={shape[1]} is not a multiple of {BLOCK}")
    if k is not None and shape[1] != k:
        raise MetraleError(f"{name}: K={shape[1]}, the weight wants K={k}")


def block_fixed_point(
    values: np.ndarray, field: np.ndarray, bias: int, frac_bits: int
) -> tuple[np.ndarray, np.ndarray]:
    """Block fixed point over the last axis (blocks of 16).

    E = max(exponent field, counting 0 as 1) − bias per block; c = rne(v · 2^(frac_bits − E)).
    Returns (codes float64 [..., B, 16] holding integers, E int32 [..., B]).
    """
    shp = (*values.shape[:-1], values.shape[-1] // BLOCK, BLOCK)
    f = np.maximum(field.reshape(shp), 1)
    e = (f.max(axis=-1) - bias).astype(np.int32)
    v = values.reshape(shp).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        c = np.rint(np.ldexp(v, (frac_bits - e)[..., None]))
    return c, e


@dataclass(frozen=True)
class A16Codes:
    """A16 activation codes: ``codes`` [m, B, 16] integers |c| < 2^15 (float64), ``exp`` E
    int32 [m, B] (block scale 2^(E−14)), ``finite`` bool [m, B]."""

    codes: np.ndarray
    exp: np.ndarray
    finite: np.ndarray


def quantize_a16(x: np.ndarray) -> A16Codes:
    """A16: E = max biased exponent − 127 (zero field as 1); c = rne(x · 2^(14−E))."""
    x = check_rows(x)
    field = bf16_exponent_field(x)
    with np.errstate(invalid="ignore"):  # a NaN element casts to NaN (its block is non-finite)
        xd = x.astype(np.float64)
    c, e = block_fixed_point(xd, field, 127, 14)
    finite = (field.reshape(c.shape) != 255).all(axis=-1)
    c = np.where(finite[..., None], c, 0.0)
    return A16Codes(codes=c, exp=e, finite=finite)


@dataclass(frozen=True)
class A4Codes:
    """A4 activation codes: ``codes`` int8 [m, K] = 2·e2m1 ∈ [−12, 12], ``scales`` e4m3
    [m, B], ``finite`` bool [m, B]."""

    codes: np.ndarray
    scales: np.ndarray
    finite: np.ndarray


def quantize_a4(x: np.ndarray, input_scale: np.float32) -> A4Codes:
    """A4, vLLM's ``ref_nvfp4_quant`` with g = 1/input_scale, in this fp32 order:

    g = 1/input_scale; s = g·(amax·f32(1/6)); scale = e4m3(min(s, 448));
    inv_g = 1/g; d = f32(scale)·inv_g; os = (d == 0 ? 0 : 1/d);
    code = 2·e2m1_rne(clamp(f32(x)·os, ±6)). A block holding Inf/NaN is non-finite.
    """
    x = check_rows(x)
    m, k = x.shape
    xb = x.astype(F32).reshape(m, k // BLOCK, BLOCK)
    finite = np.isfinite(xb).all(axis=-1)
    xb = np.where(finite[..., None], xb, F32(0))
    g = F32(1.0) / F32(input_scale)
    amax = np.abs(xb).max(axis=-1)
    with np.errstate(over="ignore"):  # overflow to Inf is part of the sequence (then clamped)
        s = g * (amax * F32(1.0 / 6.0))
    scale = e4m3_saturate(np.minimum(s, F32(448.0)))
    inv_g = F32(1.0) / g
    d = scale.astype(F32) * inv_g
    with np.errstate(divide="ignore", over="ignore"):  # a tiny d overflows 1/d to Inf (defined)
        os_ = np.where(d == 0, F32(0), F32(1.0) / np.where(d == 0, F32(1), d)).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        prod = xb * os_[..., None]
    # A tiny d makes os = Inf; then 0 · Inf = NaN, which the sequence defines as code 0.
    scaled = np.clip(np.where(np.isnan(prod), F32(0), prod), F32(-6.0), F32(6.0))
    nib = e2m1_rne(scaled).view(np.uint8) & np.uint8(0x0F)
    codes = E2M1_CODE2[nib].reshape(m, k)
    return A4Codes(codes=codes, scales=scale.astype(E4M3), finite=finite)


@dataclass(frozen=True)
class A8Codes:
    """A8 per-row int8: ``q`` int8 [m, K], ``scale`` f32 [m] (NaN for a non-finite row)."""

    q: np.ndarray
    scale: np.ndarray


def a8_row_amax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of bf16 ``x`` [m, K]: (amax f32 [m] of |x| over the finite rows, 0 for a row
    holding Inf/NaN; finite bool [m]). Both combine over K ranges by max / all, exactly."""
    xf = check_rows(x).astype(F32)
    finite = np.isfinite(xf).all(axis=1)
    xf = np.where(finite[:, None], xf, F32(0))
    amax = np.abs(xf).max(axis=1) if xf.shape[1] else np.zeros(xf.shape[0], F32)
    return amax.astype(F32), finite


def quantize_a8_rows(x: np.ndarray, amax: np.ndarray, finite: np.ndarray) -> A8Codes:
    """A8 codes of ``x`` [m, K] (all of K or a range of it) under the row amax and finiteness
    of the whole row (``a8_row_amax`` combined over the ranges): s = amax/127,
    inv = 127/amax (0 if amax = 0), q = saturate_int8(rne(x · inv)), 0 · Inf giving 0;
    a non-finite row gets q = 0 and s = NaN."""
    xf = np.where(finite[:, None], check_rows(x).astype(F32), F32(0))
    amax = np.asarray(amax, dtype=F32)
    s = (amax / F32(127.0)).astype(F32)
    with np.errstate(divide="ignore", over="ignore"):  # a tiny amax overflows inv to Inf (defined)
        inv = np.where(amax == 0, F32(0), F32(127.0) / np.where(amax == 0, F32(1), amax))
    with np.errstate(over="ignore", invalid="ignore"):
        prod = xf * inv.astype(F32)[:, None]
    # amax below ~3.7e-37 makes inv = Inf; then 0 · Inf = NaN, which is defined as code 0
    # (what CUDA's cvt.rni.sat.s8 gives), not left to numpy's NaN -> int cast.
    prod = np.where(np.isnan(prod), F32(0), prod)
    q = np.clip(np.rint(prod), -128, 127).astype(np.int8)
    s = np.where(finite, s, F32(np.nan)).astype(F32)
    return A8Codes(q=q, scale=s)


def quantize_a8(x: np.ndarray) -> A8Codes:
    """vLLM dynamic per-token int8: amax = max|x|, s = amax/127, inv = 127/amax (0 if amax = 0),
    q = saturate_int8(rne(x · inv)), with 0 · Inf (inv = Inf for a tiny amax) giving 0.
    A row holding Inf/NaN gets q = 0 and s = NaN."""
    amax, finite = a8_row_amax(x)
    return quantize_a8_rows(x, amax, finite)


@dataclass(frozen=True)
class WeightBlockCodes:
    """Weight block codes of FP8/BF16 weights: ``codes`` [N, B, 16] integers (float64), ``exp``
    F int32 [N, B] (block scale 2^(F−frac), frac = 22 for § codes24)."""

    codes: np.ndarray
    exp: np.ndarray


def weight_codes(w: np.ndarray, frac: int = 22) -> WeightBlockCodes:
    """c = rne(w · 2^(frac−F)), F the block's max exponent (zero field as 1) of e4m3 or bf16:
    |c| < 2^(frac+1). frac = 22: § codes24 (exact for every e4m3 block); frac = 10: the chain
    revision's FP8 codes (docs/chain-revision.md), exact for elements within 2^7 of the block
    maximum, smaller ones rounded at 2^(F−10)."""
    if w.dtype == E4M3:
        field, bias = e4m3_exponent_field(w), 7
    elif w.dtype == BF16:
        field, bias = bf16_exponent_field(w), 127
    else:
        raise MetraleError(f"weight codes: dtype {w.dtype}, want float8_e4m3fn or bfloat16")
    c, f = block_fixed_point(w.astype(np.float64), field, bias, frac)
    return WeightBlockCodes(codes=c, exp=f)


def weight_codes24(w: np.ndarray) -> WeightBlockCodes:
    """c = rne(w · 2^(22−F)), F the block's max exponent (zero field as 1) of e4m3 or bf16."""
    return weight_codes(w, 22)
