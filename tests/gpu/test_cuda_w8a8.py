"""The W8A8 arm on the GPU against the numpy reference, bit for bit (arithmetic.md § w8a8-arm):
the per-token quantization (codes and scales), the int32 tensor-core GEMV (every row tier and
both CTA shapes), and the fused silu -> quantize -> down step, m = 1..64, rows with NaN/Inf,
subnormal and zero amax, N off every tile, K not a multiple of the 64-byte step, guard bands,
batch invariance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.cuda import configs
from metrale.cuda.w8a8 import GEMM_TILES, SK_TIERS, TMA_NAMES, TMA_TIERS, WGMMA_FILE, WGMMA_TILES
from metrale.reference.activations import quantize_a8
from metrale.reference.formats import W8a8Weight
from metrale.reference.formats.w8a8 import MAX_K
from metrale.reference.kernels import REFERENCE_KERNELS
from metrale.reference.projection import project
from tests.gpu.gen import F32, bits_equal, check_guard, guarded, rebuild_with, rows
from tests.helpers import assert_bits_equal

cp = pytest.importorskip("cupy")

SHAPES = [(37, 48), (45, 1040), (70, 4112)]
M_VALUES = [1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64]


def w8a8_weight(rng: np.random.Generator, n: int, k: int) -> W8a8Weight:
    """Uniform int8 codes (-128 and 127 included) and positive row scales."""
    q = rng.integers(-128, 128, (n, k), dtype=np.int16).astype(np.int8)
    q[0, :2] = (-128, 127)
    return W8a8Weight(weight=q, weight_scale=np.exp2(rng.uniform(-12, 2, n)).astype(F32), name="w8")


@pytest.mark.parametrize("k", [16, 48, 4112])
def test_quantize_matches_reference(cuda: Any, fresh_rng: np.random.Generator, k: int) -> None:
    x = rows(fresh_rng, 40, k)
    x[3] = 0  # amax = 0
    got = cuda.launch("w8a8_quantize", cp.asarray(x.view(np.uint16)))
    want = quantize_a8(x)
    assert_bits_equal(got.q.get(), want.q, "q")
    assert_bits_equal(got.scale.get(), want.scale, "scale")


@pytest.mark.parametrize("split_k", [True, False])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_gemv_matches_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, n: int, k: int, split_k: bool
) -> None:
    """The routing's kernels at m = 1..64: the split-K and stream-K wgmma kernels (sm_90) or,
    without them (other devices), the dp4a kernels and the mma.sync tiers."""
    from metrale.cuda import w8a8

    if not split_k:
        monkeypatch.setattr(w8a8, "SK_MIN_ROWS", 1 << 30)
        monkeypatch.setattr(w8a8, "TMA_MIN_ROWS", 1 << 30)
    host = w8a8_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    x = rows(fresh_rng, 64, k)
    want = project(x, host, "A8").view(np.uint16)
    for m in M_VALUES:
        codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
        buf, inner, init = guarded(cp, fresh_rng, m, n)
        cuda.launch("w8a8_gemv", codes, w, inner)
        bits_equal(check_guard(buf, init, m, n), want[:m], f"w8a8_gemv m={m}")


@pytest.mark.parametrize("warps", [4, 8])
def test_gemv_every_cta_shape(cuda: Any, fresh_rng: np.random.Generator, warps: int) -> None:
    """Both warps-per-CTA variants (the launcher picks one by grid size) on every row tier;
    K = 2128 gives 34 steps of 64 bytes (ragged last step, uneven split over the warps)."""
    from metrale.cuda.w8a8 import w8a8_gemv

    n, k = 83, 2128
    host = w8a8_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    x = rows(fresh_rng, 40, k)
    want = project(x, host, "A8").view(np.uint16)
    for m in (1, 7, 8, 12, 16, 31, 32, 40):
        codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
        buf, inner, init = guarded(cp, fresh_rng, m, n)
        w8a8_gemv(codes, w, inner, warps=warps)
        bits_equal(check_guard(buf, init, m, n), want[:m], f"w8a8_gemv warps={warps} m={m}")


def _silu_inputs(rng: np.random.Generator, m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    gate, up = rows(rng, m, k), rows(rng, m, k)
    if m > 2:
        gate[1] = 0  # h = 0: amax 0
        up[2] = (np.asarray(up[2], dtype=F32) * F32(2.0**-120)).astype(up.dtype)  # subnormal amax
    return gate, up


#: The fused entry point's first step: the 8-CTA cluster kernel, the kernels of 4, 2 and 1 CTAs per
#: row (``w8a8_silu_quant_c{CL}``), the persistent one with the compact table in shared memory
#: (``w8a8_silu_quant_st``, where K fits it), or the slice pair.
SILU_PATHS = ["cluster", "c4", "c2", "c1", "st", "slices"]


def _silu_quant_path(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Route every row count to ``path`` (a one-launch kernel must have built on an sm_90 device,
    else the test would pass on the fallback)."""
    from metrale.cuda import w8a8
    from metrale.cuda.runtime import get_kernel

    monkeypatch.setattr(w8a8, "SILU_QUANT_CLUSTER_MAX_ROWS", 1 << 30 if path == "cluster" else 0)
    rows_kernels = ((1 << 30, int(path[1:])),) if path not in ("cluster", "st", "slices") else ()
    monkeypatch.setattr(w8a8, "SILU_ROW_KERNELS", rows_kernels)
    monkeypatch.setattr(w8a8, "SILU_ST_MIN_ROWS", 1 if path == "st" else None)
    if path != "slices" and cp.cuda.Device().compute_capability >= "90":
        name = "w8a8_silu_quant" if path == "cluster" else f"w8a8_silu_quant_{path}"
        assert get_kernel(w8a8.CU_FILE, name) is not None


@pytest.mark.parametrize("path", SILU_PATHS)
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_fused_silu_quant_gemv_matches_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, n: int, k: int, path: str
) -> None:
    _silu_quant_path(monkeypatch, path)
    host = w8a8_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    gate, up = _silu_inputs(fresh_rng, 64, k)
    want = np.empty((64, n), dtype=np.uint16).view(gate.dtype)
    h = gate.copy()  # the kernel leaves h = bf16(silu(gate)·up) in its gate argument
    REFERENCE_KERNELS["w8a8_silu_quant_gemv"](h, up, host, want)
    want = want.view(np.uint16)
    for m in M_VALUES:
        buf, inner, init = guarded(cp, fresh_rng, m, n)
        g, u = cp.asarray(gate.view(np.uint16)), cp.asarray(up.view(np.uint16))
        cuda.launch("w8a8_silu_quant_gemv", g[:m], u[:m], w, inner)
        got = check_guard(buf, init, m, n)
        bits_equal(got, want[:m], f"w8a8_silu_quant_gemv m={m} (reference and batch invariance)")
        bits_equal(cp.asnumpy(g[:m]), h.view(np.uint16)[:m], f"w8a8_silu_quant_gemv m={m}: h in gate")
        bits_equal(cp.asnumpy(g[m:]), gate.view(np.uint16)[m:], f"w8a8_silu_quant_gemv m={m}: rows >= m")


@pytest.mark.parametrize("path", SILU_PATHS)
@pytest.mark.parametrize("k", [40960, 65536, 131056, MAX_K])
def test_fused_large_k(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, k: int, path: str
) -> None:
    """Long rows: K = 40960 (640 GEMV steps), 65536 (every register group of the 1-CTA kernel),
    131056 (a CTA's last groups partly filled; the 1-CTA route falls back to the pair) and MAX_K
    (every register group of the 8- and 2-CTA kernels), h in gate checked too."""
    _silu_quant_path(monkeypatch, path)
    host = w8a8_weight(fresh_rng, 20, k)
    w = cuda.upload(host)
    gate, up = _silu_inputs(fresh_rng, 11, k)
    want = np.empty((11, 20), dtype=np.uint16).view(gate.dtype)
    h = gate.copy()
    REFERENCE_KERNELS["w8a8_silu_quant_gemv"](h, up, host, want)
    buf, inner, init = guarded(cp, fresh_rng, 11, 20)
    g = cp.asarray(gate.view(np.uint16))
    cuda.launch("w8a8_silu_quant_gemv", g, cp.asarray(up.view(np.uint16)), w, inner)
    bits_equal(check_guard(buf, init, 11, 20), want.view(np.uint16), f"fused K={k}")
    bits_equal(cp.asnumpy(g), h.view(np.uint16), f"fused K={k}: h in gate")


def test_silu_quant_st_loops_over_rows(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``w8a8_silu_quant_st`` with more rows than CTAs (each CTA takes rows blockIdx.x, + G, ...;
    its shared reduction reused row after row), K = 1040 (130 groups: the last of a thread's
    register groups partly filled), gate codes of every sign and binade: h, codes and the down
    projection as the reference's."""
    from metrale.cuda import w8a8
    from metrale.cuda.runtime import sm_count

    if cp.cuda.Device().compute_capability < "90":
        pytest.skip("w8a8_silu_quant_st is built for sm_90")
    _silu_quant_path(monkeypatch, "st")
    k, n = 1040, 32
    m = configs.W8A8_SILU_QUANT_ST[2] * sm_count() + 37
    assert w8a8.silu_quant_st_grid(m, k) == m - 37
    host = w8a8_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    gate, up = _silu_inputs(fresh_rng, m, k)
    gate.view(np.uint16)[3] = np.arange(k, dtype=np.uint16) * 63  # codes spread over all binades
    want = np.empty((m, n), dtype=np.uint16).view(gate.dtype)
    h = gate.copy()
    REFERENCE_KERNELS["w8a8_silu_quant_gemv"](h, up, host, want)
    buf, inner, init = guarded(cp, fresh_rng, m, n)
    g = cp.asarray(gate.view(np.uint16))
    cuda.launch("w8a8_silu_quant_gemv", g, cp.asarray(up.view(np.uint16)), w, inner)
    bits_equal(check_guard(buf, init, m, n), want.view(np.uint16), f"st m={m}")
    bits_equal(cp.asnumpy(g), h.view(np.uint16), f"st m={m}: h in gate")


# ---- the prefill GEMMs (w8a8_gemm_{BM}x{BN}: mma.sync; w8a8_wgmma_{BM}x{BN}: wgmma, sm_90a) ----
ALL_TILES = sorted({**GEMM_TILES, **WGMMA_TILES})


def wgmma_expected() -> bool:
    """Whether the runtime builds w8a8_wgmma.cu (its ``// @arch`` target) for this device."""
    from metrale.cuda.runtime import file_arch

    try:
        file_arch("w8a8_wgmma.cu", f"sm_{cp.cuda.Device().compute_capability}")
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("tile", ALL_TILES)
def test_gemm_every_tile_matches_reference(cuda: Any, fresh_rng: np.random.Generator, tile: str) -> None:
    """Each tile forced at m and N off every tile (1, 7, 63, 65, 130, 257 rows; N = 37, 203,
    300) and K = 48, 2128 (33 full 64-byte and 16 full 128-byte K tiles, then a tail), strided
    (misaligned) outputs in guard bands, and one contiguous output (paired stores); the result
    also equals the GEMV tiers' (the routing's choice below 65 rows)."""
    from metrale.cuda.w8a8 import w8a8_gemv

    if tile in WGMMA_TILES and not wgmma_expected():
        pytest.skip("wgmma tiles are sm_90a only")
    for n, k in ((37, 48), (203, 2128), (300, 384)):
        host = w8a8_weight(fresh_rng, n, k)
        w = cuda.upload(host)
        x = rows(fresh_rng, 257, k)
        want = project(x, host, "A8").view(np.uint16)
        for m in (1, 7, 63, 65, 130, 257):
            codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
            buf, inner, init = guarded(cp, fresh_rng, m, n)
            w8a8_gemv(codes, w, inner, gemm=tile)
            bits_equal(check_guard(buf, init, m, n), want[:m], f"{tile} N={n} K={k} m={m}")
        out = cp.empty((257, n), dtype=cp.uint16)
        codes = cuda.launch("w8a8_quantize", cp.asarray(x.view(np.uint16)))
        w8a8_gemv(codes, w, out, gemm=tile)
        bits_equal(out.get(), want, f"{tile} N={n} K={k} contiguous")


@pytest.mark.parametrize("nb", sorted(SK_TIERS))
def test_split_k_wgmma_every_tier(cuda: Any, fresh_rng: np.random.Generator, nb: int) -> None:
    """Each split-K tier forced at m = 1, 2, 3, nb - 1, nb; K of 1, 17 and 33 tiles of 128 bytes
    (tails of 80 and 16 bytes), N off the 64-column tile; launched twice (the workspace and the
    counters the last CTA clears must be zero again: the second launch gives the same bits)."""
    from metrale.cuda.w8a8 import _sk_workspace, w8a8_gemv

    if not wgmma_expected():
        pytest.skip("wgmma kernels are sm_90a only")
    for n, k in ((37, 48), (203, 2128), (4100, 4112)):
        host = w8a8_weight(fresh_rng, n, k)
        w = cuda.upload(host)
        x = rows(fresh_rng, nb, k)
        want = project(x, host, "A8").view(np.uint16)
        for m in sorted({1, 2, 3, nb - 1, nb}):
            codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
            for rep in range(2):
                buf, inner, init = guarded(cp, fresh_rng, m, n)
                w8a8_gemv(codes, w, inner, gemm=f"w8a8_wgmma_sk_n{nb}")
                bits_equal(check_guard(buf, init, m, n), want[:m], f"sk_n{nb} N={n} K={k} m={m} launch {rep}")
            ws, cnt = _sk_workspace(n)
            assert not ws.any() and not cnt.any(), f"sk_n{nb} N={n}: workspace not cleared"


@pytest.mark.parametrize("gather", ["routed", "other"])
@pytest.mark.parametrize("bn", sorted(TMA_TIERS))
def test_stream_k_tma_every_tier(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, bn: int, gather: str
) -> None:
    """Each stream-K TMA tier forced at m = 1, bn - 1, bn, bn + 1 and 2 bn + 3 (three row tiles);
    N off the 128-row tile, K off the 128-byte tile (tails of 16 and 80 bytes); shapes whose
    tiles are whole in one CTA, split in two, and split over many CTAs (N = 130, K = 16400:
    2 x 129 units over one CTA per multiprocessor); launched twice (the parking flags must be
    zero again, so the second launch gives the same bits). Built with the routed owner's fixup
    and with the other one (configs.W8A8_TMA_GATHER: the pieces gathered at once or one by one)."""
    from metrale.cuda.w8a8 import _tma_workspace, w8a8_gemv

    if not wgmma_expected():
        pytest.skip("wgmma kernels are sm_90a only")
    if gather == "other":
        rebuild_with(monkeypatch, (WGMMA_FILE,), W8A8_TMA_GATHER=not configs.W8A8_TMA_GATHER)
    for n, k in ((37, 48), (203, 2128), (4100, 4112), (130, 16400)):
        host = w8a8_weight(fresh_rng, n, k)
        w = cuda.upload(host)
        mmax = 2 * bn + 3
        x = rows(fresh_rng, mmax, k)
        want = project(x, host, "A8").view(np.uint16)
        for m in sorted({1, bn - 1, bn, bn + 1, mmax}):
            codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
            for rep in range(2):
                buf, inner, init = guarded(cp, fresh_rng, m, n)
                w8a8_gemv(codes, w, inner, gemm=f"w8a8_tma_n{bn}")
                bits_equal(
                    check_guard(buf, init, m, n), want[:m], f"tma_n{bn} N={n} K={k} m={m} launch {rep}"
                )
            _, flag = _tma_workspace(bn)
            assert not flag.any(), f"tma_n{bn} N={n}: parking flags not cleared"


@pytest.mark.parametrize("gather", [False, True])
def test_stream_k_owner_gathers_many_pieces(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, gather: bool
) -> None:
    """One tile of K = MAX_K (1,024 K tiles over one CTA per multiprocessor: its owner gathers
    more later pieces than a warpgroup has threads) on the n64 tier, with each owner's fixup
    (configs.W8A8_TMA_GATHER), at 1 and 64 rows, launched twice."""
    from metrale.cuda.w8a8 import _tma_workspace, w8a8_gemv

    if not wgmma_expected():
        pytest.skip("wgmma kernels are sm_90a only")
    rebuild_with(monkeypatch, (WGMMA_FILE,), W8A8_TMA_GATHER=gather)
    assert configs.W8A8_TMA_GATHER == gather
    n, k = 100, MAX_K
    host = w8a8_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    x = rows(fresh_rng, 64, k)
    want = project(x, host, "A8").view(np.uint16)
    for m in (1, 64):
        codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
        for rep in range(2):
            buf, inner, init = guarded(cp, fresh_rng, m, n)
            w8a8_gemv(codes, w, inner, gemm="w8a8_tma_n64")
            bits_equal(check_guard(buf, init, m, n), want[:m], f"gather={gather} m={m} launch {rep}")
    assert not _tma_workspace(64)[1].any(), "parking flags not cleared"


DUAL_KERNELS = [
    *(f"w8a8_wgmma_sk_n{nb}" for nb in sorted(SK_TIERS)),
    *(f"w8a8_tma_n{bn}" for bn in sorted(TMA_TIERS)),
    *sorted(WGMMA_TILES),  # gate and up in one launch of the tile (second matrix from column tile t1)
]


#: (forced kernel, w8a8.TILE_PAIR): the routed launch with the tiles one per matrix and as a
#: pair, then each kernel forced.
DUAL_CASES = [(None, False), (None, True), *((g, False) for g in DUAL_KERNELS)]
DUAL_IDS = [f"{g or 'routed'}-{'pair' if p else 'two'}" for g, p in DUAL_CASES]


@pytest.mark.parametrize(("gemm", "pair"), DUAL_CASES, ids=DUAL_IDS)
def test_gemv_dual_matches_two_projections(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, gemm: str | None, pair: bool
) -> None:
    """Gate and up in one launch (``w8a8_gemv_dual``): the routed kernel at m = 1 .. 300 (split K
    to 32 rows, stream-K by the 2 N columns, beyond one launch per matrix or, w8a8.TILE_PAIR, one
    launch of the tile over both) or each split-K / stream-K kernel and wgmma tile forced at the
    rows it takes; every output the reference's bits, both guard bands intact, the two outputs
    with different row strides; launched twice (workspaces and flags cleared by the first
    launch); N off the tiles (the second matrix's first tile starts mid-workspace), K off the
    128-byte tile."""
    from metrale.cuda import w8a8
    from metrale.cuda.w8a8 import SK_BY_NAME, TMA_NAMES, _sk_workspace, _tma_workspace, w8a8_gemv_dual

    if gemm is not None and not wgmma_expected():
        pytest.skip("wgmma kernels are sm_90a only")
    monkeypatch.setattr(w8a8, "TILE_PAIR", pair)
    cap = SK_BY_NAME[gemm].bn if gemm in SK_BY_NAME else 2 * TMA_NAMES[gemm] + 3 if gemm in TMA_NAMES else 300
    for n, k in ((37, 48), (203, 2128), (130, 16400)):
        hg, hu = w8a8_weight(fresh_rng, n, k), w8a8_weight(fresh_rng, n, k)
        wg, wu = cuda.upload(hg), cuda.upload(hu)
        x = rows(fresh_rng, cap, k)
        want_g = project(x, hg, "A8").view(np.uint16)
        want_u = project(x, hu, "A8").view(np.uint16)
        ms = [1, 2, 3, 8, 16, 17, 32, 33, 64, 65, 128, 129, 200, 256, 257, 300]
        for m in sorted({mm for mm in ms if mm <= cap} | {cap}):
            codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
            for rep in range(2):
                bg, ig, init_g = guarded(cp, fresh_rng, m, n)
                bu, iu, init_u = guarded(cp, fresh_rng, m, n, g=5)  # up: row stride n + 10
                if gemm is None:
                    cuda.launch("w8a8_gemv_dual", codes, wg, ig, wu, iu)
                else:
                    w8a8_gemv_dual(codes, wg, ig, wu, iu, gemm=gemm)
                what = f"dual {gemm or 'routed'} N={n} K={k} m={m} launch {rep}"
                bits_equal(check_guard(bg, init_g, m, n), want_g[:m], f"{what}: gate")
                bits_equal(check_guard(bu, init_u, m, n, g=5), want_u[:m], f"{what}: up")
        ws, cnt = _sk_workspace(n)
        assert not ws.any() and not cnt.any(), f"dual N={n}: split-K workspace not cleared"
        for bn in TMA_TIERS:
            assert not _tma_workspace(bn)[1].any(), f"dual N={n}: tma_n{bn} flags not cleared"


#: The fused entry's cases (id, forced tile, guard widths of out and out2, SILU_TILE_ST,
#: TMA_SILU): routed with rows 16-byte aligned (the pair tile with the SiLU step past 256 rows at
#: these N, below it the dual launch and the SiLU-quantize step), routed with out's rows off 16
#: bytes (the dual launch and an aligned copy of h given back), then each SiLU tile forced at
#: every m; then the SiLU tiles' compact-table forms (w8a8.SILU_TILE_ST), routed and forced;
#: then the stream-K pair's SiLU form (w8a8.TMA_SILU), routed and each tier forced.
FUSED_CASES = [
    ("routed", None, 8, 8, False, False),
    ("routed-off16", None, 5, 8, False, False),
    *((t, t, 8, 8, False, False) for t in sorted(configs.W8A8_SILU_TILES)),
    ("routed-st", None, 8, 8, True, False),
    *((f"{t}-st", t, 8, 8, True, False) for t in sorted(configs.W8A8_SILU_TILES)),
    ("routed-tma", None, 8, 8, True, True),
    *((n, n, 8, 8, True, True) for n in (f"w8a8_tma_silu_n{bn}" for bn in configs.W8A8_TMA_SILU_TIERS)),
]


@pytest.mark.parametrize(
    ("gemm", "ga", "gb", "st", "tma"), [c[1:] for c in FUSED_CASES], ids=[c[0] for c in FUSED_CASES]
)
def test_gemv_dual_silu_quant_matches_reference(
    cuda: Any,
    fresh_rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
    gemm: str | None,
    ga: int,
    gb: int,
    st: bool,
    tma: bool,
) -> None:
    """``w8a8_gemv_dual_silu_quant``: h over out, up in out2, h's A8 codes and scales the
    reference's bits at m = 1 .. 300 (every edge row kind of x: NaN / Inf rows give NaN scales,
    a zero row amax 0), both guard bands intact, launched twice; N off the tiles' column halves
    (208 = 2 x 96 + 16; 48 below one half and below the stream-K form's 64 columns), K off the
    128-byte tile. Routed on aligned rows the SiLU tile must take m = 257 and 300, and with
    TMA_SILU the stream-K form m = 33 and 64 (else the case would pass on the fallback)."""
    from metrale.cuda import w8a8
    from metrale.cuda.w8a8 import w8a8_gemv_dual_silu_quant

    if gemm is not None and not wgmma_expected():
        pytest.skip("wgmma kernels are sm_90a only")
    monkeypatch.setattr(w8a8, "FUSED_SILU", True)
    monkeypatch.setattr(w8a8, "SILU_TILE_ST", st)
    monkeypatch.setattr(w8a8, "TMA_SILU", tma)
    ref = REFERENCE_KERNELS["w8a8_gemv_dual_silu_quant"]
    ms = [1, 2, 3, 16, 33, 64, 65, 128, 129, 200, 256, 257, 300]
    for n, k in ((208, 2128), (48, 48), (1040, 4112)):
        hg, hu = w8a8_weight(fresh_rng, n, k), w8a8_weight(fresh_rng, n, k)
        wg, wu = cuda.upload(hg), cuda.upload(hu)
        x = rows(fresh_rng, ms[-1], k)
        want_h = np.empty((ms[-1], n), dtype=x.dtype)
        want_u = np.empty_like(want_h)
        want_c = ref(quantize_a8(x), hg, want_h, hu, want_u)  # per row: sliced for every m
        for m in ms:
            if gemm is None and ga == 8 and m > 256 and wgmma_expected():
                assert w8a8.silu_tile(m, n) is not None, f"N={n} m={m}: the SiLU tile does not route"
            if gemm is None and tma and m in (33, 64) and wgmma_expected():
                assert w8a8.tma_silu_tier(m, n) == 64, f"N={n} m={m}: the stream-K SiLU form does not route"
            codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
            for rep in range(2):
                bg, ig, init_g = guarded(cp, fresh_rng, m, n, g=ga)  # g = 8: 16-byte aligned rows
                bu, iu, init_u = guarded(cp, fresh_rng, m, n, g=gb)
                if gemm is None:
                    got = cuda.launch("w8a8_gemv_dual_silu_quant", codes, wg, ig, wu, iu)
                else:
                    got = w8a8_gemv_dual_silu_quant(codes, wg, ig, wu, iu, gemm=gemm)
                what = f"dual_silu_quant {gemm or 'routed'} g={ga},{gb} N={n} K={k} m={m} launch {rep}"
                bits_equal(check_guard(bg, init_g, m, n, g=ga), want_h.view(np.uint16)[:m], f"{what}: h")
                bits_equal(check_guard(bu, init_u, m, n, g=gb), want_u.view(np.uint16)[:m], f"{what}: up")
                assert_bits_equal(cp.asnumpy(got.q), want_c.q[:m], f"{what}: codes")
                assert_bits_equal(cp.asnumpy(got.scale), want_c.scale[:m], f"{what}: scales")


def test_gemv_dual_silu_quant_refuses(cuda: Any, fresh_rng: np.random.Generator) -> None:
    """A forced tile that is not a pair tile, or out rows the fused tile's SiLU step cannot read,
    and N off 16, are named."""
    from metrale.cuda.w8a8 import w8a8_gemv_dual_silu_quant
    from metrale.errors import MetraleError

    wg, wu = (cuda.upload(w8a8_weight(fresh_rng, 48, 32)) for _ in range(2))
    codes = cuda.launch("w8a8_quantize", cp.asarray(rows(fresh_rng, 3, 32, finite=True).view(np.uint16)))
    out = cp.zeros((3, 48), dtype=cp.uint16)
    with pytest.raises(MetraleError, match="gemm='w8a8_wgmma_128x128', want one of"):
        w8a8_gemv_dual_silu_quant(codes, wg, out, wu, out.copy(), gemm="w8a8_wgmma_128x128")
    if wgmma_expected():
        odd = cp.zeros((3, 52), dtype=cp.uint16)[:, 4:]  # rows 104 bytes apart
        with pytest.raises(MetraleError, match="wants out, out2 rows 16-byte aligned"):
            w8a8_gemv_dual_silu_quant(codes, wg, odd, wu, out, gemm="w8a8_wgmma_256x128")
        with pytest.raises(MetraleError, match="wants out, out2 rows 16-byte aligned"):
            w8a8_gemv_dual_silu_quant(codes, wg, odd, wu, out, gemm="w8a8_tma_silu_n64")
    w40 = cuda.upload(w8a8_weight(fresh_rng, 40, 32))
    with pytest.raises(MetraleError, match="has N=40, want a multiple of 16"):
        w8a8_gemv_dual_silu_quant(codes, w40, cp.zeros((3, 40), cp.uint16), w40, cp.zeros((3, 40), cp.uint16))


def test_split_k_refuses_more_rows_than_its_tier(cuda: Any, fresh_rng: np.random.Generator) -> None:
    from metrale.cuda.w8a8 import w8a8_gemv
    from metrale.errors import MetraleError

    host = w8a8_weight(fresh_rng, 16, 64)
    codes = cuda.launch("w8a8_quantize", cp.asarray(rows(fresh_rng, 17, 64).view(np.uint16)))
    with pytest.raises(MetraleError, match="takes at most 16 rows, got m=17"):
        w8a8_gemv(codes, cuda.upload(host), cp.empty((17, 16), dtype=cp.uint16), gemm="w8a8_wgmma_sk_n16")


def test_gemm_routing_past_the_gemv_tiers(cuda: Any, fresh_rng: np.random.Generator) -> None:
    """w8a8_gemv's own choice from GEMM_MIN_ROWS rows (both tile sizes by grid size)."""
    from metrale.cuda.w8a8 import GEMM_MIN_ROWS, gemm_tile

    n, k = 2100, 80
    host = w8a8_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    x = rows(fresh_rng, 2100, k)
    want = project(x, host, "A8").view(np.uint16)
    ms = (GEMM_MIN_ROWS, 200, 2100)
    routed = WGMMA_TILES if wgmma_expected() else GEMM_TILES
    assert all(gemm_tile(m, n).name in routed for m in ms)
    for m in ms:
        codes = cuda.launch("w8a8_quantize", cp.asarray(x[:m].view(np.uint16)))
        buf, inner, init = guarded(cp, fresh_rng, m, n)
        cuda.launch("w8a8_gemv", codes, w, inner)
        bits_equal(check_guard(buf, init, m, n), want[:m], f"w8a8_gemv m={m} (GEMM)")


def test_gemm_adversarial_extremes(cuda: Any, fresh_rng: np.random.Generator) -> None:
    """Largest int32 sums (weights all -128 / 127 against codes ±127 over K = 16384), rows of
    zeros, Inf and NaN (scale NaN), a subnormal row amax, all in one 130-row GEMM."""
    from metrale.cuda.w8a8 import w8a8_gemv

    n, k = 70, 16384
    q = np.full((n, k), -128, np.int8)
    q[1::2] = 127
    q[5] = fresh_rng.integers(-128, 128, k, dtype=np.int16).astype(np.int8)
    host = W8a8Weight(weight=q, weight_scale=np.exp2(fresh_rng.uniform(-12, 2, n)).astype(F32), name="w8x")
    w = cuda.upload(host)
    x = rows(fresh_rng, 130, k)
    x[0] = np.float32(3.0)  # every code 127
    x[1] = np.float32(-3.0)
    x[2] = 0
    x[3, 7] = np.inf
    x[4, 9] = np.nan
    x[5] = (np.asarray(x[5], dtype=F32) * F32(2.0**-125)).astype(x.dtype)
    want = project(x, host, "A8").view(np.uint16)
    codes = cuda.launch("w8a8_quantize", cp.asarray(x.view(np.uint16)))
    for tile in [*GEMM_TILES, *((*WGMMA_TILES, *TMA_NAMES) if wgmma_expected() else ())]:
        buf, inner, init = guarded(cp, fresh_rng, 130, n)
        w8a8_gemv(codes, w, inner, gemm=tile)
        bits_equal(check_guard(buf, init, 130, n), want, f"{tile} extremes")


@pytest.mark.parametrize("fused", [False, True])
def test_w8a8_only_layer_prefill_chunks(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fused: bool
) -> None:
    """A W8A8-only layer's forward_prefill past the arm's cap (the GEMM for gate, up and down),
    in one chunk and in 100-row chunks (chunk boundaries off every tile): the reference's bits in
    output, gate_out (h) and up_out; ``fused``: the SiLU step in the pair tile where it routes
    (the 333-row chunk), the dual launch and the SiLU-quantize step elsewhere."""
    import layer_cases as lc

    import metrale.reference.layer as layer_mod
    from metrale.backend import get_backend
    from metrale.cuda import w8a8
    from metrale.reference.context import ForwardContext

    monkeypatch.setattr(w8a8, "FUSED_SILU", fused)
    parts = lc.make_parts("w8a8_only", hidden=80, inter=208, seed=int(fresh_rng.integers(1 << 30)))
    ref, gpu = parts.layer(get_backend("reference")), parts.layer(get_backend("cuda"))
    m = 333
    x = rows(fresh_rng, m, 80)
    for chunk in (layer_mod.W8A8_PREFILL_ROWS, 100):
        monkeypatch.setattr(layer_mod, "W8A8_PREFILL_ROWS", chunk)
        outs = []
        for layer in (ref, gpu):
            ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=m)
            layer.forward_prefill(layer.backend.rows(x, 80, name="x"), m, ctx)
            bufs = (ctx.buffers.output(), ctx.buffers.gate_out(), ctx.buffers.up_out())
            outs.append([layer.backend.to_numpy(a[:m]).view(np.uint16) for a in bufs])
        for name, got, want in zip(("output", "gate_out", "up_out"), outs[1], outs[0], strict=True):
            bits_equal(got, want, f"w8a8-only forward_prefill m={m} chunk={chunk} fused={fused}: {name}")
