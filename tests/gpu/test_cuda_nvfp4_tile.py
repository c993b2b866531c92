"""The tiled NVFP4 × A16 / A4 and Q2_0 × A16 GEMM (kernels/nvfp4_tile.cu on mma.sync and
kernels/nvfp4_wgmma.cu on Hopper's wgmma, metrale/cuda/tile.py; every test runs each kernel)
against the numpy reference, bit for bit: its fast epilogue (scaled bf16 operands, one multiply
per block value) at the edges of each format's exponent window, its slow epilogue (a tile
holding any row outside the window), every CTA tile height, every K split (parts of 1 to 32
steps, full and short), gate and up in one launch, N past the last 128-column tile, every code
of both weight formats, and strided outputs whose guard bands must survive (arithmetic.md
§ kernel-notes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.reference.elements import BF16
from metrale.reference.formats import Nvfp4Weight, Q2_0Weight
from metrale.reference.projection import project
from tests.gpu import gen

cp = pytest.importorskip("cupy")


def ref(x: np.ndarray, w: Any) -> np.ndarray:
    with np.errstate(all="ignore"):
        return project(x, w, "A16").view(np.uint16)


def dev_rows(x: np.ndarray) -> Any:
    return cp.asarray(np.ascontiguousarray(x).view(np.uint16))


def _count_launches(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> dict[str, int]:
    """Wrap launcher ``module.name`` so the returned dict counts the calls that launched."""
    calls = {"n": 0}
    real = getattr(module, name)

    def counted(*a: Any, **k: Any) -> bool:
        ok = real(*a, **k)
        calls["n"] += int(ok)
        return ok

    monkeypatch.setattr(module, name, counted)
    return calls


#: The GEMMs the launcher picked in the current test (tile_kernel records them).
PICKED: list[str] = []


@pytest.fixture(params=[False, True], ids=["mma_sync", "wgmma"])
def tile_kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test on both GEMMs: nvfp4_tile.cu (mma.sync) and nvfp4_wgmma.cu (wgmma, sm_90a only:
    skipped on other devices, where it cannot build). Every chunk must run on the one asked for:
    a wgmma kernel missing on sm_90 fails."""
    from metrale.cuda import runtime, tile

    wg = bool(request.param)
    if wg and runtime.device_props(runtime.device_id())["major"] != 9:
        pytest.skip("nvfp4_wgmma.cu is built for sm_90a only")
    monkeypatch.setattr(tile, "WG_ENABLED", wg)
    real = tile.pick_kernel
    PICKED.clear()

    def checked(fmt: Any, rows: int) -> Any:
        pick = real(fmt, rows)
        assert pick is not None and pick.wg == wg, (pick, runtime.build_errors)
        PICKED.append(pick.name)
        return pick

    monkeypatch.setattr(tile, "pick_kernel", checked)
    return wg


@pytest.fixture
def tiled(monkeypatch: pytest.MonkeyPatch, tile_kernel: bool) -> Any:
    """The tiled GEMM from one row on; the other paths off, so a miss fails loudly."""
    from metrale.cuda import mma, tile

    monkeypatch.setattr(tile, "MIN_ROWS", 1)
    monkeypatch.setattr(tile, "ENABLED", True)
    monkeypatch.setattr(mma, "ENABLED", False)
    return _count_launches(monkeypatch, tile, "gemm")


def window_rows(rng: np.random.Generator, m: int, k: int, exps: tuple[int, ...]) -> np.ndarray:
    """Rows whose every block's largest exponent E is drawn from ``exps``, the other elements
    spread below it (down to 2^-15 of the maximum, some rounded, some zero)."""
    b = k // 16
    e = rng.choice(np.array(exps), (m, b, 1))
    mant = 1.0 + rng.integers(0, 128, (m, b, 16)) / 128
    drop = rng.integers(0, 16, (m, b, 16))
    drop[:, :, 0] = 0
    sign = np.where(rng.random((m, b, 16)) < 0.5, -1.0, 1.0)
    v = sign * np.ldexp(mant, (e - drop).astype(np.int64))
    zero = rng.random((m, b, 16)) < 0.05
    zero[:, :, 0] = False  # element 0 holds the block's exponent E (zeroed, E could fall below)
    v[zero] = 0.0
    return v.reshape(m, k).astype(np.float32).astype(BF16)


#: (N, K): B = 8 (one step), 72 (9 steps: short parts), 256, 768 (three parts of 32 steps).
SHAPES = ((37, 128), (200, 1152), (130, 4096), (45, 12288))


@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
def test_tile_fast_rows_match_reference(
    cuda: Any, fresh_rng: np.random.Generator, tiled: Any, shape: tuple
) -> None:
    """Only in-window rows (every CTA on the fast epilogue), each tile height, single and dual."""
    from metrale.cuda import nvfp4

    n, k = shape
    w, w1 = gen.nvfp4(fresh_rng, n, k), gen.nvfp4(fresh_rng, n, k, name="up")
    dw, dw1 = cuda.upload(w), cuda.upload(w1)
    x = np.concatenate(
        [
            window_rows(fresh_rng, 70, k, tuple(range(-20, 21))),
            window_rows(fresh_rng, 60, k, (-102, -101, 109, 110)),
        ]
    )
    x = x[fresh_rng.permutation(len(x))]
    want, want1 = ref(x, w), ref(x, w1)
    xd = dev_rows(x)
    for m in (1, 5, 16, 17, 32, 33, 64, 65, 130):
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch("w4a16_gemm", xd[:m], dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"tile m={m} {shape}")
    for m in (3, 40):
        b1, v1, i1 = gen.guarded(cp, fresh_rng, m, n)
        b2, v2, i2 = gen.guarded(cp, fresh_rng, m, n)
        nvfp4.nvfp4_a16(xd[:m], [(dw, v1), (dw1, v2)], m, 4)
        gen.bits_equal(gen.check_guard(b1, i1, m, n), want[:m], f"tile dual m={m} gate {shape}")
        gen.bits_equal(gen.check_guard(b2, i2, m, n), want1[:m], f"tile dual m={m} up {shape}")
    assert tiled["n"] > 0, "the tiled GEMM never ran"


@pytest.mark.parametrize("exp", [-126, -110, -103, 111, 120, 127])
def test_tile_rows_outside_the_window(
    cuda: Any, fresh_rng: np.random.Generator, tiled: Any, exp: int
) -> None:
    """One block past the window's edge makes its row slow and its CTA take the slow epilogue
    (the tile's in-window rows too, with factor 1); the results still match bit for bit."""
    n, k = 150, 1024
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = window_rows(fresh_rng, 80, k, (-102, -50, 0, 50, 110))
    bad = window_rows(fresh_rng, 1, 16, (exp,))[0]
    x[37, 16 * 5 : 16 * 6] = bad  # one block of one row of the first 64-row tile
    want = ref(x, w)
    buf, view, init = gen.guarded(cp, fresh_rng, 80, n)
    cuda.launch("w4a16_gemm", dev_rows(x), dw, view)
    gen.bits_equal(gen.check_guard(buf, init, 80, n), want, f"tile slow block E={exp}")
    assert tiled["n"] > 0


def test_tile_edge_rows_every_kind(cuda: Any, fresh_rng: np.random.Generator, tiled: Any) -> None:
    """Every edge kind (NaN/Inf blocks, subnormals, zeros, ties, huge, tiny) among fast rows."""
    n, k = 29, 2048
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, 100, k)
    want = ref(x, w)
    for m in (8, 64, 100):
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch("w4a16_gemm", dev_rows(x[:m]), dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"tile edge rows m={m}")
    for kind in gen.ROW_KINDS:
        xk = np.stack([gen.row(fresh_rng, k, kind) for _ in range(9)])
        buf, view, init = gen.guarded(cp, fresh_rng, 9, n)
        cuda.launch("w4a16_gemm", dev_rows(xk), dw, view)
        gen.bits_equal(gen.check_guard(buf, init, 9, n), ref(xk, w), f"tile edge kind {kind}")


def test_tile_prologue_past_one_block_per_thread(
    cuda: Any, fresh_rng: np.random.Generator, tiled: Any
) -> None:
    """K = 20480 (B = 1280 blocks): ``w4a16b_prep`` runs 1024 threads, so a thread takes a
    second block, reloaded in the second pass while its first stays in registers; fast rows and
    a slow one (a block past the window), the tile over 40 rows."""
    from metrale.cuda import tile

    n, k = 40, 20480
    assert tile.prep_threads(k // 16) == 1024 < k // 16
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = window_rows(fresh_rng, 40, k, (-102, -30, 0, 30, 110))
    x[21, 16 * 1100 : 16 * 1101] = window_rows(fresh_rng, 1, 16, (120,))[0]  # a second-pass block
    want = ref(x, w)
    for m in (20, 40):  # 20: fast rows only; 40: row 21 slow
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch("w4a16_gemm", dev_rows(x[:m]), dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"tile K={k} m={m}")
    assert tiled["n"] > 0


@pytest.mark.parametrize("max_part", [1, 2, 8, 32])
def test_tile_every_k_split(
    cuda: Any, fresh_rng: np.random.Generator, tiled: Any, monkeypatch: pytest.MonkeyPatch, max_part: int
) -> None:
    """K split into aligned parts of 1 .. 32 steps (mma_finish sums the parts' tree), full and
    short last parts (S8 = 9, 96), on both epilogues."""
    from metrale.cuda import tile

    monkeypatch.setattr(tile, "MAX_PART_STEPS", max_part)
    monkeypatch.setattr(tile, "MIN_PART_STEPS", 1)
    for n, k in ((70, 1152), (33, 12288)):
        w = gen.nvfp4(fresh_rng, n, k)
        dw = cuda.upload(w)
        x = np.concatenate([window_rows(fresh_rng, 40, k, (-60, 0, 60)), gen.rows(fresh_rng, 30, k)])
        want = ref(x, w)
        for m in (40, 70):  # 40: fast tiles only; 70: the second tile slow
            buf, view, init = gen.guarded(cp, fresh_rng, m, n)
            cuda.launch("w4a16_gemm", dev_rows(x[:m]), dw, view)
            gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"tile parts<={max_part} m={m} K={k}")


def test_tile_weight_codes_and_scales_exhaustive(
    cuda: Any, fresh_rng: np.random.Generator, tiled: Any
) -> None:
    """Every nibble in every k position of a block, against every finite e4m3 scale (the
    weight decode w4b_pair and the scale decode), one-hot activations picking each element."""
    n, k = 128, 256
    w = gen.nvfp4(fresh_rng, n, k)
    nib = np.zeros((n, k), dtype=np.uint8)
    for c in range(n):
        nib[c] = (np.arange(k) + c) % 16
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    w = Nvfp4Weight(weight=packed, weight_scale=w.weight_scale, weight_scale_2=w.weight_scale_2, name="w")
    dw = cuda.upload(w)
    x = np.zeros((64, k), dtype=np.float32)
    for r in range(64):
        x[r, np.arange(r % 16, k, 16)] = 1.0 + (r // 16) / 4  # element r % 16 of every block
    x = x.astype(BF16)
    want = ref(x, w)
    buf, view, init = gen.guarded(cp, fresh_rng, 64, n)
    cuda.launch("w4a16_gemm", dev_rows(x), dw, view)
    gen.bits_equal(gen.check_guard(buf, init, 64, n), want, "tile one-hot codes")


@pytest.fixture
def tiled_a4(monkeypatch: pytest.MonkeyPatch, tile_kernel: bool) -> Any:
    """The tiled GEMM's A4 prologue from one row on (tile.A4_ENABLED), the fast A4 kernels and
    the tensor-core A4 path off, so a miss fails loudly; counts the tiled launches."""
    from metrale.cuda import mma, nvfp4, tile

    monkeypatch.setattr(tile, "MIN_ROWS", 1)
    monkeypatch.setattr(tile, "ENABLED", True)
    monkeypatch.setattr(tile, "A4_ENABLED", True)
    monkeypatch.setattr(nvfp4, "A4_FAST_MAX_ROWS", 0)
    monkeypatch.setattr(mma, "ENABLED", False)
    return _count_launches(monkeypatch, tile, "gemm_a4")


@pytest.mark.parametrize(
    "shape", [(37, 128), (130, 4096), (45, 12288)], ids=["N37-K128", "N130-K4096", "N45-K12288"]
)
def test_tile_a4_matches_reference(
    cuda: Any, fresh_rng: np.random.Generator, tiled_a4: Any, tile_kernel: bool, shape: tuple
) -> None:
    """NVFP4 × A4 on the tiled GEMM (no window: only non-finite blocks make a row slow), edge rows
    of every kind and m around the tile heights, against project(..., "A4")."""
    from metrale.cuda import nvfp4

    n, k = shape
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, 130, k)
    with np.errstate(all="ignore"):
        want = project(x, w, "A4").view(np.uint16)
    xd = dev_rows(x)
    for m in (1, 16, 33, 64, 65, 130):
        codes = nvfp4.w4a4_quantize(xd[:m], w.input_scale)
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        nvfp4.w4a4_gemv_small_m(codes, dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"tile A4 m={m} {shape}")
    assert tiled_a4["n"] > 0, "the tiled A4 GEMM never ran"
    # on wgmma the A4 kernels with the tree's level 1 fused (w4a4w_gemm_f{NF}), else the NVFP4 tile
    want_prefix = "w4a4w_gemm_f" if tile_kernel else "w4a16b_gemm_f"
    assert PICKED and all(name.startswith(want_prefix) for name in PICKED), PICKED


# ---- Q2_0 × A16 on the tiled GEMM (q2a16b_gemm_f{NF}: window -88 <= E_b <= 105) ----


@pytest.fixture
def tiled_q2(monkeypatch: pytest.MonkeyPatch, tile_kernel: bool) -> Any:
    """Q2_0 on the tiled GEMM from one row on; the decode kernels and the tensor-core paths off."""
    from metrale.cuda import mma, q2_0, tile

    monkeypatch.setattr(tile, "MIN_ROWS", 1)
    monkeypatch.setattr(tile, "ENABLED", True)
    monkeypatch.setattr(tile, "Q2_ENABLED", True)
    monkeypatch.setattr(q2_0, "DEC_VARIANT", "off")
    monkeypatch.setattr(mma, "ENABLED", False)
    return _count_launches(monkeypatch, tile, "gemm")


def q2_run(cuda: Any, rng: np.random.Generator, x: np.ndarray, dw: Any, n: int) -> np.ndarray:
    m = x.shape[0]
    buf, view, init = gen.guarded(cp, rng, m, n)
    cuda.launch("q2_0_gemm", dev_rows(x), dw, view)
    return gen.check_guard(buf, init, m, n)


#: (N, K): S8 = 1, 9 (short parts), 32, 96 steps.
Q2_SHAPES = ((37, 128), (200, 1152), (130, 4096), (45, 12288))


@pytest.mark.parametrize("shape", Q2_SHAPES, ids=[f"N{n}-K{k}" for n, k in Q2_SHAPES])
def test_tile_q2_matches_reference(
    cuda: Any, fresh_rng: np.random.Generator, tiled_q2: Any, shape: tuple
) -> None:
    """In-window rows (their edges -88, 105 included) on the fast epilogue, and rows of every edge
    kind (a slow CTA), each tile height, against project(..., "A16")."""
    n, k = shape
    host = gen.q2_0(fresh_rng, n, k)
    dw = cuda.upload(host)
    fast = np.concatenate(
        [
            window_rows(fresh_rng, 70, k, tuple(range(-20, 21))),
            window_rows(fresh_rng, 60, k, (-88, -87, 104, 105)),
        ]
    )
    fast = fast[fresh_rng.permutation(len(fast))]
    want = ref(fast, host)
    for m in (1, 5, 16, 17, 33, 64, 65, 130):
        gen.bits_equal(q2_run(cuda, fresh_rng, fast[:m], dw, n), want[:m], f"tile q2 m={m} {shape}")
    edge = gen.rows(fresh_rng, 70, k)
    gen.bits_equal(q2_run(cuda, fresh_rng, edge, dw, n), ref(edge, host), f"tile q2 edge rows {shape}")
    assert tiled_q2["n"] > 0, "the tiled Q2_0 GEMM never ran"


@pytest.mark.parametrize("exp", [-126, -112, -89, 106, 110, 127])
def test_tile_q2_rows_outside_the_window(
    cuda: Any, fresh_rng: np.random.Generator, tiled_q2: Any, exp: int
) -> None:
    """One block just past the Q2_0 window (E = -89 or 106; NVFP4's window would take both) makes
    its row and CTA slow; every row still matches."""
    n, k = 150, 1024
    host = gen.q2_0(fresh_rng, n, k)
    dw = cuda.upload(host)
    x = window_rows(fresh_rng, 80, k, (-88, -50, 0, 50, 105))
    x[37, 16 * 5 : 16 * 6] = window_rows(fresh_rng, 1, 16, (exp,))[0]
    gen.bits_equal(q2_run(cuda, fresh_rng, x, dw, n), ref(x, host), f"tile q2 slow block E={exp}")
    assert tiled_q2["n"] > 0


def test_tile_q2_codes_exhaustive(cuda: Any, fresh_rng: np.random.Generator, tiled_q2: Any) -> None:
    """Every 2-bit code in every k position of a block (the decode q2b_pair and the xh order),
    one-hot activations picking each element, d of every edge kind."""
    n, k = 128, 256
    q = ((np.arange(k)[None, :] + np.arange(n)[:, None] + np.arange(k)[None, :] // 16) % 4).astype(np.uint8)
    host = Q2_0Weight.from_parts(q, gen.q2_0(fresh_rng, n, k).d(), name="q2")
    dw = cuda.upload(host)
    x = np.zeros((64, k), dtype=np.float32)
    for r in range(64):
        x[r, np.arange(r % 16, k, 16)] = 1.0 + (r // 16) / 4
    x = x.astype(BF16)
    gen.bits_equal(q2_run(cuda, fresh_rng, x, dw, n), ref(x, host), "tile q2 one-hot codes")


@pytest.mark.parametrize("group", [1, 2, 3])
def test_tile_row_groups(
    cuda: Any, fresh_rng: np.random.Generator, tiled: Any, monkeypatch: pytest.MonkeyPatch, group: int
) -> None:
    """The raster in groups of 1, 2 and 3 row tiles (tile.ROW_GROUP; tile.cuh ``tile_at``): 7 row
    tiles of 16 / 32 / 64 rows (a partial last group whose extra CTAs exit), 3 column tiles, gate
    and up in one launch, K split (mma_finish), fast and slow tiles: every output written once,
    the reference's bits."""
    from metrale.cuda import nvfp4, tile

    monkeypatch.setattr(tile, "ROW_GROUP", group)
    n, k = 300, 12288
    w, w1 = gen.nvfp4(fresh_rng, n, k), gen.nvfp4(fresh_rng, n, k, name="up")
    dw, dw1 = cuda.upload(w), cuda.upload(w1)
    x = np.concatenate([window_rows(fresh_rng, 420, k, (-60, 0, 60)), gen.rows(fresh_rng, 30, k)])
    want, want1 = ref(x, w), ref(x, w1)
    xd = dev_rows(x)
    for m in (100, 450):
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch("w4a16_gemm", xd[:m], dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"tile row group {group} m={m}")
    b1, v1, i1 = gen.guarded(cp, fresh_rng, 450, n)
    b2, v2, i2 = gen.guarded(cp, fresh_rng, 450, n)
    nvfp4.nvfp4_a16(xd, [(dw, v1), (dw1, v2)], 450, 4)
    gen.bits_equal(gen.check_guard(b1, i1, 450, n), want, f"tile row group {group} dual gate")
    gen.bits_equal(gen.check_guard(b2, i2, 450, n), want1, f"tile row group {group} dual up")
    assert tiled["n"] > 0, "the tiled GEMM never ran"
