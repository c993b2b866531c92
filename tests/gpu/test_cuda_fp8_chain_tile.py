"""The FP8 × A16 chain tile (nvfp4_wgmma.cu's ``w8c_prep`` and ``w8c_gemm_f{NF}``, tile.gemm_fp8;
docs/chain-revision.md, "The FP8 chain tile") against the revision's reference
``chain.project_chain``, bit for bit: weights whose blocks spread past 2^7 (the 11-bit codes
round them), fast rows over the window −119 ≤ E ≤ 114 and at its edges, slow rows (a block past
it, a non-finite block), rows of every edge kind, gate and up in one launch, K of one step to
twelve parts (CTA K parts and the K split over CTAs), guard bands."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.reference.chain import project_chain
from metrale.reference.formats import Fp8Weight
from tests.gpu import gen
from tests.gpu.test_cuda_nvfp4_tile import dev_rows, window_rows

cp = pytest.importorskip("cupy")
F32 = np.float32


@pytest.fixture
def fp8_tile(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The chain tile on, its launches counted (a declined launch fails)."""
    from metrale.cuda import runtime, tile

    if runtime.device_props(runtime.device_id())["major"] != 9:
        pytest.skip("the chain kernels (nvfp4_wgmma.cu) are built for sm_90a only")
    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(tile, "ENABLED", True)
    seen: dict[str, Any] = {"picked": []}
    real_pick = tile.pick_kernel

    def pick(fmt: Any, rows: int) -> Any:
        k = real_pick(fmt, rows)
        assert k is not None and k.chain, (fmt, rows, k, runtime.build_errors)
        seen["picked"].append(k.name)
        return k

    monkeypatch.setattr(tile, "pick_kernel", pick)
    return seen


def weight(rng: np.random.Generator, n: int, k: int, name: str = "w") -> Fp8Weight:
    """Channel FP8 of heavy-tailed sources: many blocks spread past 2^7 (rounded by the codes)."""
    src = rng.standard_normal((n, k)) * np.exp2(rng.integers(-12, 1, (n, k)))
    return Fp8Weight.quantize(src.astype(np.float32), name=name)


def device_set(w: Fp8Weight) -> tuple[Any, Any]:
    from metrale.cuda.fp8_bf16 import tile_fp8_bytes

    return cp.asarray(tile_fp8_bytes(w.weight)), cp.asarray(np.asarray(w.weight_scale, dtype=F32))


def run(rng: np.random.Generator, x: np.ndarray, sets: list[tuple[Any, Any]], n: int) -> list[np.ndarray]:
    from metrale.cuda import tile

    m, k = x.shape
    bufs = [gen.guarded(cp, rng, m, n) for _ in sets]
    args = [
        (wb, sc, F32(1.0), view, np.int64(view.strides[0] // 2))
        for (wb, sc), (_, view, _) in zip(sets, bufs, strict=True)
    ]
    assert tile.gemm_fp8(dev_rows(x), k, m, k // 16, args[0], args[-1], len(sets), n)
    return [gen.check_guard(buf, init, m, n) for buf, _, init in bufs]


def ref(x: np.ndarray, w: Fp8Weight) -> np.ndarray:
    with np.errstate(all="ignore"):
        return project_chain(x, w, "A16").view(np.uint16)


#: (N, K): one step, 9 steps (a part and a step), 4 parts, 12 parts (the tree over parts padded)
SHAPES = ((37, 128), (200, 1152), (130, 4096), (45, 12288))


@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
def test_fp8_chain_tile_matches_chain_reference(
    cuda: Any, fresh_rng: np.random.Generator, fp8_tile: dict, shape: tuple
) -> None:
    n, k = shape
    w, w1 = weight(fresh_rng, n, k), weight(fresh_rng, n, k, "up")
    d, d1 = device_set(w), device_set(w1)
    inner = window_rows(fresh_rng, 100, k, tuple(range(-30, 31)))
    x = np.concatenate([inner, window_rows(fresh_rng, 40, k, (-119, -118, 113, 114))])
    x = x[fresh_rng.permutation(len(x))]
    want, want1 = ref(x, w), ref(x, w1)
    for m in (1, 9, 30, 63, 64, 65, 140):  # NF = 1, 2, 4, 8 (one and three tiles)
        (got,) = run(fresh_rng, x[:m], [d], n)
        gen.bits_equal(got, want[:m], f"fp8 chain m={m} {shape}")
    g0, g1 = run(fresh_rng, x[:70], [d, d1], n)
    gen.bits_equal(g0, want[:70], f"fp8 chain dual gate {shape}")
    gen.bits_equal(g1, want1[:70], f"fp8 chain dual up {shape}")
    edge = gen.rows(fresh_rng, 70, k)
    (got,) = run(fresh_rng, edge, [d], n)
    gen.bits_equal(got, ref(edge, w), f"fp8 chain edge rows {shape}")
    assert set(fp8_tile["picked"]) == {f"w8c_gemm_f{nf}" for nf in (1, 2, 4, 8)}


@pytest.mark.parametrize("exp", [-126, -120, 115, 120, 127])
def test_fp8_chain_tile_slow_block(
    cuda: Any, fresh_rng: np.random.Generator, fp8_tile: dict, exp: int
) -> None:
    """One block past the window makes its row and CTA slow (the block value in float64, one
    rounding: subnormal and infinite results); every row still matches."""
    n, k = 150, 2048
    w = weight(fresh_rng, n, k)
    x = window_rows(fresh_rng, 100, k, (-119, -60, 0, 60, 114))
    x[37, 16 * 5 : 16 * 6] = window_rows(fresh_rng, 1, 16, (exp,))[0]
    x[90, 16 * 70 : 16 * 71] = window_rows(fresh_rng, 1, 16, (exp,))[0]
    (got,) = run(fresh_rng, x, [device_set(w)], n)
    gen.bits_equal(got, ref(x, w), f"fp8 chain slow E={exp}")


def test_fp8_prep_marks_the_window(cuda: Any, fresh_rng: np.random.Generator, fp8_tile: dict) -> None:
    """w8c_prep's slow marks are the window −119 ≤ E ≤ 114 of the two-fma epilogue: a row of
    blocks at 114 or at −119 is fast, one block at 115 or at −120 (or a non-finite one) makes
    its row slow; fac = 2^(E − 14), subnormal 2^-133 at the bottom."""
    from metrale.cuda import pdl, runtime, tile

    k, b, m, pad = 256, 16, 7, 8
    x = window_rows(fresh_rng, m, k, (0,))
    x[0] = window_rows(fresh_rng, 1, k, (114,))[0]
    x[1, 16:32] = window_rows(fresh_rng, 1, 16, (115,))[0]
    x[2] = window_rows(fresh_rng, 1, k, (-119,))[0]
    x[3, 32:48] = window_rows(fresh_rng, 1, 16, (-120,))[0]
    x[4, 48:64] = 0.0  # a zero block among in-window ones
    x[5, 64] = np.inf
    x[6, 16:32] = window_rows(fresh_rng, 1, 16, (113,))[0]
    kern = runtime.get_kernel(tile.WG_FILE, "w8c_prep")
    xh = cp.zeros((pad, 2 * k), cp.uint16)
    fac = cp.zeros((b, pad), cp.float32)
    slow = cp.full(pad, 7, cp.uint8)
    args = (dev_rows(x), np.int64(k), np.int32(m), np.int32(pad), np.int32(b), xh, fac, slow)
    pdl.launch(kern, (pad,), (tile.prep_threads(b),), args)
    assert slow.get()[:m].tolist() == [0, 1, 0, 1, 0, 1, 0]
    f = fac.get()
    assert f[0, 0] == np.ldexp(F32(1.0), 100) and f[0, 2] == np.ldexp(F32(1.0), -133) > 0
    assert f[1, 6] == np.ldexp(F32(1.0), 113 - 14)


@pytest.mark.parametrize("cta_steps", [8, 16, 32])
def test_fp8_chain_tile_every_cta_part(
    cuda: Any, fresh_rng: np.random.Generator, fp8_tile: dict, monkeypatch: pytest.MonkeyPatch, cta_steps: int
) -> None:
    """CTA K parts of 1, 2 and 4 chain parts over K = 12288 (twelve parts; K split over CTAs and
    mma_finish with the column scales), and a short last CTA part."""
    from metrale.cuda import tile

    monkeypatch.setattr(tile, "CHAIN_CTA_STEPS", (cta_steps, cta_steps))
    n, k = 130, 12288 + 1024 * 2
    w = weight(fresh_rng, n, k)
    x = window_rows(fresh_rng, 70, k, tuple(range(-10, 11)))
    (got,) = run(fresh_rng, x, [device_set(w)], n)
    gen.bits_equal(got, ref(x, w), f"fp8 chain CTA part of {cta_steps} steps")
