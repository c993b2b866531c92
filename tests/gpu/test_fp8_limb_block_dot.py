"""Does the f16 MMA form the revision's FP8 × A16 block values exactly (docs/chain-revision.md,
"FP8's weight codes")? Weights are the rounded e4m3 values (``chain.fp8_effective``), turned
into f16 pairs by ``cvt.rn.f16x2.e4m3x2``; the A16 codes c = 2^8·a1 + a0 go in as two f16
limbs (a0 in 0..255, a1 in −128..127); two ``mma.sync.m16n8k16.f32.f16.f16.f32`` give the limb
dots D_0, D_1 (multiples of 2^(F−10) below 2^(F+13): exact in f32), and
``v = fma(D_1, 2^(E−6), D_0 · 2^(E−14))`` must be the revision's f32(S_b · 2^(E+F−24)), one
rounding, for every E in the fast window −119 ≤ E ≤ 120. Also: zero sums give +0.0 (products of
−0 included). The k order is the tile's: lane t's word t of a block (elements 4t .. 4t+3) fills
k slots 2t, 2t+1 (first two) and 2t+8, 2t+9 (last two), and the activation limbs follow it."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import oracle
import pytest

cp = pytest.importorskip("cupy")

from metrale.reference.chain import fp8_effective  # noqa: E402

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)

_SRC = r"""
extern "C" __global__ void fp8_limb_values(const unsigned int* __restrict__ W,
                                           const unsigned short* __restrict__ X,
                                           const float* __restrict__ fac, float* __restrict__ V, int tiles) {
    // tile i: W[i] 16 weight rows x 4 words (16 e4m3), X[i] 2 limbs x 8 rows x 16 f16 in the
    // permuted k order, fac[i] 8 rows (2^(E - 14)), V[i] 16 x 8
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= tiles) return;
    const int g = lane >> 2, t = lane & 3;
    const unsigned int* w = W + (size_t)warp * 64;
    auto cvt = [](unsigned short h) {
        unsigned int r;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(h));
        return r;
    };
    const unsigned int w0 = w[g * 4 + t], w1 = w[(g + 8) * 4 + t];
    const unsigned int a0 = cvt(w0 & 0xFFFF), a1 = cvt(w1 & 0xFFFF), a2 = cvt(w0 >> 16), a3 = cvt(w1 >> 16);
    float d[2][4];
    for (int l = 0; l < 2; ++l) {
        const unsigned short* x = X + ((size_t)warp * 2 + l) * 128;
        auto pair = [](const unsigned short* p) { return (unsigned)p[0] | ((unsigned)p[1] << 16); };
        const unsigned b0 = pair(x + g * 16 + 2 * t), b1 = pair(x + g * 16 + 2 * t + 8);
        d[l][0] = d[l][1] = d[l][2] = d[l][3] = 0.0f;
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[l][0]), "+f"(d[l][1]), "+f"(d[l][2]), "+f"(d[l][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float* o = V + (size_t)warp * 128;
    for (int j = 0; j < 4; ++j) {
        const int row = g + 8 * (j >> 1), col = 2 * t + (j & 1);
        const float f = fac[warp * 8 + col];
        o[row * 8 + col] = __fmaf_rn(d[1][j], f * 256.0f, __fmul_rn(d[0][j], f));
    }
}
"""

#: k slot p of a block holds element PERM[p]: slots 2t, 2t+1 elements 4t, 4t+1; 2t+8, 2t+9: 4t+2, 4t+3
PERM = np.array([4 * ((p & 7) >> 1) + (p & 1) + 2 * (p >> 3) for p in range(16)])


def _device(w: np.ndarray, codes: np.ndarray, e: np.ndarray) -> np.ndarray:
    """f32 V [tiles, 16, 8] for e4m3 w [tiles, 16, 16], A16 codes [tiles, 8, 16], E [tiles, 8]."""
    from metrale.cuda import runtime

    # the kernels' NVRTC options (CuPy's RawModule(code=...) would flush subnormals to zero)
    cubin = runtime.compile_text("fp8_limb_values.cu", _SRC, "sm_90")
    fn = cp.RawModule(path=str(cubin)).get_function("fp8_limb_values")
    tiles = w.shape[0]
    c = codes.astype(np.int64)[:, :, PERM]
    limbs = np.stack([c & 255, c >> 8], axis=1).astype(np.float16)  # [tiles, 2, 8, 16]
    fac = np.ldexp(np.float32(1), e - 14).astype(np.float32)
    v = cp.empty((tiles, 16, 8), dtype=cp.float32)
    wd = cp.asarray(np.ascontiguousarray(w).view(np.uint32))
    args = (wd, cp.asarray(limbs.view(np.uint16)), cp.asarray(fac))
    fn(((tiles * 32 + 255) // 256,), (256,), (*args, v, np.int32(tiles)))
    return v.get()


def _check(w: np.ndarray, codes: np.ndarray, e: np.ndarray, what: str) -> None:
    """Against the oracle's 11-bit codes: S exact in int64, S · 2^(E+F−24) exact in float64, one
    rounding to f32."""
    wc, f = oracle.codes24(w.reshape(-1, 16), 10)  # [tiles·16, 1, 16], F [tiles·16, 1]
    s = np.einsum("tik,tjk->tij", wc.reshape(-1, 16, 16).astype(np.int64), codes.astype(np.int64))
    with np.errstate(over="ignore"):  # E = 120: the largest sums overflow to Inf both ways
        want = np.ldexp(s.astype(np.float64), f.reshape(-1, 16, 1) + e[:, None, :] - 24).astype(np.float32)
    got = _device(fp8_effective(w.reshape(-1, 16)).reshape(w.shape), codes, e)
    bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (
        f"{what}: {len(bad)} of {got.size} block values differ; first at {tuple(bad[0])}: got "
        f"{got[tuple(bad[0])]!r}, want {want[tuple(bad[0])]!r}"
    )


def _random_e4m3(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    b = rng.integers(0, 256, shape, dtype=np.uint8)
    b[(b & 0x7F) == 0x7F] = 0  # no NaN
    return b.view(E4M3)


def test_random_blocks_every_exponent(fresh_rng: np.random.Generator) -> None:
    """Random e4m3 blocks (every spread), random A16 codes, E over the whole fast window."""
    tiles = 1024
    w = _random_e4m3(fresh_rng, (tiles, 16, 16))
    codes = fresh_rng.integers(-32640, 32641, (tiles, 8, 16))
    e = fresh_rng.integers(-119, 121, (tiles, 8))
    _check(w, codes, e, "random blocks")


def test_window_edges_and_bounds(fresh_rng: np.random.Generator) -> None:
    """The largest sums (448 against ±32640), E at −119 (subnormal results) and 120 (near
    overflow), cancellations down to the 2^(F−10) grid."""
    tiles = 8
    w = np.zeros((tiles, 16, 16), dtype=E4M3)
    codes = np.zeros((tiles, 8, 16), dtype=np.int64)
    w[0], codes[0] = 448.0, 32640
    w[1], codes[1] = -448.0, 32640
    w[2, :, 0], w[2, :, 1:], codes[2] = 448.0, 2.0**-9, 32640  # the tiny ones rounded to the grid
    w[3, :, 0::2], w[3, :, 1::2] = 448.0, -448.0
    codes[3] = fresh_rng.choice([32640, -32640, 255, -256], (8, 16))
    w[4] = fresh_rng.choice(np.array([448.0, 0.25, -0.5, 3.5], dtype=E4M3), (16, 16))
    codes[4] = fresh_rng.integers(-32640, 32641, (8, 16))
    w[5:], codes[5:] = _random_e4m3(fresh_rng, (3, 16, 16)), fresh_rng.integers(-32640, 32641, (3, 8, 16))
    for edge in (-119, -118, -100, 0, 100, 119, 120):
        _check(w, codes, np.full((tiles, 8), edge), f"E = {edge}")


def test_zero_sums_are_plus_zero() -> None:
    """S_b = 0 must give +0.0: weights +0 against negative high limbs (every product −0), −0
    weights (0x80) against positive codes, and exact cancellation."""
    w = np.zeros((3, 16, 16), dtype=E4M3)
    codes = np.zeros((3, 8, 16), dtype=np.int64)
    codes[0] = -256  # limbs (0, −1): +0 · 0 and +0 · −1, every product −0 or +0 · +0
    w[1] = -0.0
    codes[1] = 32640
    w[2, :, :8], w[2, :, 8:], codes[2] = 2.0, -2.0, 4096
    got = _device(fp8_effective(w.reshape(-1, 16)).reshape(w.shape), codes, np.zeros((3, 8), np.int64))
    assert (got.view(np.uint32) == 0).all(), f"zero sums: bits {np.unique(got.view(np.uint32))}"
