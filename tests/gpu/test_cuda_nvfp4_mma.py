"""Tensor-core NVFP4 x A16 kernels (kernels/nvfp4_mma.cu) against the numpy reference and the
CUDA-core kernels, bit for bit (arithmetic.md § a16, § projection).

Shapes: block counts B = K/16 that are not powers of two, not multiples of the 8-block step
(the byte-load ``_u`` kernels) nor of the 64-block run, N not a multiple of the 16-column tile;
m = 2..32 and a gemm past 32 rows (chunks); rows of every edge kind (NaN/Inf blocks,
subnormals, zeros, ties, huge); outputs in strided views whose guard bands must survive.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.reference.projection import project
from tests.gpu import gen

cp = pytest.importorskip("cupy")

#: (N, K): B = 3, 9 (odd, < one step), 65, 130 (partial run), 64, 256, 768 (B % 64 == 0).
SHAPES = ((37, 48), (19, 144), (50, 1040), (33, 2080), (16, 1024), (45, 4096), (7, 12288))


@pytest.fixture(params=["s8", "f16"])
def block_dot(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both tensor-core families: the s8 MMAs (w4a16_*, w4a4_*) and the f16 MMA (w4a16h_*,
    w4a4h_*)."""
    from metrale.cuda import mma, tile

    monkeypatch.setattr(mma, "BLOCK_DOT", request.param)
    monkeypatch.setattr(tile, "ENABLED", False)  # tests/gpu/test_cuda_nvfp4_tile.py tests that GEMM
    return request.param


def ref(x: np.ndarray, w: Any) -> np.ndarray:
    with np.errstate(all="ignore"):
        return project(x, w, "A16").view(np.uint16)


def dev_rows(x: np.ndarray) -> Any:
    return cp.asarray(np.ascontiguousarray(x).view(np.uint16))


@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
def test_mma_matches_reference_and_cuda_cores(
    block_dot: str, cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, shape: tuple
) -> None:
    from metrale.cuda import mma as mma_mod
    from metrale.cuda import nvfp4

    n, k = shape
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, 40, k)
    want = ref(x, w)
    xd = dev_rows(x)
    ms = (2, 3, 4, 5, 8, 9, 16, 17, 24, 31, 32)
    monkeypatch.setattr(nvfp4, "MMA_MIN_ROWS", 2)  # cover m = 2, 3 on the MMA path too
    monkeypatch.setattr(nvfp4, "FAST_ONE_PASS_ROWS", 0)  # ... and m = 4 (no one-pass fast kernel)
    for mma in (True, False):
        monkeypatch.setattr(mma_mod, "ENABLED", mma)
        for m in ms:
            t = next(t for t in (4, 8, 16, 32) if m <= t)
            buf, view, init = gen.guarded(cp, fresh_rng, m + 1, n)
            cuda.launch(f"w4a16_gemv_batch{t}", xd[:m], dw, view, m)
            gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"mma={mma} batch{t} m={m} {shape}")
        for rows in (2, 3):
            b0, v0, i0 = gen.guarded(cp, fresh_rng, rows, n)
            cuda.launch(f"w4a16_gemv_batch{rows}", xd[:rows], dw, v0)
            gen.bits_equal(gen.check_guard(b0, i0, rows, n), want[:rows], f"mma={mma} batch{rows} {shape}")
            w1 = gen.nvfp4(fresh_rng, n, k, name="up")
            b1, v1, i1 = gen.guarded(cp, fresh_rng, rows, n)
            b2, v2, i2 = gen.guarded(cp, fresh_rng, rows, n)
            cuda.launch(f"w4a16_gemv_dual_batch{rows}", xd[:rows], dw, v1, cuda.upload(w1), v2)
            gen.bits_equal(gen.check_guard(b1, i1, rows, n), want[:rows], f"mma={mma} dual{rows} gate")
            gen.bits_equal(gen.check_guard(b2, i2, rows, n), ref(x[:rows], w1), f"mma={mma} dual{rows} up")
        for m in (33, 40):  # gemm in chunks of 32 rows
            buf, view, init = gen.guarded(cp, fresh_rng, m, n)
            cuda.launch("w4a16_gemm", xd[:m], dw, view)
            gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"mma={mma} gemm m={m} {shape}")


def test_mma_edge_rows_every_kind(block_dot: str, cuda: Any, fresh_rng: np.random.Generator) -> None:
    """Each edge kind in every row position of an 8-row tile, one call per kind."""
    n, k = 29, 1040
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    for kind in gen.ROW_KINDS:
        x = np.stack([gen.row(fresh_rng, k, kind) for _ in range(11)])
        buf, view, init = gen.guarded(cp, fresh_rng, 11, n)
        cuda.launch("w4a16_gemv_batch16", dev_rows(x), dw, view, 11)
        gen.bits_equal(gen.check_guard(buf, init, 11, n), ref(x, w), f"mma edge rows {kind}")


#: GEMM shapes: every counter depth D (S8 = ceil(B / 8) steps: 1, 17, 96, 129), B % 8 != 0
#: (the ``_u`` kernels) and N past the last 128-column CTA.
GEMM_SHAPES = ((37, 48), (50, 2080), (133, 12288), (9, 16512), (16, 1040))


@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=[f"N{n}-K{k}" for n, k in GEMM_SHAPES])
def test_gemm_matches_reference(
    block_dot: str, cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, shape: tuple
) -> None:
    """The prefill GEMM at every m around its tiles (8 NT rows, chunks of GEMM_ROWS lowered to
    48 rows), single and dual (gate and up in one launch), against the reference."""
    from metrale.cuda import mma as mma_mod

    n, k = shape
    w = gen.nvfp4(fresh_rng, n, k)
    w1 = gen.nvfp4(fresh_rng, n, k, name="up")
    dw, dw1 = cuda.upload(w), cuda.upload(w1)
    x = gen.rows(fresh_rng, 100, k)
    want, want1 = ref(x, w), ref(x, w1)
    xd = dev_rows(x)
    monkeypatch.setattr(mma_mod, "GEMM_MIN_ROWS", 2)
    monkeypatch.setattr(mma_mod, "GEMM_ANY_GRID", True)
    monkeypatch.setattr(mma_mod, "GEMM_ROWS", 48)
    for m in (2, 3, 9, 16, 23, 24, 25, 47, 48, 49, 100):
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch("w4a16_gemm", xd[:m], dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"gemm m={m} {shape}")
    for rows in (2, 3):
        b1, v1, i1 = gen.guarded(cp, fresh_rng, rows, n)
        b2, v2, i2 = gen.guarded(cp, fresh_rng, rows, n)
        cuda.launch(f"w4a16_gemv_dual_batch{rows}", xd[:rows], dw, v1, dw1, v2)
        gen.bits_equal(gen.check_guard(b1, i1, rows, n), want[:rows], f"gemm dual{rows} gate {shape}")
        gen.bits_equal(gen.check_guard(b2, i2, rows, n), want1[:rows], f"gemm dual{rows} up {shape}")


def test_gemm_edge_rows_every_kind(
    block_dot: str, cuda: Any, fresh_rng: np.random.Generator, monkeypatch
) -> None:
    """Each edge kind (NaN/Inf blocks, subnormals, zeros, ties, huge) in every row of a tile."""
    from metrale.cuda import mma as mma_mod

    monkeypatch.setattr(mma_mod, "GEMM_MIN_ROWS", 2)
    monkeypatch.setattr(mma_mod, "GEMM_ANY_GRID", True)
    n, k = 29, 1040
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    for kind in gen.ROW_KINDS:
        x = np.stack([gen.row(fresh_rng, k, kind) for _ in range(37)])
        buf, view, init = gen.guarded(cp, fresh_rng, 37, n)
        cuda.launch("w4a16_gemm", dev_rows(x), dw, view)
        gen.bits_equal(gen.check_guard(buf, init, 37, n), ref(x, w), f"gemm edge rows {kind}")


@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=[f"N{n}-K{k}" for n, k in GEMM_SHAPES])
def test_a4_mma_and_gemm_match_reference(
    block_dot: str, cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, shape: tuple
) -> None:
    """W4A4 on the tensor cores (w4a4_mma_prep, the MMA kernels and the GEMM) against the
    reference's A4 projection of the same codes, every m around the tiles, rows of every kind."""
    from metrale.cuda import mma as mma_mod
    from metrale.cuda import nvfp4
    from metrale.reference.activations import quantize_a4

    monkeypatch.setattr(nvfp4, "A4_FAST_MAX_ROWS", 0)  # m = 2, 3 on the tensor cores, not nvfp4_a4f
    n, k = shape
    w = gen.nvfp4(fresh_rng, n, k, a4=True)
    dw = cuda.upload(w)
    kinds = [gen.row(fresh_rng, k, kind) for kind in gen.ROW_KINDS]
    x = np.concatenate([np.stack(kinds), gen.rows(fresh_rng, 70 - len(kinds), k)])
    xd = dev_rows(x)
    with np.errstate(all="ignore"):
        want = project(None, w, "A4", codes=quantize_a4(x, w.input_scale)).view(np.uint16)
    for gemm in (False, True):
        monkeypatch.setattr(mma_mod, "GEMM_MIN_ROWS", 2 if gemm else 1 << 30)
        monkeypatch.setattr(mma_mod, "GEMM_ANY_GRID", gemm)
        monkeypatch.setattr(mma_mod, "GEMM_ROWS", 48)
        for m in (2, 3, 4, 9, 24, 33, 47, 49, 70):
            dc = cuda.launch("w4a4_quantize", xd[:m], w.input_scale)
            buf, view, init = gen.guarded(cp, fresh_rng, m, n)
            cuda.launch("w4a4_gemv_small_m", dc, dw, view)
            gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"a4 gemm={gemm} m={m} {shape}")
