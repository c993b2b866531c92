"""CPU replay of the FP8/BF16 decode kernels (``kernels/fp8_bf16_gemv.cu``, ``fp8_bf16_dec_prep``
and ``{fp8,bf16}_dec_*``): the prep's lane-interleaved activation layout (double high words and
int16) reads back as the A16 codes and 2^(E−14); the per-chunk lane butterfly, the tree over
chunk roots (``roots_tree128``) and warps taking chunks round-robin give ``tree_sum``'s root bit
for bit; and the whole decode arithmetic reproduces ``project`` (arithmetic.md § a16, § tree,
§ projection)."""

from __future__ import annotations

import numpy as np
import pytest

from metrale.reference.activations import quantize_a16
from metrale.reference.elements import to_bf16
from metrale.reference.formats import DenseWeight, Fp8Weight
from metrale.reference.projection import project
from metrale.reference.tree import tree_sum
from tests.gpu.gen import BF16, E4M3, E4M3_FINITE, F32, ROW_KINDS, row

F32_NEG0 = np.float32(-0.0)


def _hiword(c: np.ndarray) -> np.ndarray:
    """The high 32-bit words of double(c) (what ``__double2hiint((double)c)`` stores)."""
    return (c.astype(np.float64).view(np.int64) >> 32).astype(np.int32)


def _prep(x: np.ndarray, mode: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The prep's buffers: act as u32 [m·C·AQ·32, 4] (mode 0, AQ = 4) or u16 [m·C·AQ·32, 8]
    (mode 1, AQ = 2) by the documented index ((r·C + ch)·AQ + q)·32 + l, pe int32 [m·C·32]."""
    a = quantize_a16(x)
    m, nb = a.exp.shape
    c_n = -(-nb // 32)
    codes = np.zeros((m, c_n * 32, 16), dtype=np.int64)
    codes[:, :nb] = a.codes.astype(np.int64)
    pe = np.zeros((m, c_n * 32), dtype=np.int32)
    pe[:, :nb] = np.where(a.finite, (a.exp - 14 + 1023) << 20, 0x7FF80000)
    aq = 4 if mode == 0 else 2
    per = 16 // aq
    blocks = codes.reshape(m, c_n, 32, aq, per).transpose(0, 1, 3, 2, 4)  # r ch q l e
    if mode == 0:
        act = _hiword(blocks).view(np.uint32)
    else:
        act = blocks.astype(np.int16).view(np.uint16)
    return act.reshape(m * c_n * aq * 32, per), pe.reshape(-1), c_n


def _read_codes(act: np.ndarray, mode: int, r: int, ch: int, c_n: int) -> np.ndarray:
    """float64 [32 lanes, 16] codes as the kernel reads them (``dec_act``)."""
    aq = 4 if mode == 0 else 2
    words = np.stack(
        [act[((r * c_n + ch) * aq + q) * 32 : ((r * c_n + ch) * aq + q) * 32 + 32] for q in range(aq)]
    )
    words = words.transpose(1, 0, 2).reshape(32, 16)  # lane, element
    if mode == 0:
        return (words.astype(np.uint32).astype(np.int64) << 32).view(np.float64)
    return words.astype(np.uint16).view(np.int16).astype(np.float64)


@np.errstate(over="ignore", invalid="ignore")
def _butterfly(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """``tree_butterfly`` over x f32 [32 lanes, V]: (values [32, cnt], off [32], cnt, dup)."""
    lanes = np.arange(32)
    v = x.shape[1]
    cnt, dup = v, 0
    off = np.zeros(32, dtype=np.int64)
    for s in range(5):
        d = 1 << s
        up = (lanes & d) != 0
        if cnt >= 2 and cnt % 2 == 0:
            h = cnt // 2
            send = np.where(up[:, None], x[:, :h], x[:, h:cnt])
            keep = np.where(up[:, None], x[:, h:cnt], x[:, :h])
            x = (keep + send[lanes ^ d]).astype(F32)
            off = off + np.where(up, h, 0)
            cnt = h
        else:
            x = (x[:, :cnt] + x[lanes ^ d, :cnt]).astype(F32)
            dup |= d
    return x, off, cnt, dup


@np.errstate(over="ignore", invalid="ignore")
def _roots_tree128(sr: np.ndarray, c_n: int) -> np.float32:
    a = np.full(128, F32_NEG0, dtype=F32)
    a[:c_n] = sr[:c_n]
    lv = ((a[0::4] + a[1::4]).astype(F32) + (a[2::4] + a[3::4]).astype(F32)).astype(F32)
    for o in (1, 2, 4, 8, 16):
        lv = (lv + lv[np.arange(32) ^ o]).astype(F32)
    assert np.all(lv.view(np.uint32) == lv[0].view(np.uint32)) or np.isnan(lv).all()
    return lv[0]


def _decode_roots(vals: np.ndarray, warps: int) -> np.ndarray:
    """Block values f32 [V, B] -> the kernel's roots [V] (chunks of 32 by lane, warps round-robin)."""
    nv, nb = vals.shape
    c_n = -(-nb // 32)
    padded = np.full((nv, c_n * 32), F32_NEG0, dtype=F32)
    padded[:, :nb] = vals
    sroot = np.full((nv, 128), np.nan, dtype=F32)
    for warp in range(warps):
        for ch in range(warp, c_n, warps):
            x, off, cnt, dup = _butterfly(padded[:, ch * 32 : ch * 32 + 32].T.copy())
            for lane in range(32):
                if lane & dup:
                    continue
                for i in range(cnt):
                    sroot[off[lane] + i, ch] = x[lane, i]
    return np.array([_roots_tree128(sroot[v], c_n) for v in range(nv)], dtype=F32)


@pytest.mark.parametrize("mode", [0, 1])
def test_prep_layout_reads_back_the_a16_codes(mode: int) -> None:
    rng = np.random.default_rng(11)
    k = 16 * 67
    x = np.stack([row(rng, k, kind) for kind in ROW_KINDS])
    a = quantize_a16(x)
    act, pe, c_n = _prep(x, mode)
    for r in range(x.shape[0]):
        for ch in range(c_n):
            got = _read_codes(act, mode, r, ch, c_n)
            b = np.arange(ch * 32, ch * 32 + 32)
            live = b < a.exp.shape[1]
            np.testing.assert_array_equal(got[live], a.codes[r, b[live]])
            assert not got[~live].any()
            p2 = (pe[(r * c_n + ch) * 32 : (r * c_n + ch) * 32 + 32].astype(np.int64) << 32).view(np.float64)
            want = np.where(a.finite[r, b[live]], np.exp2(a.exp[r, b[live]] - 14.0), np.nan)
            np.testing.assert_array_equal(p2[live], want)


@pytest.mark.parametrize("v", [1, 2, 3, 8, 12, 16, 24])
def test_butterfly_is_the_lane_tree(v: int) -> None:
    """Every value index, on every lane that stores it, is tree_sum over the 32 lanes."""
    rng = np.random.default_rng(v)
    x = (rng.standard_normal((32, v)) * np.exp2(rng.integers(-140, 120, (32, v)))).astype(F32)
    x[rng.random((32, v)) < 0.1] = F32_NEG0
    x[rng.random((32, v)) < 0.05] = np.float32(0.0)
    if v > 2:
        x[3, 2] = np.inf
        x[7, 1] = np.float32(3e38)
        x[8, 1] = np.float32(3e38)  # overflow to Inf inside the tree
    got, off, cnt, dup = _butterfly(x.copy())
    want = tree_sum(x, axis=0).astype(F32)
    seen = set()
    for lane in range(32):
        for i in range(cnt):
            idx = int(off[lane] + i)
            w = want[idx]
            assert (np.isnan(w) and np.isnan(got[lane, i])) or got[lane, i].view(np.uint32) == w.view(
                np.uint32
            )
            if not lane & dup:
                seen.add(idx)
    assert seen == set(range(v))


@pytest.mark.parametrize("nb", [1, 3, 31, 32, 33, 65, 293, 768, 4096])
@pytest.mark.parametrize("warps", [4, 8])
def test_chunks_over_warps_give_the_padded_tree(nb: int, warps: int) -> None:
    rng = np.random.default_rng(nb * warps)
    vals = (rng.standard_normal((3, nb)) * np.exp2(rng.integers(-30, 30, (3, nb)))).astype(F32)
    vals[:, rng.integers(0, nb, 3)] = F32_NEG0
    got = _decode_roots(vals, warps)
    want = tree_sum(vals, axis=1).astype(F32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _weight(rng: np.random.Generator, fmt: str, n: int, k: int) -> Fp8Weight | DenseWeight:
    if fmt == "fp8":
        codes = rng.choice(E4M3_FINITE, (n, k))
        return Fp8Weight(
            weight=codes.view(E4M3), weight_scale=np.exp2(rng.uniform(-12, 4, n)).astype(F32), name="w"
        )
    kinds = ("gauss", "spread", "tiny", "subnormal", "huge", "ties")
    return DenseWeight(weight=np.stack([row(rng, k, kinds[i % 6]) for i in range(n)]).astype(BF16), name="w")


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize("mode", [0, 1])
def test_decode_arithmetic_reproduces_project(fmt: str, mode: int) -> None:
    """Block dots of the device weight values with the codes read from the prep's layout,
    (S · 2^(−1016|−896)) · 2^(1016|896) · 2^(E−14) rounded once, the chunk trees, the row
    scale: ``project``'s bits."""
    from metrale.cuda.fp8_bf16 import effective_bf16

    rng = np.random.default_rng(5 + mode)
    n, k = 5, 16 * 67
    w = _weight(rng, fmt, n, k)
    x = np.stack([row(rng, k, kind) for kind in ROW_KINDS])
    wv = (w.weight if fmt == "fp8" else effective_bf16(w.weight)).astype(np.float64).reshape(n, k // 16, 16)
    act, pe, c_n = _prep(x, mode)
    nb = k // 16
    out = np.zeros((x.shape[0], n), dtype=np.uint16)
    for r in range(x.shape[0]):
        codes = np.concatenate([_read_codes(act, mode, r, ch, c_n) for ch in range(c_n)])[:nb]
        p2 = (pe[r * c_n * 32 : r * c_n * 32 + nb].astype(np.int64) << 32).view(np.float64)
        with np.errstate(all="ignore"):
            vals = ((wv * codes[None]).sum(axis=2) * p2[None]).astype(F32)  # exact sums, one rounding
            roots = _decode_roots(vals, 4)
            if fmt == "fp8":
                roots = (roots * w.weight_scale).astype(F32)
        out[r] = to_bf16(roots).view(np.uint16)
    np.testing.assert_array_equal(out, project(x, w, "A16").view(np.uint16))
