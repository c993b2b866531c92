"""The summation order of the Q2_0 decode kernels (kernels/q2_0_dec.cu), replayed in numpy against
``tree_sum`` (arithmetic.md § tree) bit for bit: each lane's 4-block subtree, the butterfly that
halves NC columns per shuffle level, the plain levels up to 16, and the binary counter over chunk
roots; and the block sum read back from the dp4a chain as the float 1.5 * 2^23 + S."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrale.reference.tree import tree_sum

F32 = np.float32
LANES = 32
LEVELS = 7


def butterfly(v: np.ndarray, nc: int) -> tuple[np.ndarray, np.ndarray]:
    """Lane values v [32, nc] -> (root [32], column [32]) as q2d_warp_tree leaves them."""
    lanes = np.arange(LANES)
    v = v.copy()
    lv = 0
    while (nc >> lv) > 1:
        h, o = nc >> (lv + 1), 1 << lv
        up = (lanes & o) != 0
        new = v.copy()
        for j in range(h):
            keep = np.where(up, v[:, j + h], v[:, j])
            send = np.where(up, v[:, j], v[:, j + h])
            new[:, j] = keep + send[lanes ^ o]
        v = new
        lv += 1
    t = v[:, 0].copy()
    o = nc
    while o < LANES:
        t = t + t[lanes ^ o]
        o <<= 1
    col = np.zeros(LANES, dtype=int)
    lv = 0
    while (nc >> lv) > 1:
        col += np.where((lanes >> lv) & 1, nc >> (lv + 1), 0)
        lv += 1
    return t, col


def push(p: list[np.float32], c: np.float32, s: int) -> None:
    for lvl in range(LEVELS):
        if (s >> lvl) & 1:
            c = p[lvl] + c
        else:
            p[lvl] = c
            return


def root(p: list[np.float32], chunks: int) -> np.float32:
    acc, have = F32(-0.0), False
    for lvl in range(LEVELS):
        if (chunks >> lvl) & 1:
            acc = p[lvl] + acc if have else p[lvl]
            have = True
    return acc


def kernel_order(v: np.ndarray, nc: int) -> np.ndarray:
    """Block values v [nc, B] (B = 4 nq) of nc columns -> the kernel's roots [nc]."""
    nb = v.shape[1]
    nq = nb // 4
    chunks = (nq + 31) // 32
    p = [[F32(-0.0)] * LEVELS for _ in range(nc)]
    for ch in range(chunks):
        lanev = np.full((LANES, nc), F32(-0.0), dtype=F32)
        for lane in range(LANES):
            qb = ch * 32 + lane
            if qb < nq:
                b = v[:, 4 * qb : 4 * qb + 4]
                lanev[lane] = (b[:, 0] + b[:, 1]) + (b[:, 2] + b[:, 3])
        t, col = butterfly(lanev, nc)
        for c in range(nc):
            held = t[col == c]
            assert (
                np.array_equal(held.view(np.uint32), np.repeat(held[:1], len(held)).view(np.uint32))
                or np.isnan(held).all()
            )
            push(p[c], held[0], ch)
    return np.array([root(p[c], chunks) for c in range(nc)], dtype=F32)


def _bits(a: np.ndarray) -> np.ndarray:
    b = np.asarray(a, dtype=F32).view(np.uint32).copy()
    b[np.isnan(np.asarray(a, dtype=F32))] = 0x7FC00000  # to_bf16 makes every NaN one pattern
    return b


def _values(rng: np.random.Generator, nc: int, nb: int) -> np.ndarray:
    v = (rng.standard_normal((nc, nb)) * np.exp2(rng.integers(-140, 100, (nc, nb)))).astype(F32)
    for special in (0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38):
        v.flat[rng.integers(0, v.size)] = special
    return v


@pytest.mark.parametrize("nc", [1, 2, 4, 8])
@pytest.mark.parametrize("nq", [1, 2, 3, 31, 32, 33, 67, 160, 2048])
def test_kernel_order_is_the_tree(nc: int, nq: int) -> None:
    rng = np.random.default_rng([nc, nq])
    v = _values(rng, nc, 4 * nq)
    with np.errstate(all="ignore"):
        got = kernel_order(v, nc)
        want = np.array([tree_sum(v[c]) for c in range(nc)], dtype=F32)
    assert np.array_equal(_bits(got), _bits(want)), (got, want)


def test_a_wrong_pairing_is_caught() -> None:
    """The replay can fail: chunk roots summed left to right differ from the tree."""
    rng = np.random.default_rng(5)
    v = (rng.standard_normal((1, 4 * 32 * 5)) * 1e4).astype(F32)
    chunks = [tree_sum(v[0, i * 128 : (i + 1) * 128]) for i in range(5)]
    seq = F32(0.0)
    for c in chunks:
        seq = seq + c
    assert _bits(kernel_order(v, 1))[0] == _bits(tree_sum(v[0]))
    assert any(
        _bits(np.array([a], F32))[0] != _bits(np.array([tree_sum(v[0])], F32))[0]
        for a in (seq, F32(chunks[0] + (chunks[1] + (chunks[2] + (chunks[3] + chunks[4])))))
    )


@settings(max_examples=300, deadline=None)
@given(s=st.integers(-(2**20), 2**20))
def test_dp4a_chain_bits_give_the_block_sum(s: int) -> None:
    """256 shi + slo = 0x4B400000 + S (mod 2^32); that float minus 1.5 * 2^23 is f32(S) exactly."""
    bits = np.array([(0x4B400000 + s) & 0xFFFFFFFF], dtype=np.uint32)
    got = bits.view(F32)[0] - F32(12582912.0)
    assert got == F32(s) and np.signbit(got) == np.signbit(F32(s))
