"""CPU replay of the W8A8 prefill GEMM's fragment layout (``w8_gemm`` in
``metrale/cuda/kernels/w8a8.cu``): lane (g, t) loads the 16 bytes at k = 16 t of A rows g and
g + 8 and of B column g from a 64-byte K tile, and feeds words (x, y) to one
``mma.sync m16n8k32 s8`` and (z, w) to a second. Replaying the PTX fragment definition of
m16n8k32 (A: a0/a2 row g, a1/a3 row g + 8, a0/a1 at k = 4t..4t+3, a2/a3 at k = 16 + 4t..; B: b0
at k = 4t.., b1 at k = 16 + 4t.., column g; C: c0/c1 row g, columns 2t, 2t + 1, c2/c3 row g + 8)
must give the exact integer product of the tile, for random and extreme codes."""

from __future__ import annotations

import numpy as np
import pytest


def _words(tile: np.ndarray, row: int, t: int) -> list[np.ndarray]:
    """The four 32-bit words (as 4 int8 each) lane t reads from ``row`` at byte 16 t."""
    b = tile[row, 16 * t : 16 * t + 16]
    return [b[4 * i : 4 * i + 4] for i in range(4)]


def _mma(
    a_regs: dict[tuple[int, int], list[np.ndarray]], b_regs: dict[tuple[int, int], list[np.ndarray]]
) -> np.ndarray:
    """D[16, 8] (int64) of one m16n8k32 from per-lane registers, by the PTX fragment layout."""
    a = np.zeros((16, 32), np.int64)
    b = np.zeros((32, 8), np.int64)
    for g in range(8):
        for t in range(4):
            a0, a1, a2, a3 = a_regs[g, t]
            a[g, 4 * t : 4 * t + 4] = a0
            a[g + 8, 4 * t : 4 * t + 4] = a1
            a[g, 16 + 4 * t : 20 + 4 * t] = a2
            a[g + 8, 16 + 4 * t : 20 + 4 * t] = a3
            b0, b1 = b_regs[g, t]
            b[4 * t : 4 * t + 4, g] = b0
            b[16 + 4 * t : 20 + 4 * t, g] = b1
    return a @ b


def _tile_product(a_tile: np.ndarray, b_tile: np.ndarray) -> np.ndarray:
    """The kernel's two MMAs over one 64-byte K tile, accumulated, read back through the C
    fragment (c0, c1 at row g, columns 2t, 2t + 1; c2, c3 at row g + 8)."""
    d = np.zeros((16, 8), np.int64)
    for half in (0, 1):  # words (x, y), then (z, w)
        a_regs, b_regs = {}, {}
        for g in range(8):
            for t in range(4):
                lo, hi = _words(a_tile, g, t), _words(a_tile, g + 8, t)
                a_regs[g, t] = [lo[2 * half], hi[2 * half], lo[2 * half + 1], hi[2 * half + 1]]
                bw = _words(b_tile, g, t)
                b_regs[g, t] = [bw[2 * half], bw[2 * half + 1]]
        d += _mma(a_regs, b_regs)
    out = np.zeros((16, 8), np.int64)
    for g in range(8):
        for t in range(4):
            for e in range(4):
                out[g + 8 * (e >> 1), 2 * t + (e & 1)] = d[g + 8 * (e >> 1), 2 * t + (e & 1)]
    return out


@pytest.mark.parametrize("kind", ["random", "extreme", "one_hot"])
def test_fragment_layout_gives_the_exact_tile_product(kind: str) -> None:
    rng = np.random.default_rng(12)
    if kind == "random":
        a = rng.integers(-128, 128, (16, 64)).astype(np.int8)
        b = rng.integers(-128, 128, (8, 64)).astype(np.int8)
    elif kind == "extreme":
        a = np.where(rng.random((16, 64)) < 0.5, -128, 127).astype(np.int8)
        b = np.full((8, 64), -128, np.int8)
    else:  # each (row, k) and (col, k) pairing distinguishable: a permutation error shows
        a = np.zeros((16, 64), np.int8)
        b = np.zeros((8, 64), np.int8)
        a[np.arange(16), rng.permutation(64)[:16]] = 1
        b[:, :] = (np.arange(64) % 127).astype(np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64).T
    np.testing.assert_array_equal(_tile_product(a, b), want)
