"""The arithmetic behind the f16-MMA block dot (nvfp4_mma.cu's w4a16h kernels): NVFP4 weight
codes and A16 activation codes are exact f16 values, so every product and every partial sum of
a 16-element block dot is an integer exact in f32. CPU checks of those facts;
tests/gpu/test_f16_mma_block_dot.py checks that the H200's f16 MMA keeps them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from metrale.reference.activations import quantize_a16
from metrale.reference.elements import E2M1_CODE2


def test_every_weight_code_is_an_exact_f16_the_kernels_bytes_give() -> None:
    """The f16 mode's weight decode: the s8 code's byte biased by 128 (c + 128) under the f16
    exponent of 1024 is 1024 + 128 + c; minus 1152 (f16 0x6480) it is c, exact for |c| <= 12."""
    codes = E2M1_CODE2.astype(np.int64)
    biased = (0x6400 | (codes + 128)).astype(np.uint16).view(np.float16)
    assert np.float16(1152).view(np.uint16) == 0x6480
    got = (biased - np.float16(1152)).astype(np.float64)
    assert np.array_equal(got, codes)
    assert np.array_equal(codes.astype(np.float16).astype(np.int64), codes)


def _bf16_blocks(bits: list[int]) -> np.ndarray:
    return np.array(bits, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(1, -1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 0xFFFF), min_size=16, max_size=16))
def test_a16_codes_are_exact_f16(bits: list[int]) -> None:
    """Every A16 code has at most 8 significant bits and |c| < 2^15, so f16 holds it exactly."""
    codes = quantize_a16(_bf16_blocks(bits)).codes.reshape(-1)
    assert np.array_equal(codes.astype(np.float16).astype(np.float64), codes)


def test_a16_codes_exact_in_f16_for_every_bf16_against_every_block_maximum() -> None:
    """Every finite bf16 value beside block maxima at each exponent (the codes' rounding edge)."""
    every = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    finite = every[(every & 0x7F80) != 0x7F80]
    for top in (0x0001, 0x0080, 0x3F80, 0x3FFF, 0x7F7F, 0x4700):
        rows = np.full((len(finite), 16), top, dtype=np.uint16)
        rows[:, 5] = finite
        codes = quantize_a16(rows.view(ml_dtypes.bfloat16)).codes.reshape(-1)
        assert np.array_equal(codes.astype(np.float16).astype(np.float64), codes), hex(top)


def test_block_dot_partial_sums_are_exact_in_f32() -> None:
    """|2·e2m1| ≤ 12, |c| ≤ 32640: each partial sum of 16 products is an integer below 2^23,
    exact in f32 in any order. The worst case by hand: 16 · 12 · 32640 = 6,266,880 < 2^23."""
    assert 16 * 12 * 32640 < 2**23
    rng = np.random.default_rng(7)
    w = E2M1_CODE2[rng.integers(0, 16, (4096, 16))].astype(np.int64)
    c = rng.integers(-32640, 32641, (4096, 16)).astype(np.int64)
    prods = (w * c).astype(np.float64)
    for order in (np.arange(16), np.arange(16)[::-1], rng.permutation(16)):
        acc = np.zeros(4096, dtype=np.float32)
        for j in order:
            acc = (acc + prods[:, j].astype(np.float32)).astype(np.float32)
        assert np.array_equal(acc.astype(np.float64), (w * c).sum(axis=1))


def test_block_dot_environment_refused() -> None:
    import os
    import subprocess
    import sys

    got = subprocess.run(
        [sys.executable, "-c", "import metrale.cuda.mma"],
        capture_output=True,
        text=True,
        env={**os.environ, "METRALE_BLOCK_DOT": "f32"},
        timeout=60,
    )
    assert got.returncode != 0 and "METRALE_BLOCK_DOT='f32': want one of s8, f16" in got.stderr
