"""Does the f16 MMA form NVFP4 × A16 block dots exactly? ``mma.sync.m16n8k16.f32.f16.f16.f32``
with the weight codes 2·e2m1 and the A16 codes as f16 (both exact, tests/test_f16_block_dot.py):
every product is an integer exact in f32 and every partial sum of a block an integer below
2^23, so an accumulator that keeps 24 bits below its largest addend gives f32(S_b) exactly. This
checks the device keeps those bits (sums at the bound, cancellations, one large product beside
unit ones) and gives +0.0 for a zero sum: what nvfp4_mma.cu's w4a16h kernels rely on."""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from metrale.reference.activations import quantize_a16  # noqa: E402
from metrale.reference.elements import E2M1_CODE2  # noqa: E402

_SRC = r"""
extern "C" __global__ void f16_block_dots(const unsigned short* __restrict__ W,
                                          const unsigned short* __restrict__ X, float* __restrict__ D,
                                          int tiles) {
    // tile i: W[i] 16 weight rows x 16 k (row-major), X[i] 8 activation rows x 16 k, D[i] 16 x 8
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= tiles) return;
    const int g = lane >> 2, t = lane & 3;
    const unsigned short* w = W + (size_t)warp * 256;
    const unsigned short* x = X + (size_t)warp * 128;
    auto pair = [](const unsigned short* p) { return (unsigned)p[0] | ((unsigned)p[1] << 16); };
    const unsigned a0 = pair(w + g * 16 + 2 * t), a1 = pair(w + (g + 8) * 16 + 2 * t);
    const unsigned a2 = pair(w + g * 16 + 2 * t + 8), a3 = pair(w + (g + 8) * 16 + 2 * t + 8);
    const unsigned b0 = pair(x + g * 16 + 2 * t), b1 = pair(x + g * 16 + 2 * t + 8);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    float* o = D + (size_t)warp * 128;
    o[g * 8 + 2 * t] = d0;
    o[g * 8 + 2 * t + 1] = d1;
    o[(g + 8) * 8 + 2 * t] = d2;
    o[(g + 8) * 8 + 2 * t + 1] = d3;
}
"""


def _dots(nibbles: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The device's f32 D [tiles, 16, 8] for nibbles [tiles, 16, 16] and codes [tiles, 8, 16]."""
    fn = cp.RawModule(code=_SRC, options=("-std=c++17",)).get_function("f16_block_dots")
    tiles = nibbles.shape[0]
    w = cp.asarray(E2M1_CODE2[nibbles].astype(np.float16).view(np.uint16))
    x = cp.asarray(codes.astype(np.float16).view(np.uint16))
    d = cp.empty((tiles, 16, 8), dtype=cp.float32)
    fn(((tiles * 32 + 255) // 256,), (256,), (w, x, d, np.int32(tiles)))
    return d.get()


def _check(nibbles: np.ndarray, codes: np.ndarray, what: str) -> None:
    s = np.einsum("tik,tjk->tij", E2M1_CODE2[nibbles].astype(np.int64), codes.astype(np.int64))
    want = s.astype(np.float32)  # exact: |s| < 2^23
    assert np.array_equal(want.astype(np.int64), s)
    got = _dots(nibbles, codes)
    bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (
        f"{what}: {len(bad)} of {got.size} block dots differ; first at {tuple(bad[0])}: got "
        f"{got[tuple(bad[0])]!r} ({got.view(np.uint32)[tuple(bad[0])]:#010x}), want {want[tuple(bad[0])]!r}"
    )


def test_random_blocks_from_a16(fresh_rng: np.random.Generator) -> None:
    tiles = 512
    nib = fresh_rng.integers(0, 16, (tiles, 16, 16))
    x = fresh_rng.standard_normal((tiles * 8, 16)) * np.exp2(fresh_rng.integers(-20, 20, (tiles * 8, 1)))
    import ml_dtypes

    codes = quantize_a16(x.astype(np.float32).astype(ml_dtypes.bfloat16)).codes.reshape(tiles, 8, 16)
    _check(nib, codes, "random A16 blocks")


def test_sums_at_the_bound_and_cancellations(fresh_rng: np.random.Generator) -> None:
    tiles = 6
    nib = np.zeros((tiles, 16, 16), dtype=np.int64)
    codes = np.zeros((tiles, 8, 16), dtype=np.int64)
    twelve, minus_twelve, one, minus_one = 7, 15, 1, 9  # nibbles of 2·e2m1 = 12, -12, 1, -1
    nib[0] = twelve  # 16 · 12 · 32640, the largest sum
    codes[0] = 32640
    nib[1] = minus_twelve  # the most negative sum
    codes[1] = 32640
    nib[2, :, 0], nib[2, :, 1:] = twelve, one  # 12 · 32640 + 15 unit products: the low bits
    codes[2, :, 0], codes[2, :, 1:] = 32640, 1
    nib[3, :, 0::2], nib[3, :, 1::2] = twelve, minus_twelve  # exact cancellation, then + 1
    codes[3] = 32640
    nib[3, :, 15], codes[3, :, 15] = one, 1
    nib[4, :, 0], nib[4, :, 1], nib[4, :, 2:] = twelve, minus_twelve, minus_one  # large pair, small rest
    codes[4, :, :2], codes[4, :, 2:] = 32640, 255
    nib[5] = fresh_rng.choice([twelve, minus_twelve], (16, 16))  # random signs at the largest terms
    codes[5] = fresh_rng.choice([32640, -32640, 32512, -128], (8, 16))
    _check(nib, codes, "bounds and cancellations")


def test_zero_sums_are_plus_zero() -> None:
    """S_b = 0 must be +0.0 (the contract's f32(0)) with the accumulator starting at +0.0: every
    product -0 (negative weights against zero codes, as padding rows give), +0 products (zero
    codes, and the -0 nibble, which decodes to +0), and 12 c - 12 c."""
    nib = np.zeros((3, 16, 16), dtype=np.int64)
    codes = np.zeros((3, 8, 16), dtype=np.int64)
    nib[0] = 15  # -12 against zero codes: every product -0
    nib[1] = 8  # the -0 nibble (code 0) against positive codes
    codes[1] = 32640
    nib[2, :, :8], nib[2, :, 8:] = 7, 15  # 12 c - 12 c
    codes[2] = 4096
    got = _dots(nib, codes)
    assert (got.view(np.uint32) == 0).all(), f"zero sums: bits {np.unique(got.view(np.uint32))}"


def test_every_weight_code_against_every_a16_code_magnitude() -> None:
    """One product per block: each of the 16 nibbles against codes ±1 .. ±32640 with 1 to 8
    significant bits (every A16 code magnitude class)."""
    mags = np.unique(
        np.concatenate([np.arange(1, 256), (np.arange(128, 256)[:, None] << np.arange(8)).ravel()])
    )
    mags = mags[mags <= 32640]
    vals = np.concatenate([mags, -mags])
    tiles = -(-len(vals) // 8)
    codes = np.zeros((tiles * 8, 16), dtype=np.int64)
    codes[: len(vals), 3] = vals
    codes = codes.reshape(tiles, 8, 16)
    nib = np.zeros((tiles, 16, 16), dtype=np.int64)
    nib[:, :, 3] = np.arange(16)  # weight row r: nibble r at k = 3
    _check(nib, codes, "single products")
