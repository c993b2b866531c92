"""CPU replay of the FP8/BF16 integer tensor-core kernels: the K-split GEMM
(``kernels/fp8_bf16_gemv.cu``, ``{fp8,bf16}_mma_nt*``) and the prefill GEMM (``kernels/
fp8_bf16_mma.cu`` on ``mma_gemm.cuh``'s wide mode). The upload's fragment layout decodes back to
the contract's 24-bit codes and 2^(F−22), and the kernels' arithmetic -- 8-bit limb block dots,
H = 2^8 Q3 + Q2 and L = 2^8 Q1 + Q0 in int32, S = 2^16 H + L in float64, two power-of-two
multiplies, one rounding to f32, the 8-block step subtrees, the binary counter over steps and
(prefill GEMM) the split-K parts' counter -- reproduces ``project`` bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from metrale.cuda.fp8_bf16 import mma_fragments
from metrale.reference.activations import quantize_a16, weight_codes24
from metrale.reference.chain import project_chain
from metrale.reference.elements import to_bf16
from metrale.reference.formats import DenseWeight, Fp8Weight
from metrale.reference.projection import project
from tests.gpu.gen import BF16, E4M3, E4M3_FINITE, F32, row, rows

#: (N, K): 1, 3, 8, 9 and 67 blocks (steps padded with zero blocks, 1 to 9 steps).
SHAPES = [(5, 16), (17, 48), (16, 128), (33, 144), (7, 1072)]


def _weight(rng: np.random.Generator, fmt: str, n: int, k: int) -> Fp8Weight | DenseWeight:
    if fmt == "fp8":
        codes = rng.choice(E4M3_FINITE, (n, k))
        scale = np.exp2(rng.uniform(-12, 4, n)).astype(F32)
        return Fp8Weight(weight=codes.view(E4M3), weight_scale=scale, name="fp8")
    kinds = ("gauss", "spread", "tiny", "subnormal", "huge", "ties")
    w = np.stack([row(rng, k, kinds[i % len(kinds)]) for i in range(n)])
    return DenseWeight(weight=w.astype(BF16), name="bf16")


def _decode(frag: np.ndarray, n: int, nb: int) -> np.ndarray:
    """Fragments u32 [N16, Bp, 32, 6] -> codes int64 [N, B, 16] (the documented layout)."""
    n16, bp = frag.shape[:2]
    by = frag.view(np.uint8).reshape(n16, bp, 8, 4, 3, 2, 4)  # n16 b g t limb h byte
    limb = by.transpose(4, 0, 5, 2, 1, 3, 6).reshape(3, n16 * 16, bp, 16).astype(np.int64)
    codes = limb[0] + 256 * limb[1] + 65536 * limb[2].astype(np.uint8).view(np.int8).astype(np.int64)
    return codes[:n, :nb]


def _hiword_pow2(hi: np.ndarray) -> np.ndarray:
    """int32 high words of doubles (low words zero) -> float64."""
    return (hi.astype(np.int64) << 32).view(np.float64)


def _limbs(c: np.ndarray, count: int) -> list[np.ndarray]:
    """Integer codes -> ``count`` 8-bit limbs, the low ones u8, the top one s8."""
    ci = c.astype(np.int64)
    out = [(ci >> (8 * i)) & 0xFF for i in range(count)]
    out[-1] = out[-1].astype(np.uint8).view(np.int8).astype(np.int64)
    return out


def _counter(roots: list[np.ndarray]) -> np.ndarray:
    """The binary counter of aligned subtrees over ``roots`` (each the root of an equal aligned
    subtree, in K order) and its right-nested fold from the lowest level up: the padded tree."""
    slots: dict[int, np.ndarray] = {}
    for i, x_ in enumerate(roots):
        c, lvl = i, 0
        while c & 1:
            x_ = slots[lvl] + x_
            c >>= 1
            lvl += 1
        slots[lvl] = x_
    res = None
    for lvl in range(len(roots).bit_length()):
        if (len(roots) >> lvl) & 1:
            res = slots[lvl] if res is None else slots[lvl] + res
    assert res is not None
    return res


def _gemm_tree(v: np.ndarray, kp8: int) -> np.ndarray:
    """mma_gemm.cuh gemm_body + mma_finish over block values v [Bp, N, m] (f32): 8-leaf step
    subtrees, a counter over the steps of each part of kp8 steps, a counter over the parts."""
    steps = []
    for st in range(v.shape[0] // 8):
        q = v[8 * st : 8 * st + 8]
        steps.append(((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7])))
    parts = [_counter(steps[p : p + kp8]) for p in range(0, len(steps), kp8)]
    return _counter(parts)


def _gemm_chain(v: np.ndarray, kp8: int) -> np.ndarray:
    """The chain form (gemm_body CH, ``bf16c_mma_nt*``) over block values v [Bp, N, m] (f32):
    each 64-block part's values added in K order from −0.0, a counter over the parts of each K
    split of kp8 steps (a multiple of 8), a counter over the splits."""
    roots = []
    for p0 in range(0, v.shape[0], 64):
        c = np.full(v.shape[1:], -0.0, dtype=F32)
        for b in range(p0, min(p0 + 64, v.shape[0])):
            c = c + v[b]
        roots.append(c)
    per = max(1, kp8 // 8)  # kp8 < 8: one split holding all of K (one part)
    return _counter([_counter(roots[q : q + per]) for q in range(0, len(roots), per)])


def _replay(
    x: np.ndarray, w: Fp8Weight | DenseWeight, kp8: int | None = None, chain: bool = False
) -> np.ndarray:
    a = quantize_a16(x)
    frag, pw = mma_fragments(w.weight)
    n, k = w.weight.shape
    nb = k // 16
    wl = _limbs(_decode(frag, n, nb), 3)  # [N, B, 16] each
    al = _limbs(a.codes, 2)  # [m, B, 16] each

    def p(i: int, j: int) -> np.ndarray:  # limb block dot [B, N, m]
        return np.einsum("nbj,mbj->bnm", wl[i], al[j])

    hi = (p(2, 1) << 8) + p(2, 0) + p(1, 1)
    lo = ((p(1, 0) + p(0, 1)) << 8) + p(0, 0)
    assert np.abs(hi).max() < 2**31 and np.abs(lo).max() < 2**31
    s = hi.astype(np.float64) * 65536.0 + lo.astype(np.float64)
    pwb = _hiword_pow2(pw.transpose(0, 2, 1).reshape(-1, pw.shape[1])[:n, :nb].T[:, :, None])  # [B, N, 1]
    pa = np.where(a.finite, np.ldexp(1.0, a.exp - 14), np.nan).T[:, None, :]  # [B, 1, m]
    if kp8 is not None:  # the prefill GEMM's prologue: 2^(E-14) as the high word of a double
        pa = _hiword_pow2(np.where(a.finite, (a.exp - 14 + 1023) << 20, 0x7FF80000)).T[:, None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        v = ((s * pwb) * pa).astype(F32)
        bp = 8 * -(-nb // 8)
        v = np.concatenate([v, np.full((bp - nb, *v.shape[1:]), F32(-0.0), dtype=F32)])
        if kp8 is not None:
            root = (_gemm_chain(v, kp8) if chain else _gemm_tree(v, kp8)).T
            if isinstance(w, Fp8Weight):
                root = root * w.weight_scale[None, :]
            return to_bf16(root)
        slots: dict[int, np.ndarray] = {}
        for st in range(bp // 8):
            q = v[8 * st : 8 * st + 8]
            l1 = [q[0] + q[1], q[2] + q[3], q[4] + q[5], q[6] + q[7]]
            x_ = (l1[0] + l1[1]) + (l1[2] + l1[3])
            c, lvl = st, 0
            while c & 1:
                x_ = slots[lvl] + x_
                c >>= 1
                lvl += 1
            slots[lvl] = x_
        steps = bp // 8
        res = None
        for lvl in range(steps.bit_length()):
            if (steps >> lvl) & 1:
                res = slots[lvl] if res is None else slots[lvl] + res
        assert res is not None
        root = res.T  # [m, N]
        if isinstance(w, Fp8Weight):
            root = root * w.weight_scale[None, :]
    return to_bf16(root)


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_fragments_hold_the_24bit_codes(rng: np.random.Generator, fmt: str, n: int, k: int) -> None:
    w = _weight(rng, fmt, n, k)
    frag, pw = mma_fragments(w.weight)
    wb = weight_codes24(w.weight)
    assert np.array_equal(_decode(frag, n, k // 16), wb.codes.astype(np.int64))
    got_pw = _hiword_pow2(pw.transpose(0, 2, 1).reshape(-1, pw.shape[1])[:n, : k // 16])
    assert np.array_equal(got_pw, np.ldexp(1.0, wb.exp - 22))


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_limb_arithmetic_replays_the_reference(rng: np.random.Generator, fmt: str, n: int, k: int) -> None:
    w = _weight(rng, fmt, n, k)
    x = rows(rng, 11, k)
    want = project(x, w, "A16").view(np.uint16)
    got = _replay(x, w).view(np.uint16)
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {want.size} differ"


#: (N, K, kp8): one part (kp8 >= steps) and split K into aligned parts of 1, 2 and 4 steps, with
#: a last part shorter than the others (9 steps).
GEMM_CASES = [
    (5, 16, 1),
    (17, 48, 1),
    (16, 1024, 8),
    (16, 1024, 2),
    (33, 1072, 16),
    (33, 1072, 4),
    (7, 1072, 1),
]


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize(("n", "k", "kp8"), GEMM_CASES)
def test_prefill_gemm_order_replays_the_reference(
    rng: np.random.Generator, fmt: str, n: int, k: int, kp8: int
) -> None:
    """The prefill GEMM's activation factor (a double's high word), counter over steps and
    split-K parts."""
    w = _weight(rng, fmt, n, k)
    x = rows(rng, 13, k)
    want = project(x, w, "A16").view(np.uint16)
    got = _replay(x, w, kp8).view(np.uint16)
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {want.size} differ"


def test_prefill_gemm_replay_can_fail(rng: np.random.Generator) -> None:
    """A tree other than the contract's (a flat left-to-right sum of the step roots) differs
    from ``project`` on rows of spread magnitudes: the replay above tests the order."""
    w = _weight(rng, "bf16", 16, 1072)
    x = rows(rng, 13, 1072)
    want = project(x, w, "A16").view(np.uint16)
    a = quantize_a16(x)
    wb = weight_codes24(w.weight)
    s = np.einsum("nbj,mbj->bnm", wb.codes.astype(np.float64), a.codes.astype(np.float64))
    with np.errstate(over="ignore", invalid="ignore"):
        pa = np.where(a.finite, np.ldexp(1.0, a.exp - 14), np.nan).T[:, None, :]
        v = ((s * np.ldexp(1.0, wb.exp - 22).T[:, :, None]) * pa).astype(F32)
        flat = v[0]
        for b in range(1, v.shape[0]):
            flat = flat + v[b]
    assert not np.array_equal(to_bf16(flat.T).view(np.uint16), want)


#: (N, K, kp8) of the chain form: one part, two parts the last of 3 steps (B = 88), three parts
#: the last of one step and 7 padding blocks (B = 129); K split by whole parts (kp8 = 8, 16) or
#: not (kp8 at least the steps: the K-split ``bf16c_mma_nt*``, whose runs are the parts).
CHAIN_CASES = [(5, 16, 1), (16, 1024, 8), (17, 1408, 8), (17, 1408, 16), (9, 2064, 8), (9, 2064, 32)]


@pytest.mark.parametrize(("n", "k", "kp8"), CHAIN_CASES)
def test_chain_gemm_order_replays_the_chain(rng: np.random.Generator, n: int, k: int, kp8: int) -> None:
    """BF16 on the wide kernels' chain form: the same block values, chained per part, the
    counter over parts and K splits: ``project_chain``'s bits."""
    w = _weight(rng, "bf16", n, k)
    x = rows(rng, 13, k)
    want = project_chain(x, w, "A16").view(np.uint16)
    got = _replay(x, w, kp8, chain=True).view(np.uint16)
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {want.size} differ"


def test_chain_replay_tells_the_chain_from_the_tree() -> None:
    """A named case the two orders round apart: block values 1, 2^−24, 2^−24, −1 (weight element
    0 of blocks 0..3, activation 1.0 there): the chain gives 1, 1, 1, 0; the tree (1 + 2^−24) +
    (2^−24 − 1) = 2^−24. The replay's chain form gives project_chain's bits, its tree form not."""
    w = np.zeros((1, 128), dtype=np.float64)
    w[0, [0, 16, 32, 48]] = [1.0, 2.0**-24, 2.0**-24, -1.0]
    x = np.zeros((1, 128), dtype=np.float64)
    x[0, ::16] = 1.0
    wd = DenseWeight(weight=w.astype(BF16), name="bf16")
    xb = x.astype(BF16)
    want = project_chain(xb, wd, "A16").view(np.uint16)
    assert want[0, 0] in (0x0000, 0x8000)
    assert np.array_equal(_replay(xb, wd, 1, chain=True).view(np.uint16), want)
    assert _replay(xb, wd, 1).view(np.uint16)[0, 0] == to_bf16(np.float32(2.0**-24)).view(np.uint16)
