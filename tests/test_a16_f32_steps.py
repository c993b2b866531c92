"""The f32 derivation behind kernels/common.cuh ``a16_codes8_f32`` (the fast A16 prologue),
replayed step for step in numpy float32 (IEEE mul/add, round to nearest even, subnormals kept,
as mul.rn / add.rn): it must give the reference's A16 codes (arithmetic.md § a16, quantize_a16) for
every bf16 value against every block maximum that shapes the split 2^k1 * 2^k2, and for seeded
random blocks. The GPU tests check the kernel itself; this checks the argument in its comment
(exact products, or values below 1/2 when the first product underflows)."""

from __future__ import annotations

import numpy as np

from metrale.reference.activations import quantize_a16
from metrale.reference.elements import BF16

MAGIC = np.float32(12582912.0)  # 1.5 * 2^23


def codes_f32_steps(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's steps on uint16 bf16 bits [nb, 16]: (codes int64, E, finite)."""
    mx = (bits & 0x7FFF).astype(np.uint32).max(axis=1)  # a16_mag_max4 over both halves
    f = np.maximum(mx >> 7, 1).astype(np.int64)
    finite = mx < 0x7F80
    e = f - 127
    k = 14 - e
    k1 = k >> 1
    k2 = k - k1
    s1 = ((127 + k1) << 23).astype(np.uint32).view(np.float32)[:, None]
    s2 = ((127 + k2) << 23).astype(np.uint32).view(np.float32)[:, None]
    x = (bits.astype(np.uint32) << 16).view(np.float32)
    with np.errstate(all="ignore"):
        v = np.multiply(np.multiply(x, s1, dtype=np.float32), s2, dtype=np.float32)
        t = np.add(v, MAGIC, dtype=np.float32)
    c = t.view(np.int32).astype(np.int64) - 0x4B400000
    c[~finite] = 0
    return c, e, finite


def check(bits: np.ndarray) -> None:
    with np.errstate(invalid="ignore"):
        ref = quantize_a16(bits.reshape(1, -1).view(BF16))
    c, e, finite = codes_f32_steps(bits)
    np.testing.assert_array_equal(finite, ref.finite.reshape(-1))
    np.testing.assert_array_equal(e[finite], ref.exp.reshape(-1)[finite])
    want = ref.codes.reshape(-1, 16)
    bad = np.argwhere(c != want)
    assert bad.size == 0, f"{len(bad)} codes differ; first block {bits[bad[0][0]].tolist()}"


def test_every_bf16_value_against_the_split_boundaries() -> None:
    # fields of the block maximum: k = 141 - F from 140 (all subnormal) through k1 = 0 / k2 < 0
    # turns to the largest finite field; 255 is a non-finite block (codes 0)
    values = np.arange(65536, dtype=np.uint16)
    for field in (0, 1, 2, 13, 14, 15, 16, 70, 126, 127, 128, 129, 140, 141, 142, 143, 200, 253, 254, 255):
        for mant in (0x00, 0x7F):
            blocks = np.zeros((65536, 16), dtype=np.uint16)
            blocks[:, 3] = values  # an odd and an even slot
            blocks[:, 10] = (values ^ 0x8001) & 0xFFFF
            blocks[:, 7] = np.uint16((field << 7) | mant)
            check(blocks)


def test_seeded_random_blocks() -> None:
    rng = np.random.default_rng(20261129)
    n = 100_000
    for _ in range(4):
        wide = rng.integers(0, 65536, (n, 16), dtype=np.uint16)
        fields = rng.integers(100, 160, (n, 1)).astype(np.uint16) << 7
        narrow = ((wide & 0x807F) | fields).astype(np.uint16)
        check(wide)
        check(narrow)
