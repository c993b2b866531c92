"""Element helpers (arithmetic.md § elements) against independent oracles: torch's casts, hand-worked bit
patterns and vLLM's e2m1 threshold table."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    BF16,
    E2M1_VALUES,
    E4M3,
    F32,
    assert_bits_equal,
    bits,
    cast_to_fp4,
    torch_e4m3_bits,
    torch_e4m3_decode,
    torch_to_bf16_bits,
)

from metrale.reference.elements import e2m1_rne, e4m3_saturate, to_bf16

# --------------------------------------------------------------------------- to_bf16


def _f32_from_bits(u: list[int] | np.ndarray) -> np.ndarray:
    return np.asarray(u, dtype=np.uint32).view(F32)


def test_to_bf16_matches_torch_on_random_bit_patterns(rng: np.random.Generator) -> None:
    """Every float32 bit pattern class (normal, subnormal, Inf, NaN) vs torch RNE; NaN -> 0x7FC0."""
    x = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32).view(F32)
    want = torch_to_bf16_bits(x)
    want = np.where(np.isnan(x), np.uint16(0x7FC0), want)
    got = to_bf16(x)
    assert got.dtype == BF16
    assert_bits_equal(got, want.view(BF16), "to_bf16 vs torch")


def test_to_bf16_matches_torch_near_ties(rng: np.random.Generator) -> None:
    """Values whose low 16 bits are at or next to the halfway point 0x8000."""
    hi = rng.integers(0, 2**16, size=20_000, dtype=np.uint32) << 16
    lo = np.array([0x7FFF, 0x8000, 0x8001], dtype=np.uint32)
    x = (hi[:, None] | lo[None, :]).ravel().view(F32)
    want = np.where(np.isnan(x), np.uint16(0x7FC0), torch_to_bf16_bits(x))
    assert_bits_equal(to_bf16(x), want.view(BF16), "to_bf16 ties")


@pytest.mark.parametrize(
    ("f32_bits", "bf16_bits"),
    [
        (0x3F808000, 0x3F80),  # 1 + 2^-8: tie between 1 and 1 + 2^-7 -> even (1.0)
        (0x3F818000, 0x3F82),  # 1 + 3·2^-8: tie -> even (1 + 2^-6)
        (0x3F808001, 0x3F81),  # just above the tie -> up
        (0xBF808000, 0xBF80),  # negative tie -> even
        (0x7F7F7FFF, 0x7F7F),  # just below the overflow midpoint -> max bf16
        (0x7F7F8000, 0x7F80),  # midpoint above max bf16 -> even -> +Inf
        (0x7F7FFFFF, 0x7F80),  # max float32 -> +Inf
        (0xFF7FFFFF, 0xFF80),  # -max float32 -> -Inf
        (0x7F800000, 0x7F80),  # +Inf
        (0xFF800000, 0xFF80),  # -Inf
        (0x00000000, 0x0000),  # +0
        (0x80000000, 0x8000),  # -0
        (0x00000001, 0x0000),  # smallest subnormal -> +0
        (0x80000001, 0x8000),  # -smallest subnormal -> -0
        (0x00008000, 0x0000),  # subnormal tie -> even (0)
        (0x00018000, 0x0002),  # subnormal tie -> even (2)
        (0x00010000, 0x0001),  # smallest bf16 subnormal, exact
        (0x007FFFFF, 0x0080),  # largest subnormal rounds up to the smallest normal
        (0x7F800001, 0x7FC0),  # signalling NaN, payload 1
        (0xFF800001, 0x7FC0),  # negative sNaN
        (0x7FC00000, 0x7FC0),  # quiet NaN
        (0xFFC00000, 0x7FC0),  # negative quiet NaN (numpy's default NaN sign on x86)
        (0x7FFFFFFF, 0x7FC0),  # all-ones payload
        (0xFFFFFFFF, 0x7FC0),
        (0x7F80FFFF, 0x7FC0),  # payload only in the low 16 bits
    ],
)
def test_to_bf16_named(f32_bits: int, bf16_bits: int) -> None:
    """Hand-worked RNE, overflow, signed zero, subnormal and canonical-NaN cases."""
    got = to_bf16(_f32_from_bits([f32_bits]))
    assert int(bits(got)[0]) == bf16_bits, f"{f32_bits:#010x} -> {int(bits(got)[0]):#06x}"


def test_to_bf16_does_not_modify_input() -> None:
    x = _f32_from_bits([0x7F800001, 0x3F808000, 0xFFC00000])
    before = x.copy()
    to_bf16(x)
    assert_bits_equal(x, before, "input")


# --------------------------------------------------------------------------- e4m3_saturate


def test_e4m3_every_code_round_trips() -> None:
    """All 256 codes: decode (torch), re-encode: the same code, except the two NaNs stay NaN."""
    codes = np.arange(256, dtype=np.uint8)
    vals = torch_e4m3_decode(codes)
    nan = np.isnan(vals)
    assert sorted(codes[nan].tolist()) == [0x7F, 0xFF]
    got = e4m3_saturate(vals)
    assert got.dtype == E4M3
    assert_bits_equal(bits(got)[~nan], codes[~nan], "e4m3 round trip")
    assert np.isnan(got.astype(F32)[nan]).all()


def test_e4m3_matches_torch_after_clamp(rng: np.random.Generator) -> None:
    """Random magnitudes over the whole fp32 range, plus ±Inf: clamp to ±448 then torch's cast."""
    mag = np.exp2(rng.uniform(-160, 130, size=100_000))
    with np.errstate(over="ignore"):
        x = (mag * rng.choice([-1.0, 1.0], size=mag.size)).astype(F32)
    x = np.concatenate([x, np.array([np.inf, -np.inf, 448.0, 464.0, 480.0, 1e30, -1e30], F32)])
    want = torch_e4m3_bits(np.clip(x, -448.0, 448.0))
    got = e4m3_saturate(x)
    assert_bits_equal(got, want.view(E4M3), "e4m3 vs torch")
    assert not np.isnan(got.astype(F32)).any(), "a finite or infinite input produced NaN"


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (449.0, 0x7E),
        (464.0, 0x7E),
        (480.0, 0x7E),
        (1e38, 0x7E),
        (np.inf, 0x7E),
        (-449.0, 0xFE),
        (-np.inf, 0xFE),
        (447.9, 0x7E),
        (-0.0, 0x80),
        (0.0, 0x00),
    ],
)
def test_e4m3_saturation_named(value: float, code: int) -> None:
    """Above 448 saturates to ±448 (0x7E/0xFE), never to the NaN code 0x7F; signed zero kept."""
    assert int(bits(e4m3_saturate(np.array([value], F32)))[0]) == code


def test_e4m3_ties_to_even_at_every_midpoint() -> None:
    """The midpoint of every pair of adjacent finite e4m3 values rounds to the even code."""
    codes = np.arange(0, 0x7E, dtype=np.uint8)  # positive finite codes whose successor is finite
    lo, hi = torch_e4m3_decode(codes).astype(np.float64), torch_e4m3_decode(codes + 1).astype(np.float64)
    mid = ((lo + hi) / 2).astype(F32)
    assert ((lo + hi) / 2 == mid).all()  # midpoints are exact in fp32
    even = np.where(codes % 2 == 0, codes, codes + 1).astype(np.uint8)
    assert_bits_equal(e4m3_saturate(mid), even.view(E4M3), "positive ties")
    assert_bits_equal(e4m3_saturate(-mid), (even | 0x80).view(E4M3), "negative ties")


def test_e4m3_nan_stays_nan() -> None:
    assert np.isnan(e4m3_saturate(np.array([np.nan], F32)).astype(F32)).all()


# --------------------------------------------------------------------------- e2m1_rne


def test_e2m1_all_sixteen_codes() -> None:
    """Each of the 16 nibbles (sign bit 3, magnitude index bits 0-2) is produced by its value."""
    for nib in range(16):
        v = E2M1_VALUES[nib & 7] * (-1.0 if nib & 8 else 1.0)
        v32 = np.array([-0.0 if nib == 8 else v], F32)
        got = e2m1_rne(v32)
        assert int(got.view(np.uint8)[0] & 0xF) == nib, f"nibble {nib}"
        assert got.astype(F32)[0] == v32[0]


@pytest.mark.parametrize(
    ("mid", "want"),
    [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)],
)
def test_e2m1_midpoints_tie_to_even(mid: float, want: float) -> None:
    """Every midpoint between adjacent e2m1 magnitudes goes to the even mantissa, both signs."""
    got = e2m1_rne(np.array([mid, -mid], F32)).astype(F32)
    assert got.tolist() == [want, -want]


@pytest.mark.parametrize("value", [6.0, 6.5, 7.0, 100.0, 1e30, np.inf])
def test_e2m1_saturates_at_six(value: float) -> None:
    got = e2m1_rne(np.array([value, -value], F32)).astype(F32)
    assert got.tolist() == [6.0, -6.0]


def test_e2m1_matches_vllm_threshold_table(rng: np.random.Generator) -> None:
    """Random values and the float32 neighbours of every threshold, clamped to ±6 as vLLM does
    before ``cast_to_fp4``; compared as float32 bits (so the sign of zero counts too)."""
    thresholds = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], F32)
    near = np.concatenate([np.nextafter(thresholds, F32(0)), thresholds, np.nextafter(thresholds, F32(9))])
    # (-0.0 itself is left out: np.sign(-0.0) is 0, so the table yields +0 where RNE keeps -0;
    # the sign of a zero never reaches an integer code.)
    x = np.concatenate([rng.uniform(-8, 8, size=50_000).astype(F32), near, -near, np.array([0.0], F32)])
    want = cast_to_fp4(np.clip(x, -6.0, 6.0))
    got = e2m1_rne(x).astype(F32)
    assert_bits_equal(got, want, "e2m1 vs cast_to_fp4")


def test_e2m1_does_not_modify_input() -> None:
    x = np.array([2.5, -7.0, 0.3], F32)
    before = x.copy()
    e2m1_rne(x)
    e4m3_saturate(x)
    assert_bits_equal(x, before, "input")
