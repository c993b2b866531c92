"""The Q2_0 decode kernels (kernels/q2_0_dec.cu) replayed in numpy, bit for bit: their summation
order against ``tree_sum`` (arithmetic.md § tree: each lane's 4-block subtree, the butterfly that
halves NC columns per shuffle level, the plain levels up to 16, the binary counter over chunk
roots), the block sum read back from the dp4a chain as the float 1.5 * 2^23 + S, and the whole
arithmetic (q2_dec_prep's planes, the chains, the products, the tree) against ``project``."""

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


def prep_planes(codes: np.ndarray, exp: np.ndarray, finite: np.ndarray) -> tuple[np.ndarray, ...]:
    """q2_dec_prep's planes from A16 codes [m, B, 16]: lo, hi [m, 4, nq, 4] words (word s, byte j:
    element s + 4j of block 4 qb + i), aux [m, 4, nq, 2] (0x4B400000 - sum c, bits of 2^(E - 14)
    or NaN)."""
    c = codes.astype(np.int64)
    m, nb, _ = c.shape
    nq = nb // 4
    # [m, i, qb, s, j]: element s + 4j of block 4 qb + i
    cb = c.reshape(m, nq, 4, 4, 4).transpose(0, 2, 1, 4, 3)
    shifts = (8 * np.arange(4, dtype=np.int64))[None, None, None, None, :]
    lo = ((cb & 0xFF) << shifts).sum(-1).astype(np.uint32)
    hi = (((cb >> 8) & 0xFF) << shifts).sum(-1).astype(np.uint32)
    csum = c.sum(-1).reshape(m, nq, 4).transpose(0, 2, 1)
    fac = np.where(finite, np.ldexp(F32(1), exp - 14).astype(F32), F32(np.nan)).astype(F32)
    aux = np.stack(
        [
            ((0x4B400000 - csum) & 0xFFFFFFFF).astype(np.uint32),
            fac.reshape(m, nq, 4).transpose(0, 2, 1).view(np.uint32),
        ],
        axis=-1,
    )
    return lo, hi, aux


def block_values(
    lo: np.ndarray, hi: np.ndarray, aux: np.ndarray, qs: np.ndarray, d: np.ndarray, r: int
) -> np.ndarray:
    """Row r's block values [N, B] as the kernel forms them: dp4a chains from the bias, the float
    1.5 * 2^23 + S read from the bits, minus 1.5 * 2^23, times f32(d), times the factor."""
    n, nq, _ = qs.shape
    j8 = 8 * np.arange(4, dtype=np.int64)
    out = np.empty((n, nq, 4), dtype=F32)
    for i in range(4):
        slo = np.broadcast_to(aux[r, i, :, 0].astype(np.int64), (n, nq)).copy()
        shi = np.zeros((n, nq), dtype=np.int64)
        for s in range(4):
            g = (qs[:, :, i].astype(np.int64) >> (2 * s)) & 0x03030303
            gb = (g[..., None] >> j8) & 0xFF
            lb = (lo[r, i, :, s].astype(np.int64)[:, None] >> j8) & 0xFF
            hb = (hi[r, i, :, s].astype(np.int64)[:, None] >> j8) & 0xFF
            hb = np.where(hb > 127, hb - 256, hb)
            slo = slo + (gb * lb[None]).sum(-1)
            shi = shi + (gb * hb[None]).sum(-1)
        bits = ((shi * 256 + slo) & 0xFFFFFFFF).astype(np.uint32)
        fs = bits.view(F32) - F32(12582912.0)
        out[:, :, i] = (fs * d) * aux[r, i, :, 1].view(F32)[None, :]
    return out.reshape(n, nq * 4)


@pytest.mark.parametrize(("n", "k"), [(9, 64), (5, 192), (8, 2112), (4, 4288)])
def test_prep_layout_and_block_arithmetic_replay_project(n: int, k: int) -> None:
    """The whole decode arithmetic (prep planes, dp4a chains, the float trick, the products, the
    kernel's tree) on every activation edge kind against ``project``, bit for bit."""
    import ml_dtypes

    from metrale.reference.activations import quantize_a16
    from metrale.reference.formats import Q2_0Weight
    from metrale.reference.projection import project
    from tests.gpu import gen

    rng = np.random.default_rng([n, k])
    q = rng.integers(0, 4, (n, k), dtype=np.uint8)
    dh = (rng.standard_normal((n, k // 64)) * np.exp2(rng.integers(-26, 8, (n, k // 64)))).astype(np.float16)
    dh.flat[0] = 0.0
    dh.flat[-1] = np.float16(-(2.0**-24))
    w = Q2_0Weight.from_parts(q, dh, name="q2")
    x = np.stack([gen.row(rng, k, kind) for kind in gen.ROW_KINDS])
    a = quantize_a16(x)
    lo, hi, aux = prep_planes(a.codes, a.exp, a.finite)
    qs = np.ascontiguousarray(w.blocks[..., 2:]).view(np.uint32)  # [n, nq, 4]: word i = block 4 qb + i
    d = np.ascontiguousarray(w.blocks[..., :2]).view(np.float16)[..., 0].astype(F32)
    with np.errstate(all="ignore"):
        want = project(x, w, "A16").view(np.uint16)
        for r in range(x.shape[0]):
            v = block_values(lo, hi, aux, qs, d, r)
            for nc in (4, 8):
                vp = np.concatenate([v, np.zeros((-n % nc, v.shape[1]), F32)])  # columns past N
                got = np.concatenate([kernel_order(vp[c0 : c0 + nc], nc) for c0 in range(0, n, nc)])
                y = got.astype(ml_dtypes.bfloat16).view(np.uint16).copy()
                y[np.isnan(got)] = 0x7FC0
                assert np.array_equal(y[:n], want[r]), (r, nc, gen.ROW_KINDS[r])
