"""Element types and rounding primitives (arithmetic.md § elements), on ml_dtypes.

Every function takes and returns numpy arrays; none modifies its input.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E2M1 = np.dtype(ml_dtypes.float4_e2m1fn)

#: Canonical bf16 NaN: every NaN a step writes becomes these bits.
BF16_CANONICAL_NAN = np.uint16(0x7FC0)
E4M3_MAX = 448.0
E2M1_MAX = 6.0

#: The eight e2m1 magnitudes, indexed by nibble bits 0-2 (bit 3 is the sign).
E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
#: Integer weight code 2*e2m1 for each of the 16 nibbles (-0 maps to 0).
E2M1_CODE2 = np.concatenate([2 * E2M1_MAGNITUDES, -2 * E2M1_MAGNITUDES]).astype(np.int8)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16, round to nearest even, overflow to ±Inf, every NaN -> 0x7FC0."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        bits = x.astype(BF16).view(np.uint16)
    bits = np.where(np.isnan(x), BF16_CANONICAL_NAN, bits).astype(np.uint16)
    return bits.view(BF16)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """The raw uint16 of a bf16 array (a view)."""
    return np.asarray(x).view(np.uint16)


def e4m3_saturate(x: np.ndarray) -> np.ndarray:
    """fp32 -> e4m3: clamp to ±448, then cast (RNE). NaN stays NaN; finite never gives NaN."""
    x = np.asarray(x, dtype=np.float32)
    return np.clip(x, -E4M3_MAX, E4M3_MAX).astype(E4M3)


def e2m1_rne(x: np.ndarray) -> np.ndarray:
    """fp32 -> e2m1: clamp to ±6, round half to even. NaN input is the caller's error."""
    x = np.asarray(x, dtype=np.float32)
    return np.clip(x, -E2M1_MAX, E2M1_MAX).astype(E2M1)


def bf16_exponent_field(x: np.ndarray) -> np.ndarray:
    """The biased 8-bit exponent field of bf16 values, as int32."""
    return ((bf16_bits(np.asarray(x, dtype=BF16)) >> 7) & 0xFF).astype(np.int32)


def e4m3_exponent_field(x: np.ndarray) -> np.ndarray:
    """The biased 4-bit exponent field of e4m3 values, as int32."""
    return ((np.asarray(x, dtype=E4M3).view(np.uint8) >> 3) & 0x0F).astype(np.int32)


def rne(x: np.ndarray) -> np.ndarray:
    """Round to nearest integer, ties to even (float64 in, float64 out)."""
    return np.rint(np.asarray(x, dtype=np.float64))
