"""The tiled NVFP4 × A16 / A4 and Q2_0 × A16 GEMM on the block-value chain (nvfp4_wgmma.cu's
``w4c_gemm_f{NF}`` / ``q2c_gemm_f{NF}``, tile.CHAIN; docs/chain-revision.md) against the
revision's reference ``chain.project_chain``, bit for bit: fast and slow epilogues at each
format's window edges, rows of every edge kind, every CTA height (NF = 1, 2, 4, 8, 16), gate and
up in one launch, CTA K parts of 1 to 16 chain parts (full and short: the counter over parts
and its fold), K split across CTAs (mma_finish over the CTA roots), every weight code, guard
bands."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.reference.chain import project_chain
from metrale.reference.elements import BF16
from metrale.reference.formats import Nvfp4Weight, Q2_0Weight
from tests.gpu import gen
from tests.gpu.test_cuda_nvfp4_tile import dev_rows, window_rows

cp = pytest.importorskip("cupy")


def ref(x: np.ndarray, w: Any, mode: str = "A16") -> np.ndarray:
    with np.errstate(all="ignore"):
        return project_chain(x, w, mode).view(np.uint16)


@pytest.fixture
def chained(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The chain tile from one row on, every other path off (none gives the chain's bits, so a
    miss fails); records the kernels picked and the launches."""
    from metrale.cuda import mma, nvfp4, q2_0, runtime, tile

    if runtime.device_props(runtime.device_id())["major"] != 9:
        pytest.skip("the chain kernels (nvfp4_wgmma.cu) are built for sm_90a only")
    for name, value in (
        ("CHAIN", True),
        ("MIN_ROWS", 1),
        ("ENABLED", True),
        ("A4_ENABLED", True),
        ("Q2_ENABLED", True),
    ):
        monkeypatch.setattr(tile, name, value)
    monkeypatch.setattr(nvfp4, "A4_FAST_MAX_ROWS", 0)
    monkeypatch.setattr(q2_0, "DEC_VARIANT", "off")
    monkeypatch.setattr(mma, "ENABLED", False)
    seen: dict[str, Any] = {"picked": [], "launched": 0}
    real_pick, real_run = tile.pick_kernel, tile._run

    def pick(fmt: Any, rows: int) -> Any:
        k = real_pick(fmt, rows)
        assert k is not None and k.chain, (fmt, rows, k, runtime.build_errors)
        seen["picked"].append(k.name)
        return k

    def run(*a: Any, **kw: Any) -> bool:
        ok = real_run(*a, **kw)
        assert ok, "the chain tile declined a launch it must take"
        seen["launched"] += 1
        return ok

    monkeypatch.setattr(tile, "pick_kernel", pick)
    monkeypatch.setattr(tile, "_run", run)
    return seen


def run_nvfp4(cuda: Any, rng: np.random.Generator, x: np.ndarray, dw: Any, n: int) -> np.ndarray:
    m = x.shape[0]
    buf, view, init = gen.guarded(cp, rng, m, n)
    cuda.launch("w4a16_gemm", dev_rows(x), dw, view)
    return gen.check_guard(buf, init, m, n)


def run_nvfp4_dual(
    rng: np.random.Generator, x: np.ndarray, dw: Any, dw1: Any, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Gate and up (dw, dw1) in one nvfp4_a16 launch into guarded outputs: their bits."""
    from metrale.cuda import nvfp4

    m = x.shape[0]
    b1, v1, i1 = gen.guarded(cp, rng, m, n)
    b2, v2, i2 = gen.guarded(cp, rng, m, n)
    nvfp4.nvfp4_a16(dev_rows(x), [(dw, v1), (dw1, v2)], m, 4)
    return gen.check_guard(b1, i1, m, n), gen.check_guard(b2, i2, m, n)


def run_q2(cuda: Any, rng: np.random.Generator, x: np.ndarray, dw: Any, n: int) -> np.ndarray:
    m = x.shape[0]
    buf, view, init = gen.guarded(cp, rng, m, n)
    cuda.launch("q2_0_gemm", dev_rows(x), dw, view)
    return gen.check_guard(buf, init, m, n)


#: (N, K): one step (K < one part), 9 steps (a full part and one step), 4 parts, 12 parts
#: (padded to 16 in the tree), 14 (Llama-3-8B's down projection: 4 + 4 + 4 + 2 at 4 per CTA).
SHAPES = ((37, 128), (200, 1152), (130, 4096), (45, 12288), (20, 14336))


def mixed_rows(rng: np.random.Generator, m: int, k: int, lo: int, hi: int) -> np.ndarray:
    """In-window rows, some at the window's edges, shuffled."""
    x = np.concatenate(
        [
            window_rows(rng, m - m // 3, k, tuple(range(-20, 21))),
            window_rows(rng, m // 3, k, (lo, lo + 1, hi - 1, hi)),
        ]
    )
    return x[rng.permutation(len(x))]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
def test_chain_tile_nvfp4_matches_chain_reference(
    cuda: Any, fresh_rng: np.random.Generator, chained: dict, shape: tuple
) -> None:
    """Fast tiles at both heights, then rows of every edge kind (slow tiles), single and dual."""

    n, k = shape
    w, w1 = gen.nvfp4(fresh_rng, n, k), gen.nvfp4(fresh_rng, n, k, name="up")
    dw, dw1 = cuda.upload(w), cuda.upload(w1)
    x = mixed_rows(fresh_rng, 150, k, -102, 110)
    want, want1 = ref(x, w), ref(x, w1)
    for m in (1, 8, 9, 17, 64, 65, 150):
        gen.bits_equal(run_nvfp4(cuda, fresh_rng, x[:m], dw, n), want[:m], f"chain m={m} {shape}")
    for m in (3, 140):
        got, got1 = run_nvfp4_dual(fresh_rng, x[:m], dw, dw1, n)
        gen.bits_equal(got, want[:m], f"chain dual m={m} gate {shape}")
        gen.bits_equal(got1, want1[:m], f"chain dual m={m} up {shape}")
    edge = gen.rows(fresh_rng, 140, k)
    gen.bits_equal(run_nvfp4(cuda, fresh_rng, edge, dw, n), ref(edge, w), f"chain edge rows {shape}")
    assert {f"w4c_gemm_f{nf}" for nf in (1, 2, 4, 8, 16)} <= set(chained["picked"]), chained["picked"]


@pytest.mark.parametrize("exp", [-126, -103, 111, 127])
def test_chain_tile_slow_block(cuda: Any, fresh_rng: np.random.Generator, chained: dict, exp: int) -> None:
    """One block past the NVFP4 window makes its row and CTA slow (P_b = D · fac_b, one rounding
    as ldexpf's where subnormal or infinite); every row still matches, at both heights."""
    n, k = 150, 2048
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = window_rows(fresh_rng, 140, k, (-102, -50, 0, 50, 110))
    x[37, 16 * 5 : 16 * 6] = window_rows(fresh_rng, 1, 16, (exp,))[0]
    x[100, 16 * 70 : 16 * 71] = window_rows(fresh_rng, 1, 16, (exp,))[0]
    want = ref(x, w)
    for m in (64, 140):
        gen.bits_equal(run_nvfp4(cuda, fresh_rng, x[:m], dw, n), want[:m], f"chain slow E={exp} m={m}")


@pytest.mark.parametrize("cta_steps", [8, 16, 32, 128])
def test_chain_tile_every_cta_part(
    cuda: Any, fresh_rng: np.random.Generator, chained: dict, monkeypatch: pytest.MonkeyPatch, cta_steps: int
) -> None:
    """CTA K parts of 1, 2, 4 and up to 16 chain parts (as many as the counter's levels fit):
    the counter over parts, its fold for a short CTA part (K = 1152, 12288, 14336), and the K
    split across CTAs summed by mma_finish; fast and slow tiles, both heights."""
    from metrale.cuda import tile

    monkeypatch.setattr(tile, "CHAIN_CTA_STEPS", (cta_steps, cta_steps))
    check_cta_parts(cuda, fresh_rng, ((70, 1152), (33, 12288), (40, 14336)), f"chain cta_steps={cta_steps}")


def check_cta_parts(cuda: Any, rng: np.random.Generator, shapes: tuple, what: str) -> None:
    """NVFP4 × A16 of each (N, K) in ``shapes`` at 60 rows (NF = 8, fast) and 140 (NF = 16, the
    second tile slow), in-window and edge rows, against project_chain."""
    for n, k in shapes:
        w = gen.nvfp4(rng, n, k)
        dw = cuda.upload(w)
        x = np.concatenate([window_rows(rng, 100, k, (-60, 0, 60)), gen.rows(rng, 40, k)])
        want = ref(x, w)
        for m in (60, 140):
            gen.bits_equal(run_nvfp4(cuda, rng, x[:m], dw, n), want[:m], f"{what} m={m} K={k}")


@pytest.mark.parametrize("part_log", [0, 1])
def test_chain_tile_smaller_parts(
    cuda: Any, fresh_rng: np.random.Generator, chained: dict, monkeypatch: pytest.MonkeyPatch, part_log: int
) -> None:
    """The part-size probe (docs/chain-revision.md, "The part size"): the chain tiles built with
    parts of 2^part_log steps (configs.TILE_CHAIN_PART_LOG, 8 or 16 blocks) against project_chain
    at that part size; CTA K parts of 2 and 16 steps (one or two parts up to 16: at most 64 CTA
    parts at K = 12288), K = 1152, 4096, 12288; both heights, fast and slow tiles."""
    from metrale.cuda import configs, tile
    from metrale.reference import chain

    steps = 1 << part_log
    levels = 7 - part_log  # a local counter's: CTA K parts up to 128 steps
    gen.rebuild_with(monkeypatch, (tile.WG_FILE,), TILE_CHAIN_PART_LOG=part_log, TILE_CHAIN_LEVELS=levels)
    monkeypatch.setattr(chain, "PART_BLOCKS", 8 * steps)
    monkeypatch.setattr(tile, "CHAIN_PART_STEPS", steps)
    for cta_steps in (2, 16):
        monkeypatch.setattr(tile, "CHAIN_CTA_STEPS", (cta_steps, cta_steps))
        what = f"chain parts of {steps} steps, cta_steps={cta_steps}"
        check_cta_parts(cuda, fresh_rng, ((70, 1152), (130, 4096), (33, 12288)), what)
    assert configs.TILE_CHAIN_PART_LOG == part_log


@pytest.mark.parametrize("group", [1, 2, 3])
def test_chain_tile_row_groups(
    cuda: Any, fresh_rng: np.random.Generator, chained: dict, monkeypatch: pytest.MonkeyPatch, group: int
) -> None:
    """The raster in groups of 1, 2 and 3 row tiles (tile.ROW_GROUP; tile.cuh ``tile_at``): 7 row
    tiles of 128 rows and 4 of 64 (partial last groups whose extra CTAs exit), 3 column tiles,
    gate and up in one launch, CTA K parts of one chain part (mma_finish), fast and slow tiles."""
    from metrale.cuda import tile

    monkeypatch.setattr(tile, "ROW_GROUP", group)
    monkeypatch.setattr(tile, "CHAIN_CTA_STEPS", (8, 8))
    n, k = 300, 4096
    w, w1 = gen.nvfp4(fresh_rng, n, k), gen.nvfp4(fresh_rng, n, k, name="up")
    dw, dw1 = cuda.upload(w), cuda.upload(w1)
    x = np.concatenate([mixed_rows(fresh_rng, 860, k, -102, 110), gen.rows(fresh_rng, 40, k)])
    want, want1 = ref(x, w), ref(x, w1)
    for m in (250, 900):
        gen.bits_equal(run_nvfp4(cuda, fresh_rng, x[:m], dw, n), want[:m], f"chain row group {group} m={m}")
    got, got1 = run_nvfp4_dual(fresh_rng, x, dw, dw1, n)
    gen.bits_equal(got, want, f"chain row group {group} dual gate")
    gen.bits_equal(got1, want1, f"chain row group {group} dual up")


@pytest.mark.parametrize("shape", [(37, 128), (130, 4096), (45, 12288)], ids=["K128", "K4096", "K12288"])
def test_chain_tile_a4(cuda: Any, fresh_rng: np.random.Generator, chained: dict, shape: tuple) -> None:
    """NVFP4 × A4 (w4a4b_prep's operand) on the chain tile: rows of every edge kind (non-finite
    blocks make rows slow), both heights, against project_chain(..., "A4")."""
    from metrale.cuda import nvfp4

    n, k = shape
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, 140, k)
    want = ref(x, w, "A4")
    xd = dev_rows(x)
    for m in (1, 33, 140):
        codes = nvfp4.w4a4_quantize(xd[:m], w.input_scale)
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        nvfp4.w4a4_gemv_small_m(codes, dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"chain A4 m={m} {shape}")
    assert chained["launched"] > 0


@pytest.mark.parametrize("shape", [(37, 128), (200, 1152), (130, 4096), (45, 12288)], ids=str)
def test_chain_tile_q2(cuda: Any, fresh_rng: np.random.Generator, chained: dict, shape: tuple) -> None:
    """Q2_0 × A16: in-window rows (edges -88, 105), rows just outside it and of every edge kind."""
    n, k = shape
    host = gen.q2_0(fresh_rng, n, k)
    dw = cuda.upload(host)
    x = mixed_rows(fresh_rng, 150, k, -88, 105)
    x[11, :16] = window_rows(fresh_rng, 1, 16, (-89,))[0]
    x[120, -16:] = window_rows(fresh_rng, 1, 16, (106,))[0]
    want = ref(x, host)
    for m in (1, 9, 17, 33, 150):
        gen.bits_equal(run_q2(cuda, fresh_rng, x[:m], dw, n), want[:m], f"chain q2 m={m} {shape}")
    edge = gen.rows(fresh_rng, 140, k)
    gen.bits_equal(run_q2(cuda, fresh_rng, edge, dw, n), ref(edge, host), f"chain q2 edge rows {shape}")
    assert {f"q2c_gemm_f{nf}" for nf in (1, 2, 4, 8, 16)} <= set(chained["picked"]), chained["picked"]


def test_chain_tile_codes_exhaustive(cuda: Any, fresh_rng: np.random.Generator, chained: dict) -> None:
    """Every NVFP4 nibble and every Q2_0 code in every k position, one-hot activations picking each
    element, against every finite e4m3 scale / the generator's d of every kind."""
    n, k = 128, 256
    w = gen.nvfp4(fresh_rng, n, k)
    nib = ((np.arange(k)[None, :] + np.arange(n)[:, None]) % 16).astype(np.uint8)
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    w = Nvfp4Weight(weight=packed, weight_scale=w.weight_scale, weight_scale_2=w.weight_scale_2, name="w")
    q = ((np.arange(k)[None, :] + np.arange(n)[:, None] + np.arange(k)[None, :] // 16) % 4).astype(np.uint8)
    q2 = Q2_0Weight.from_parts(q, gen.q2_0(fresh_rng, n, k).d(), name="q2")
    x = np.zeros((136, k), dtype=np.float32)
    for r in range(136):
        x[r, np.arange(r % 16, k, 16)] = 1.0 + (r // 16) / 4
    x = x.astype(BF16)
    gen.bits_equal(run_nvfp4(cuda, fresh_rng, x, cuda.upload(w), n), ref(x, w), "chain one-hot nvfp4")
    gen.bits_equal(run_q2(cuda, fresh_rng, x, cuda.upload(q2), n), ref(x, q2), "chain one-hot q2")


@pytest.fixture(params=["w4s_gemm_f16", "w4p_gemm_f16"])
def shared_a(chained: dict, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> dict:
    """``chained`` with NVFP4 chunks over 128 rows on w4s_gemm_f16 or w4p_gemm_f16
    (configs.TILE_CHAIN_SHARED_A)."""
    from metrale.cuda import configs

    monkeypatch.setattr(configs, "TILE_CHAIN_SHARED_A", request.param)
    chained["kernel"] = request.param
    return chained


@pytest.mark.parametrize("cta_steps", [8, 128])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
def test_chain_tile_shared_a(
    cuda: Any,
    fresh_rng: np.random.Generator,
    shared_a: dict,
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple,
    cta_steps: int,
) -> None:
    """w4s_gemm_f16 / w4p_gemm_f16 (one decoded weight tile of 64 rows per CTA, 256 activation
    rows; w4p with a producer warpgroup) against
    project_chain: one to three 256-row tiles, partly filled; in-window rows at the window's edges
    (fast CTAs), rows of every edge kind (slow CTAs, two passes of 64 rows per warpgroup); gate
    and up in one launch; A4; CTA K parts of one chain part (K split, mma_finish) and of up to 16
    (the counter over parts in local memory, its fold for a short part)."""
    from metrale.cuda import nvfp4, tile

    monkeypatch.setattr(tile, "CHAIN_CTA_STEPS", (cta_steps, cta_steps))
    n, k = shape
    w, w1 = gen.nvfp4(fresh_rng, n, k), gen.nvfp4(fresh_rng, n, k, name="up")
    dw, dw1 = cuda.upload(w), cuda.upload(w1)
    x = mixed_rows(fresh_rng, 520, k, -102, 110)
    want, want1 = ref(x, w), ref(x, w1)
    for m in (129, 256, 520):
        gen.bits_equal(run_nvfp4(cuda, fresh_rng, x[:m], dw, n), want[:m], f"shared A m={m} {shape}")
    monkeypatch.setattr(tile, "ROW_GROUP", 2)  # three row tiles: a partial second group
    gen.bits_equal(run_nvfp4(cuda, fresh_rng, x, dw, n), want, f"shared A row group 2 {shape}")
    monkeypatch.setattr(tile, "ROW_GROUP", 0)
    got, got1 = run_nvfp4_dual(fresh_rng, x[:300], dw, dw1, n)
    gen.bits_equal(got, want[:300], f"shared A dual gate {shape}")
    gen.bits_equal(got1, want1[:300], f"shared A dual up {shape}")
    edge = gen.rows(fresh_rng, 300, k)
    gen.bits_equal(run_nvfp4(cuda, fresh_rng, edge, dw, n), ref(edge, w), f"shared A edge rows {shape}")
    codes = nvfp4.w4a4_quantize(dev_rows(edge), w.input_scale)
    buf, view, init = gen.guarded(cp, fresh_rng, 300, n)
    nvfp4.w4a4_gemv_small_m(codes, dw, view)
    gen.bits_equal(gen.check_guard(buf, init, 300, n), ref(edge, w, "A4"), f"shared A A4 {shape}")
    assert shared_a["kernel"] in shared_a["picked"], shared_a["picked"]
