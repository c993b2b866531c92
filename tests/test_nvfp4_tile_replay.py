"""CPU replay of the tiled NVFP4 × A16 (and A4, and Q2_0 × A16) GEMM's arithmetic (``kernels/nvfp4_tile.cu``,
arithmetic.md § kernel-notes "Scaled A16 operands"): the prologue's slow-row rule and its scaled
bf16 operand, the block dot as the f32 accumulator of scaled products, one multiply per block
value (the slow epilogue's two), the contract's tree, and the output -- bit for bit against
``project``. Beside it, the window argument itself: inside −102 ≤ E ≤ 110 the one-multiply value
equals the contract's two-multiply value for every e4m3 scale and block dots at the bounds, and
past the window it does not (so the rule has a reason and the test can fail); the same for
Q2_0's window −88 ≤ E ≤ 105 and every finite f16 d."""

from __future__ import annotations

import numpy as np
import pytest

from metrale.cuda import tile
from metrale.reference.activations import quantize_a4, quantize_a16
from metrale.reference.elements import E2M1_CODE2, to_bf16
from metrale.reference.formats import Nvfp4Weight, Q2_0Weight
from metrale.reference.projection import project
from metrale.reference.tree import tree_sum
from tests.gpu.gen import BF16, E4M3, E4M3_FINITE, F32, nvfp4, q2_0, row, rows

#: The window of block exponents the fast epilogue takes (nvfp4_tile.cu w4a16b_prep).
E_LO, E_HI = -102, 110
#: The largest |S_b| of NVFP4 × A16: 16 elements, |2·e2m1| ≤ 12, |c| ≤ 32640.
S_MAX = 16 * 12 * 32640
E4M3_F32 = E4M3_FINITE.view(E4M3).astype(F32)


def _p2(e: np.ndarray) -> np.ndarray:
    """2^e as f32 (e ≥ −149), as the reference forms it."""
    return np.ldexp(np.float64(1.0), e).astype(F32)


def contract_v(s: np.ndarray, ws: np.ndarray, e: np.ndarray) -> np.ndarray:
    """(f32(S) · f32(wscale)) · 2^(E−15), each an f32 RNE multiply (§ projection)."""
    return (s.astype(F32) * ws.astype(F32)) * _p2(e - 15)


def one_multiply_v(s: np.ndarray, ws: np.ndarray, e: np.ndarray) -> np.ndarray:
    """P · f32(wscale), P = S · 2^(E−15) formed exactly (float64), then held as f32."""
    p = np.ldexp(s.astype(np.float64), e - 15)
    return p.astype(F32) * ws.astype(F32)


def _dots() -> np.ndarray:
    """Block dots at the bounds and between: ±1, ±(2^k ± 1), the largest, odd values."""
    k = np.arange(1, 23)
    mags = np.concatenate([[1, 3, 5, 7, S_MAX, S_MAX - 1], 2**k - 1, 2**k + 1, (2**k) * 3 + 1])
    mags = mags[(mags >= 1) & (mags <= S_MAX)]
    return np.concatenate([mags, -mags]).astype(np.int64)


def test_one_multiply_equals_the_contract_inside_the_window() -> None:
    """Every finite e4m3 scale (±0, subnormals, 448), dots at the bounds, every E of the window."""
    s = _dots()[:, None]
    ws = E4M3_F32[None, :]
    for e in range(E_LO, E_HI + 1):
        p = np.ldexp(s.astype(np.float64), e - 15)
        assert np.array_equal(p.astype(F32).astype(np.float64), p), f"E={e}: P is not an exact f32"
        want = contract_v(s, ws, np.int64(e)).view(np.uint32)
        got = one_multiply_v(s, ws, np.int64(e)).view(np.uint32)
        bad = np.argwhere(got != want)
        assert bad.size == 0, f"E={e}: S={s[bad[0][0], 0]} ws={ws[0, bad[0][1]]}"


def test_past_the_window_the_one_multiply_breaks() -> None:
    """The window's top is needed: past it P = S · 2^(E−15) overflows f32 before the scale can
    bring it back, and the one-multiply value leaves the contract's."""
    s = _dots()[:, None]
    ws = E4M3_F32[None, :]
    with np.errstate(all="ignore"):
        differ = [
            e
            for e in range(E_HI + 1, 128)
            if not np.array_equal(
                contract_v(s, ws, np.int64(e)).view(np.uint32),
                one_multiply_v(s, ws, np.int64(e)).view(np.uint32),
            )
        ]
    assert differ, "no E past the window where the sequences differ"


def test_the_operand_stays_normal_inside_the_window() -> None:
    """The lower bound keeps the tensor core's inputs and accumulator normal (what the device
    check covers): the smallest nonzero operand c · 2^(E−15) and the smallest nonzero |P| are
    normal from E = −102, and the smallest nonzero |S · wscale| · 2^(E−15) is too."""
    tiny_ws = float(np.min(np.abs(E4M3_F32[E4M3_F32 != 0])))
    for e in (E_LO, E_HI):
        assert 2.0 ** (e - 15) >= 2.0**-126
        assert tiny_ws * 2.0 ** (e - 15) >= 2.0**-126
        assert S_MAX * 448 * 2.0 ** (e - 15) < 2.0**128
    assert tiny_ws * 2.0 ** (E_LO - 1 - 15) < 2.0**-126  # one lower and a block value may be subnormal


def replay_prep(
    x: np.ndarray, window: tuple[int, int] = (E_LO, E_HI)
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """w4a16b_prep: (operand f64 [m, B, 16], factor f32 [m, B], slow bool [m], finite [m, B])."""
    a = quantize_a16(x)
    c, e, fin = a.codes, a.exp.astype(np.int64), a.finite
    nonzero = np.any(c != 0, axis=2)
    in_window = fin & (~nonzero | ((e >= window[0]) & (e <= window[1])))
    slow = ~np.all(in_window, axis=1)
    p = np.ldexp(np.float64(1.0), e - 15)
    op = np.where(slow[:, None, None], c, c * p[:, :, None])
    fac = np.where(slow[:, None], np.where(fin, p, np.nan), 1.0).astype(F32)
    return op, fac, slow, fin


def replay_gemm(
    op: np.ndarray,
    fac: np.ndarray,
    slow: np.ndarray,
    wc: np.ndarray,
    scale: np.ndarray,
    rowscale: np.float32,
    tile_rows: int,
    operand: str = "operand",
    exact_rows: np.ndarray | None = None,
) -> np.ndarray:
    """The tiled GEMM on prepared operands ``op`` f64 [m, B, 16] and weight codes ``wc`` f64
    [N, B, 16]: per CTA tile, P (asserted an exact f32 on ``exact_rows``, default the fast ones),
    v = P · scale [N, B] (· factor in a tile holding a slow row), the tree, bf16(root · rowscale)."""
    m = op.shape[0]
    exact_rows = ~slow if exact_rows is None else exact_rows
    out = np.empty((m, wc.shape[0]), dtype=np.uint16)
    for r0 in range(0, m, tile_rows):
        r1 = min(m, r0 + tile_rows)
        ob = op[r0:r1].astype(BF16).astype(np.float64)
        assert np.array_equal(ob, op[r0:r1]), f"the {operand} is not an exact bf16"
        p64 = np.einsum("nbj,mbj->mnb", wc, ob)  # [m, N, B], exact in float64
        p = p64.astype(F32)
        rows_ = exact_rows[r0:r1]
        assert np.array_equal(p[rows_].astype(np.float64), p64[rows_]), "P is not an exact f32"
        v = p * scale[None, :, :]
        if slow[r0:r1].any():
            v = v * fac[r0:r1, None, :]
        out[r0:r1] = to_bf16(tree_sum(v, axis=2) * rowscale).view(np.uint16)
    return out


def nvfp4_weight(w: Nvfp4Weight, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """The weight codes 2·e2m1 f64 [N, B, 16] and the e4m3 scales f32 [N, B]."""
    wc = E2M1_CODE2[w.nibbles()].astype(np.float64).reshape(w.weight.shape[0], nb, 16)
    return wc, w.weight_scale.view(np.uint8).view(E4M3).astype(F32)


def replay_tile(x: np.ndarray, w: Nvfp4Weight, tile_rows: int = 64) -> np.ndarray:
    """The tiled GEMM's outputs (bf16 bits [m, N]) by its arithmetic: a CTA tile holding a slow
    row runs (P · ws) · factor for all its rows, the others P · ws."""
    op, fac, slow, _ = replay_prep(x)
    nb = op.shape[1]
    wc, ws = nvfp4_weight(w, nb)
    return replay_gemm(op, fac, slow, wc, ws, F32(w.weight_scale_2), tile_rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replay_matches_project(seed: int) -> None:
    """Fast tiles, slow tiles (edge rows: NaN/Inf, subnormals, huge, tiny, spread), window edges."""
    rng = np.random.default_rng(seed)
    n, k = 21, 512
    w = nvfp4(rng, n, k)
    edge = rows(rng, 40, k)
    b = k // 16
    e = rng.choice(np.array([E_LO, E_LO + 1, -30, 0, 30, E_HI - 1, E_HI]), (70, b, 1))
    mant = 1.0 + rng.integers(0, 128, (70, b, 16)) / 128
    drop = rng.integers(0, 16, (70, b, 16))
    drop[:, :, 0] = 0
    sign = np.where(rng.random((70, b, 16)) < 0.5, -1.0, 1.0)
    win = (sign * np.ldexp(mant, (e - drop).astype(np.int64))).reshape(70, k).astype(F32).astype(BF16)
    x = np.concatenate([win, edge])  # rows 0..63 one fast tile, the rest mixed
    with np.errstate(all="ignore"):
        want = project(x, w, "A16").view(np.uint16)
        got = replay_tile(x, w)
    assert np.array_equal(got, want)
    _, _, slow, _ = replay_prep(x)
    assert not slow[:64].any() and slow[64:].any()  # both epilogues were replayed


def test_slow_rule_names_each_edge_kind() -> None:
    """Gaussian rows are fast; a block of subnormals, huge values or NaN/Inf makes its row slow."""
    rng = np.random.default_rng(3)
    k = 256
    kinds = {"gauss": False, "subnormal": True, "specials": True, "tiny": True, "zeros": False}
    x = np.stack([row(rng, k, kind) for kind in kinds])
    _, _, slow, _ = replay_prep(x)
    assert slow.tolist() == list(kinds.values())


def replay_tile_a4(x: np.ndarray, w: Nvfp4Weight, tile_rows: int = 64) -> np.ndarray:
    """w4a4b_prep and the tiled GEMM on A4 codes: operand code · (ascale / 4) (slow rows: the
    code, factor ascale / 4 or NaN), v = P · ws (· factor in a tile holding a slow row)."""
    a = quantize_a4(x, w.input_scale)
    m, k = a.codes.shape
    nb = k // 16
    code = a.codes.reshape(m, nb, 16).astype(np.float64)
    f = np.where(a.finite, a.scales.astype(F32).astype(np.float64), np.nan) / 4
    slow = ~np.all(a.finite, axis=1)
    op = np.where(slow[:, None, None], code, code * np.nan_to_num(f)[:, :, None])
    fac = np.where(slow[:, None], f, 1.0).astype(F32)
    wc, ws = nvfp4_weight(w, nb)
    rowscale = F32(F32(w.input_scale) * F32(w.weight_scale_2))
    every = np.ones(m, dtype=bool)
    return replay_gemm(op, fac, slow, wc, ws, rowscale, tile_rows, "A4 operand", every)


@pytest.mark.parametrize("seed", [0, 1])
def test_replay_a4_matches_project(seed: int) -> None:
    """A4 has no window: every finite row is fast, a non-finite block makes its row slow."""
    rng = np.random.default_rng(seed)
    n, k = 19, 512
    w = nvfp4(rng, n, k)
    x = np.concatenate([rows(rng, 64, k, finite=True), rows(rng, 40, k)])
    with np.errstate(all="ignore"):
        want = project(x, w, "A4").view(np.uint16)
        got = replay_tile_a4(x, w)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", [0, 1])
def test_a4_block_values_are_exact_so_level_one_is_one_fma(seed: int) -> None:
    """w4a4w_gemm_f{NF} (nvfp4_wgmma.cu, A4) forms the tree's level 1 as fma(P, ws, v_2i) (a slow
    row: fma(P · ws, factor, v_2i)): one rounding of the exact product plus v_2i, which is the
    contract's RNE(v_2i + v_2i+1) exactly when every block value v = P · ws (· factor) is an
    exact f32, with no rounding in the multiplies. Checked in float64 on every block of finite
    and edge rows, all e4m3 weight scales among them."""
    rng = np.random.default_rng(seed)
    n, k = 23, 512
    w = nvfp4(rng, n, k)
    nb = k // 16
    scales = w.weight_scale.view(np.uint8).copy()
    codes = np.arange(256, dtype=np.uint8)
    codes = codes[np.isfinite(codes.view(E4M3).astype(F32)) & (codes < 0x80)]  # every finite positive code
    scales.reshape(-1)[: codes.size] = codes
    w = Nvfp4Weight(w.weight, scales.view(E4M3), w.weight_scale_2, w.input_scale, w.name)
    x = np.concatenate([rows(rng, 48, k, finite=True), rows(rng, 40, k)])
    a = quantize_a4(x, w.input_scale)
    code = a.codes.reshape(len(x), nb, 16).astype(np.float64)
    f = np.where(a.finite, a.scales.astype(F32).astype(np.float64), np.nan) / 4
    slow = ~np.all(a.finite, axis=1)
    op = np.where(slow[:, None, None], code, code * np.nan_to_num(f)[:, :, None])
    wc, ws = nvfp4_weight(w, nb)
    p64 = np.einsum("nbj,mbj->mnb", wc, op)  # exact
    v64 = p64 * ws.astype(np.float64)[None, :, :]
    v64 = np.where(slow[:, None, None], v64 * f[:, None, :], v64)
    finite = np.isfinite(v64)
    assert finite.sum() > 0.9 * v64.size and (~finite).any()  # both kinds of rows were formed
    assert np.array_equal(v64[finite].astype(F32).astype(np.float64), v64[finite]), "a block value rounds"
    nz = np.abs(v64[finite & (v64 != 0)])
    assert nz.min() >= np.finfo(F32).tiny  # normal: the fma's product is never subnormal


# ---- Q2_0 × A16: operand c · 2^(E−15) against 2·(q − 1), v = P · f32(d) ----

#: Q2_0's window (arithmetic.md § kernel-notes): |S · d| ∈ [2^−24, 2^36) for nonzero S, d.
Q2_LO, Q2_HI = -88, 105
#: The largest |S_b| of Q2_0 × A16: 16 elements, |q − 1| ≤ 2, |c| ≤ 32640.
Q2_S_MAX = 16 * 2 * 32640
#: Every finite f16 (±0, subnormals, ±65504).
F16_FINITE = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
F16_FINITE = F16_FINITE[np.isfinite(F16_FINITE)].astype(F32)


def q2_dots() -> np.ndarray:
    k = np.arange(1, 20)
    mags = np.concatenate([[1, 3, 5, 7, Q2_S_MAX, Q2_S_MAX - 1], 2**k - 1, 2**k + 1, (2**k) * 3 + 1])
    mags = mags[(mags >= 1) & (mags <= Q2_S_MAX)]
    return np.concatenate([mags, -mags]).astype(np.int64)


def q2_contract_v(s: np.ndarray, d: np.ndarray, e: int) -> np.ndarray:
    """(f32(S) · f32(d)) · 2^(E−14), each an f32 RNE multiply (§ projection)."""
    return (s.astype(F32) * d) * _p2(np.int64(e - 14))


def q2_one_multiply_v(s: np.ndarray, d: np.ndarray, e: int) -> np.ndarray:
    """P · f32(d), P = 2·S · 2^(E−15) formed exactly (float64), then held as f32."""
    return np.ldexp((2 * s).astype(np.float64), e - 15).astype(F32) * d


def test_q2_window_is_the_kernels() -> None:
    """The window argued here is the one the launcher gives the prologue."""
    assert (tile.Q2_0.e_lo, tile.Q2_0.e_hi) == (Q2_LO, Q2_HI)
    assert (tile.NVFP4.e_lo, tile.NVFP4.e_hi) == (E_LO, E_HI)


def test_q2_one_multiply_equals_the_contract_inside_the_window() -> None:
    """Every finite f16 d at the window's edges and the middle, a spread of d at every other E."""
    s = q2_dots()[:, None]
    every, some = F16_FINITE[None, :], F16_FINITE[None, ::97]
    for e in range(Q2_LO, Q2_HI + 1):
        d = every if e in (Q2_LO, Q2_LO + 1, 0, Q2_HI - 1, Q2_HI) else some
        p = np.ldexp((2 * s).astype(np.float64), e - 15)
        assert np.array_equal(p.astype(F32).astype(np.float64), p), f"E={e}: P is not an exact f32"
        want = q2_contract_v(s, d, e).view(np.uint32)
        got = q2_one_multiply_v(s, d, e).view(np.uint32)
        bad = np.argwhere(got != want)
        assert bad.size == 0, f"E={e}: S={s[bad[0][0], 0]} d={d[0, bad[0][1]]}"


def test_q2_past_the_window_the_one_multiply_breaks() -> None:
    """Past the top, P overflows f32 where the contract's value stays finite."""
    s = q2_dots()[:, None]
    with np.errstate(all="ignore"):
        differ = [
            e
            for e in range(Q2_HI + 1, 128)
            if not np.array_equal(
                q2_contract_v(s, F16_FINITE[None, :], e).view(np.uint32),
                q2_one_multiply_v(s, F16_FINITE[None, :], e).view(np.uint32),
            )
        ]
    assert differ, "no E past the window where the sequences differ"


def test_q2_operand_and_values_stay_normal_inside_the_window() -> None:
    """The operand c · 2^(E−15) is normal from E = −111; the smallest nonzero |S · d| · 2^(E−14)
    (S = 1, d = 2^−24) is normal from E = −88 and the largest finite up to E = 105."""
    tiny_d = float(np.min(np.abs(F16_FINITE[F16_FINITE != 0])))
    assert tiny_d == 2.0**-24
    assert 2.0 ** (Q2_LO - 15) >= 2.0**-126
    assert tiny_d * 2.0 ** (Q2_LO - 14) >= 2.0**-126 > tiny_d * 2.0 ** (Q2_LO - 1 - 14)
    assert Q2_S_MAX * 65504.0 * 2.0 ** (Q2_HI - 14) < 2.0**127


def replay_tile_q2(x: np.ndarray, w: Q2_0Weight, tile_rows: int = 32) -> np.ndarray:
    """q2a16b_gemm: operand and factors of w4a16b_prep with Q2_0's window against 2·(q − 1);
    v = P · f32(d) (· factor in a tile holding a slow row); y = bf16(root)."""
    op, fac, slow, _ = replay_prep(x, (Q2_LO, Q2_HI))
    nb = op.shape[1]
    wc = (2.0 * (w.q().astype(np.float64) - 1.0)).reshape(w.n, nb, 16)
    d = np.repeat(w.d().astype(F32), 4, axis=1)  # [N, B]: one d per 4 blocks
    return replay_gemm(op, fac, slow, wc, d, F32(1.0), tile_rows)


@pytest.mark.parametrize("seed", [0, 1])
def test_replay_q2_matches_project(seed: int) -> None:
    """Fast tiles at the window's edges, slow tiles (edge rows and blocks just past the window)."""
    rng = np.random.default_rng(seed)
    n, k = 17, 512
    w = q2_0(rng, n, k)
    b = k // 16

    def block_rows(count: int, exps: np.ndarray) -> np.ndarray:
        """Rows whose block b has largest exponent exps[..., b] (the others up to 15 below)."""
        drop = rng.integers(0, 16, (count, b, 16))
        drop[:, :, 0] = 0
        mant = 1.0 + rng.integers(0, 128, (count, b, 16)) / 128
        sign = np.where(rng.random((count, b, 16)) < 0.5, -1.0, 1.0)
        return (sign * np.ldexp(mant, (exps - drop).astype(np.int64))).reshape(count, k)

    win = block_rows(32, rng.choice(np.array([Q2_LO, Q2_LO + 1, 0, Q2_HI - 1, Q2_HI]), (32, b, 1)))
    edge_e = np.zeros((4, b, 1), dtype=np.int64)
    edge_e[:, 3, 0] = [Q2_LO - 1, Q2_HI + 1, -100, 120]  # one block past the window: a slow row
    past = block_rows(4, edge_e)
    x = np.concatenate([win, past, rows(rng, 28, k)]).astype(F32).astype(BF16)
    with np.errstate(all="ignore"):
        want = project(x, w, "A16").view(np.uint16)
        got = replay_tile_q2(x, w)
    assert np.array_equal(got, want)
    _, _, slow, _ = replay_prep(x, (Q2_LO, Q2_HI))
    assert not slow[:32].any() and slow[32:36].all()  # both epilogues were replayed
