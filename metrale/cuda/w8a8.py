"""W8A8 launchers (kernels in ``kernels/w8a8.cu``; arithmetic.md § a8, § projection, § w8a8-arm):
``w8a8_quantize`` (vLLM per-token int8), ``w8a8_gemv`` (S = q_a · q_w over all of K in int32,
exact: dp4a for one or two rows; on sm_90 (``w8a8_wgmma.cu``, wgmma) split-K kernels for the
verify rows and a tiled GEMM from ``GEMM_MIN_ROWS`` rows; elsewhere the mma.sync m16n8k32 GEMV
tiers and the tiled cp.async GEMM ``w8a8_gemm_{BM}x{BN}``;
y = bf16((f32(S)·s_a)·s_w[n])) and
``w8a8_silu_quant_gemv``, the fused step of the seed engine's W8A8 arm: h = bf16(silu[gate]·f32(up)),
its per-row quantization and the down GEMV, with the same bits as the three separate steps.

The fused entry point issues two kernels on sm_90 up to 32 rows: ``w8a8_silu_quant`` (a cluster
of 8 CTAs per row: each holds h of an eighth of the row in registers and writes it over gate;
the row's amax is reduced over the cluster's distributed shared memory; then the scale and the
codes) into a per-device scratch buffer, then the GEMV above. Beyond (where the pair is faster)
and below sm_90 the first step is two kernels: ``w8a8_silu_parts`` (h of each 1024-element slice
of a row and the slice's amax) and ``w8a8_quantize_parts`` (the row's scale from its slices, the
codes). One launch that quantizes inside every GEMV CTA recomputes h for every row in every CTA
(the row's amax needs all of K before any code exists): measured 2.5x the weight-streaming floor
at m = 1 and 36x at m = 32 on an H200; one quantize CTA per row took 7-10 us (two dependent
passes of SiLU-table reads on one multiprocessor), hence the row spread over 8 CTAs or slices.
The scratch buffer makes the entry point graph-capturable; two streams running it at once on one
device would share it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrale.cuda import configs, pdl, tma
from metrale.cuda.launch_args import (
    built_launchers,
    cdiv,
    device_out,
    device_rows,
    tier,
    tier_launch,
    weight_arrays,
)
from metrale.cuda.runtime import device_id, get_kernel, set_dynamic_smem, sm_count
from metrale.cuda.weights import DeviceWeight, device_table, to_device
from metrale.errors import MetraleError
from metrale.reference.formats.w8a8 import MAX_K, W8a8Weight

CU_FILE = "w8a8.cu"
#: Tensor-core GEMV row tiers (activation rows per CTA) -> output columns per CTA.
MMA_TIERS = configs.W8A8_MMA_TIERS
#: Warps per CTA (each takes an equal run of K). Measured on an H200 (12288x4096 and
#: 4096x12288): 8 is faster for the 32-row tier and whenever the grid has fewer than two CTAs
#: per multiprocessor; 4 and 8 are within 2% otherwise.
MMA_WARPS = configs.W8A8_MMA_WARPS
#: Up to 2 rows go to the dp4a kernels ``w8a8_gemv_r{R}`` (one row: 1.14x the floor at
#: 12288x4096 against the MMA kernels' 1.53x, a single row leaves 7 of 8 MMA columns idle).
GEMV_TIERS = configs.W8A8_GEMV_TIERS


#: Prefill GEMM tiles ``w8a8_gemm_{bm}x{bn}`` by kernel name, in routing order
#: (``configs.W8A8_GEMM_TILES``).
GEMM_TILES = {t.name: t for t in configs.W8A8_GEMM_TILES}
#: The warpgroup (wgmma, sm_90a) GEMM tiles ``w8a8_wgmma_{bm}x{bn}`` in ``WGMMA_FILE``: on an
#: sm_90 device they take the prefill rows, elsewhere the file does not build and the
#: mma.sync tiles above do (the same bits: S is an exact int32 sum).
WGMMA_FILE = "w8a8_wgmma.cu"
WGMMA_TILES = {t.name: t for t in configs.W8A8_WGMMA_TILES}
#: Split-K wgmma kernels for SK_MIN_ROWS .. SK_MAX_ROWS rows: activation rows nb -> the
#: kernel ``w8a8_wgmma_sk_n{nb}`` (configs.W8a8WgmmaTile). The weights are streamed once by
#: about SK_CTAS_PER_SM CTAs per multiprocessor; int32 partial sums are added with atomics into
#: a zeroed per-device workspace that the last CTA of a column tile reads and clears.
SK_TIERS = configs.W8A8_SK_TIERS
SK_BY_NAME = {t.name: t for t in SK_TIERS.values()}
SK_MIN_ROWS = configs.W8A8_SK_MIN_ROWS
SK_CTAS_PER_SM = configs.W8A8_SK_CTAS_PER_SM
#: The most rows the split-K kernels take (METRALE_W8A8_SK_MAX_ROWS moves it, for benchmarks of
#: the routing; at most the largest tier).
_SK_MAX_ENV = os.environ.get("METRALE_W8A8_SK_MAX_ROWS", str(configs.W8A8_SK_MAX_ROWS))
if not _SK_MAX_ENV.isdigit() or int(_SK_MAX_ENV) > max(SK_TIERS):
    raise MetraleError(
        f"METRALE_W8A8_SK_MAX_ROWS={_SK_MAX_ENV!r}: want an int in 0 .. {max(SK_TIERS)} "
        "(the largest split-K tier)"
    )
SK_MAX_ROWS = int(_SK_MAX_ENV)
#: Stream-K GEMMs on TMA ``w8a8_tma_n{bn}`` (sm_90a, ``WGMMA_FILE``): activation rows per tile ->
#: stages. A persistent CTA per multiprocessor takes an equal run of the (tile, 128-byte K tile)
#: units; a tile split between CTAs has its later pieces parked in a per-device buffer and added
#: by the CTA holding its first piece (int32: exact in any order). ``tma_tier`` routes rows to
#: them (configs.W8A8_TMA_ROWS).
TMA_TIERS = configs.W8A8_TMA_TIERS
TMA_MIN_ROWS, TMA_MAX_ROWS = configs.W8A8_TMA_ROWS
TMA_NAMES = {f"w8a8_tma_n{bn}": bn for bn in TMA_TIERS}
#: Rows from which ``w8a8_gemv`` runs the tiled GEMM (below: the GEMV tiers, which stream the
#: weights once per 32 rows; 65 = past the W8A8 arm's row cap, i.e. prefill only).
GEMM_MIN_ROWS = 65
#: Gate and up in one launch of the wgmma tile (``w8a8_gemv_dual`` where the stream-K pair does
#: not take the rows; the tile by ``gemm_tile(m, N, 2)`` from configs.W8A8_WGMMA_ROUTED["pair"]).
#: Qwen3-8B W8A8 FFN on an H100 (docs/performance-log.md "2026-12-07 (c)"): 127.6 / 123.5 /
#: 179.8 / 322.2 µs at m = 192 / 256 / 512 / 1024 against 145.7 / 140.6 / 212.6 / 330.4 in two
#: launches. Only where ``pair_pays``; METRALE_W8A8_TILE_PAIR=0 turns it off (benchmarks; the
#: same bits).
TILE_PAIR = os.environ.get("METRALE_W8A8_TILE_PAIR", "1") == "1"
#: ``w8a8_gemv_dual_silu_quant`` forms h in the pair tile's epilogue where ``silu_tile`` routes
#: (METRALE_W8A8_FUSED_SILU=0 turns it off, for benchmarks); otherwise the dual launch and the
#: SiLU-quantize step (the same bits). With SILU_TILE_ST 2-7 % off the FFN at 96..512 rows (H100,
#: docs/performance-log.md "2026-12-07 (j)").
FUSED_SILU = os.environ.get("METRALE_W8A8_FUSED_SILU", "1") == "1"
#: The SiLU tiles read the compact SiLU table from shared memory (``w8a8_wgmma_silu_st_*``: copied
#: into the stage slots after the mainloop) instead of gathering from the whole table
#: (configs.W8A8_SILU_TILE_ST; the same bits).
SILU_TILE_ST = configs.W8A8_SILU_TILE_ST


@dataclass(frozen=True)
class DeviceA8Codes:
    """A8 codes on the device: ``q`` CuPy int8 [m, K], ``scale`` CuPy f32 [m] (NaN for a row
    holding Inf/NaN)."""

    q: Any
    scale: Any


def upload_w8a8(w: W8a8Weight) -> DeviceWeight:
    """int8 weight [N, K] and f32 weight_scale [N] on the device."""
    return DeviceWeight(
        host=w, arrays={"weight": to_device(w.weight), "weight_scale": to_device(w.weight_scale)}
    )


def w8a8_quantize(x: Any) -> DeviceA8Codes:
    """A8 codes of bf16 rows x [m, K] (arithmetic.md § a8)."""
    import cupy

    from metrale.cuda.backend import as_device_bits

    a = as_device_bits(x, "x")
    if a.ndim != 2 or a.shape[1] % 16 or a.shape[1] == 0:
        raise MetraleError(f"x: shape {tuple(a.shape)}, want 2-D [m, K] with K a multiple of 16")
    m, k = a.shape
    a = device_rows(a, k, m, "x")
    q = cupy.empty((m, k), dtype=cupy.int8)
    s = cupy.empty((m,), dtype=cupy.float32)
    if m:
        pdl.launch(
            get_kernel(CU_FILE, "w8a8_quantize"),
            (m,),
            (256,),
            (a, np.int64(a.strides[0] // 2), np.int32(k), q, s),
        )
    return DeviceA8Codes(q=q, scale=s)


def mma_kernel_name(m: int, n: int, warps: int | None = None) -> tuple[str, int, int]:
    """(kernel name, columns per CTA, rows per CTA) of the tensor-core GEMV for m rows, N = n."""
    r = tier(m, dict.fromkeys(MMA_TIERS, 0))
    cols = MMA_TIERS[r]
    if warps is None:
        warps = 8 if r == 32 or cdiv(n, cols) * cdiv(m, r) < 2 * sm_count() else 4
    if warps not in MMA_WARPS:
        raise MetraleError(f"w8a8_gemv: warps={warps}, want one of {MMA_WARPS}")
    return f"w8a8_mma_r{r}_w{warps}", cols, r


def wgmma_built() -> bool:
    """Whether the wgmma kernels (``WGMMA_FILE``, sm_90a) built on this device."""
    names = [*WGMMA_TILES, *(t.name for t in SK_TIERS.values()), *TMA_NAMES]
    return all(get_kernel(WGMMA_FILE, name) is not None for name in names)


_sk_work: dict[tuple[int, int], tuple[Any, Any]] = {}


def _sk_workspace(n: int) -> tuple[Any, Any]:
    """The zeroed int32 [2 max(SK_TIERS), n] partial sums (m rows per matrix, two matrices in a
    dual launch) and uint32 column-tile counters (one per 64 columns of each matrix: enough for
    every tier) of the split-K kernels on this device (every launch leaves them zero; one stream
    at a time)."""
    key = (device_id(), n)
    if key not in _sk_work:
        import cupy

        _sk_work[key] = (
            cupy.zeros((2 * max(SK_TIERS), n), dtype=cupy.int32),
            cupy.zeros((2 * cdiv(n, 64),), dtype=cupy.uint32),
        )
    return _sk_work[key]


_tma_work: dict[tuple[int, int], tuple[Any, Any]] = {}


def _tma_workspace(bn: int) -> tuple[Any, Any]:
    """The int32 parking slots [SMs][2][64 bn] and the zeroed uint32 flags [SMs][2] of
    ``w8a8_tma_n{bn}`` on this device (every launch leaves the flags zero; one stream at a time)."""
    key = (device_id(), bn)
    if key not in _tma_work:
        import cupy

        _tma_work[key] = (
            cupy.empty((sm_count() * 2 * 64 * bn,), dtype=cupy.int32),
            cupy.zeros((sm_count() * 2,), dtype=cupy.uint32),
        )
    return _tma_work[key]


def tma_smem(bn: int) -> int:
    """Dynamic shared memory of ``w8a8_tma_n{bn}``: its stages of ``configs.W8A8_TMA_KS`` K tiles
    of 128 weight rows and bn activation rows of 128 bytes, and 1024 bytes to align them to the
    swizzle's period."""
    return TMA_TIERS[bn] * configs.W8A8_TMA_KS * (128 + bn) * 128 + 1024


#: ``w8a8_tma_silu_n{bn}``: the stream-K pair with the SiLU step in its epilogue
#: (configs.W8A8_TMA_SILU_TIERS: activation rows per tile -> stages).
TMA_SILU_TIERS = configs.W8A8_TMA_SILU_TIERS
TMA_SILU_NAMES = {f"w8a8_tma_silu_n{bn}": bn for bn in TMA_SILU_TIERS}
#: ``w8a8_gemv_dual_silu_quant`` takes it where the stream-K pair serves gate and up and no SiLU
#: tile does (``tma_silu_tier``); off until measured against the stream-K pair and the
#: SiLU-quantize step (``METRALE_W8A8_TMA_SILU=1`` turns it on).
TMA_SILU = os.environ.get("METRALE_W8A8_TMA_SILU", "0") == "1"


def tma_silu_smem(bn: int, words: int) -> int:
    """Dynamic shared memory of ``w8a8_tma_silu_n{bn}``: its stages (as ``tma_smem``'s, KS = 1),
    1024 bytes of alignment, u's exchange (128 bn bytes), the rows' amax reduction (32 bn) and
    the compact SiLU table's ``words`` floats in whole 16-byte groups."""
    return TMA_SILU_TIERS[bn] * (128 + bn) * 128 + 1024 + 160 * bn + 16 * cdiv(words, 4)


def tma_silu_tier(m: int, n: int) -> int | None:
    """The activation rows per tile of the stream-K SiLU kernel ``w8a8_gemv_dual_silu_quant``
    routes m rows of gate and up (N = n each) to, or None: where TMA_SILU and FUSED_SILU, the
    stream-K pair takes the rows (``tma_tier(m, 2 n, pair=True)``) and its SiLU form built."""
    if not (TMA_SILU and FUSED_SILU):
        return None
    bn = tma_tier(m, 2 * n, True)
    if bn is None or bn not in TMA_SILU_TIERS or get_kernel(WGMMA_FILE, f"w8a8_tma_silu_n{bn}") is None:
        return None
    return bn


def tma_tier(m: int, n: int, pair: bool = False) -> int | None:
    """The stream-K tier (activation rows per tile) ``w8a8_gemv`` routes m rows times N = n to, or
    None: every m in TMA_MIN_ROWS .. GEMM_MIN_ROWS - 1, and m up to TMA_MAX_ROWS where the tiled
    GEMM's grid would fill fewer than ``configs.W8A8_TMA_GEMM_FILL`` of the multiprocessors;
    ``pair`` (gate and up in one launch, n their 2 N columns): every m up to
    ``configs.W8A8_TMA_PAIR_MAX_ROWS`` too."""
    if not TMA_MIN_ROWS <= m <= TMA_MAX_ROWS or not wgmma_built():
        return None
    if m >= GEMM_MIN_ROWS and not (pair and m <= configs.W8A8_TMA_PAIR_MAX_ROWS):
        t = gemm_tile(m, n)
        if cdiv(m, t.bm) * cdiv(n, t.bn) >= configs.W8A8_TMA_GEMM_FILL * sm_count():
            return None
    return tier(m, dict.fromkeys(TMA_TIERS, 0))


@dataclass(frozen=True)
class _Second:
    """The second matrix of a dual launch (up beside gate): the same N and K as the first."""

    w: Any
    arr: dict[str, Any]
    out: Any
    ldo: int


def _tma_launch(
    q: Any,
    scale: Any,
    w: Any,
    arr: dict[str, Any],
    out: Any,
    ldo: int,
    bn: int,
    second: _Second | None = None,
) -> None:
    """One ``w8a8_tma_n{bn}`` launch: a CTA per multiprocessor (at most one per unit); with
    ``second``, the units of both matrices in one list."""
    m, k = q.shape
    name = f"w8a8_tma_n{bn}"
    kern = get_kernel(WGMMA_FILE, name)
    if kern is None:
        raise MetraleError(f"w8a8_gemv: {name} did not build on this device")
    smem = tma_smem(bn)
    set_dynamic_smem(kern, smem)
    nmat = 1 if second is None else 2
    units = nmat * cdiv(w.n, 128) * cdiv(m, bn) * cdiv(cdiv(k, 128), configs.W8A8_TMA_KS)
    ctas = min(sm_count(), units)
    part, flag = _tma_workspace(bn)
    tw = tma.row_tiles(arr["weight"], w.n, k, k, 128)
    s2 = second or _Second(w, arr, out, ldo)
    tw2 = tw if second is None else tma.row_tiles(s2.arr["weight"], w.n, k, k, 128)
    tq = tma.row_tiles(q, m, k, int(q.strides[0]), bn)
    args = (
        tw,
        tq,
        arr["weight_scale"],
        np.int32(w.n),
        np.int32(k),
        scale,
        np.int32(m),
        out,
        np.int64(ldo),
        part,
        flag,
        tw2,
        s2.arr["weight_scale"],
        s2.out,
        np.int64(s2.ldo),
        np.int32(nmat),
    )
    pdl.launch(kern, (ctas,), (384,), args, smem)


def sk_split(n: int, k: int, ra: int) -> tuple[int, int]:
    """(K tiles of 128 bytes per split, splits) for N = n, K = k and ra weight rows per CTA:
    about SK_CTAS_PER_SM CTAs per multiprocessor over the ceil(n / ra) column tiles, every
    split non-empty."""
    tiles = cdiv(k, 128)
    splits = max(1, min(tiles, cdiv(SK_CTAS_PER_SM * sm_count(), cdiv(n, ra))))
    kps = cdiv(tiles, splits)
    return kps, cdiv(tiles, kps)


def wave_work(t: configs.W8a8WgmmaTile, m: int, n: int, gz: int = 1) -> int:
    """Output elements per multiprocessor of tile ``t`` over ``gz`` matrices of m x N = n, counted
    in whole waves: ceil(CTAs / SMs) x BM x BN."""
    return cdiv(cdiv(m, t.bm) * cdiv(n, t.bn) * gz, sm_count()) * t.bm * t.bn


def pair_pays(m: int, n: int) -> bool:
    """Whether gate and up as one launch of the pair's tile take no more wave work than two
    launches of the single matrix's tile (``gemm_tile``): Qwen3-8B (N = 12288) at 129..256 rows
    one wave of 128 CTAs of 256x192 against two of 96; Llama-3-8B (N = 14336) at 96 rows the
    pair's 128x192 would take two waves where two launches of 128x128 take one each."""
    return wave_work(gemm_tile(m, n, 2), m, n, 2) <= 2 * wave_work(gemm_tile(m, n), m, n)


def gemm_tile(m: int, n: int, gz: int = 1) -> configs.W8a8GemmTile | configs.W8a8WgmmaTile:
    """The prefill tile for m rows, N = n (``gz`` = 2: two matrices of that shape in one
    launch, gate and up). The wgmma tiles where they built (configs.W8A8_WGMMA_ROUTED's for one
    matrix or the pair): the one with the least work per multiprocessor counted in whole waves
    (ceil(CTAs / SMs) x BM x BN; a tie to the larger tile). Measured on an H200
    (VARIANT_MEASUREMENTS w8a8-gemm): 96 CTAs of 256x128 against 192 of 128x128 (gate
    12288x4096 at m = 192 / 256) 37.5 / 36.3 against 42.7 / 43.5 us; 3 waves of 128x128 against
    2 of 256x128 (m = 384) 62.7 against 64.0. Else the mma.sync tiles: the first whose grid
    fills ``minb`` CTAs on every multiprocessor, else the last (smallest)."""
    if wgmma_built():
        tiles = [WGMMA_TILES[name] for name in configs.W8A8_WGMMA_ROUTED["pair" if gz > 1 else "one"]]
        return min(tiles, key=lambda t: (wave_work(t, m, n, gz), -t.bm * t.bn))
    tiles = list(GEMM_TILES.values())
    for t in tiles:
        if cdiv(m, t.bm) * cdiv(n, t.bn) >= t.minb * sm_count():
            return t
    return tiles[-1]


def pair_tile(m: int, n: int, silu: bool = False) -> configs.W8a8WgmmaTile | None:
    """The wgmma tile that takes gate and up (m rows, N = n each) in one launch where neither
    the stream-K nor the split-K kernels take the pair: from GEMM_MIN_ROWS rows where TILE_PAIR
    and ``pair_pays``; else None (two launches). ``silu``: the tile with the SiLU step in its
    epilogue (``silu_tile``), which goes ahead of the stream-K pair: Qwen3-8B W8A8 FFN at 96 /
    128 rows 97.5-99.3 / 102.6-103.1 µs on the 128x192 tile's against 99.7-100.4 / 104.6-105.5
    on the stream-K pair and the SiLU-quantize step (H100, performance-log.md "2026-12-07 (j)")."""
    if not (TILE_PAIR and m >= GEMM_MIN_ROWS and wgmma_built() and pair_pays(m, n)):
        return None
    if split_k_tier(m) is not None or (not silu and tma_tier(m, 2 * n, True) is not None):
        return None
    tile = gemm_tile(m, n, 2)
    return tile if isinstance(tile, configs.W8a8WgmmaTile) else None


def split_k_tier(m: int) -> configs.W8a8WgmmaTile | None:
    """The split-K kernel ``w8a8_gemv`` routes m rows to, or None: every m in SK_MIN_ROWS ..
    SK_MAX_ROWS (the wgmma kernels only)."""
    if not SK_MIN_ROWS <= m <= SK_MAX_ROWS or not wgmma_built():
        return None
    return SK_TIERS[tier(m, SK_TIERS)]


def _gemv_launch(
    q: Any,
    scale: Any,
    w: Any,
    arr: dict[str, Any],
    out: Any,
    ldo: int,
    warps: int | None,
    gemm: str | None = None,
    second: _Second | None = None,
) -> None:
    """One launch over the m rows of codes ``q``/``scale``: the stream-K or split-K wgmma kernels
    where ``tma_tier`` / ``split_k_tier`` say, else (other GPUs) the dp4a kernels and the
    mma.sync GEMV tiers up to ``max(MMA_TIERS)``, the tiled GEMM (wgmma where built) beyond
    (``warps`` / ``gemm`` force a GEMV CTA shape / a kernel by name). With ``second`` (same N
    and K) the stream-K and split-K kernels take both matrices in one launch (routed by their
    2 N columns), and the wgmma tiles where TILE_PAIR and ``pair_pays`` (or ``gemm`` names
    one); every other kernel is launched once per matrix."""
    m, k = q.shape
    args = (
        arr["weight"],
        arr["weight_scale"],
        np.int32(w.n),
        np.int32(k),
        q,
        np.int64(q.strides[0]),
        scale,
        np.int32(m),
        out,
        np.int64(ldo),
    )
    cols = w.n if second is None else 2 * w.n
    bn = (
        TMA_NAMES.get(gemm)
        if gemm is not None
        else tma_tier(m, cols, second is not None)
        if warps is None
        else None
    )
    if bn is not None:
        _tma_launch(q, scale, w, arr, out, ldo, bn, second)
        return
    sk = SK_BY_NAME.get(gemm) if gemm is not None else split_k_tier(m) if warps is None else None
    if sk is not None:
        if m > sk.bn:
            raise MetraleError(f"w8a8_gemv: gemm={sk.name!r} takes at most {sk.bn} rows, got m={m}")
        kern = get_kernel(WGMMA_FILE, sk.name)
        if kern is None:
            raise MetraleError(f"w8a8_gemv: {sk.name} did not build on this device")
        set_dynamic_smem(kern, sk.smem)
        kps, splits = sk_split(cols, k, sk.bm)
        ws, cnt = _sk_workspace(w.n)
        t1 = cdiv(w.n, sk.bm)
        s2 = second or _Second(w, arr, out, ldo)
        tail = (s2.arr["weight"], s2.arr["weight_scale"], s2.out, np.int64(s2.ldo), np.int32(t1))
        grid = (t1 if second is None else 2 * t1, splits)
        pdl.launch(kern, grid, (sk.threads,), (*args, ws, cnt, np.int32(kps), *tail), sk.smem)
        return
    pair = second is not None and (
        gemm in WGMMA_TILES or (gemm is None and warps is None and pair_tile(m, w.n) is not None)
    )
    if second is not None and not pair:
        _gemv_launch(q, scale, w, arr, out, ldo, warps, gemm)
        _gemv_launch(q, scale, second.w, second.arr, second.out, second.ldo, warps, gemm)
        return
    if gemm is not None or (warps is None and m >= GEMM_MIN_ROWS):
        tiles = {**GEMM_TILES, **WGMMA_TILES}
        if gemm is not None and gemm not in tiles:
            names = sorted([*tiles, *SK_BY_NAME, *TMA_NAMES])
            raise MetraleError(f"w8a8_gemv: gemm={gemm!r}, want one of {names}")
        tile = tiles[gemm] if gemm is not None else gemm_tile(m, w.n, 2 if pair else 1)
        kern = get_kernel(WGMMA_FILE if tile.name in WGMMA_TILES else CU_FILE, tile.name)
        if kern is None:
            raise MetraleError(f"w8a8_gemv: {tile.name} did not build on this device")
        set_dynamic_smem(kern, tile.smem)
        t1 = cdiv(w.n, tile.bn)
        if tile.name in WGMMA_TILES:  # a second matrix's column tiles from t1 (one matrix: t1 = T)
            s2 = second or _Second(w, arr, out, ldo)
            args = (*args, s2.arr["weight"], s2.arr["weight_scale"], s2.out, np.int64(s2.ldo), np.int32(t1))
        grid = (cdiv(m, tile.bm), 2 * t1 if pair else t1)
        pdl.launch(kern, grid, (tile.threads,), args, tile.smem)
        return
    if m <= max(GEMV_TIERS) and warps is None:
        name, grid, block = tier_launch("w8a8_gemv", GEMV_TIERS, w.n, m, 4)
    else:
        name, cols, rows_ = mma_kernel_name(m, w.n, warps)
        grid, block = (cdiv(w.n, cols), cdiv(m, rows_)), (32 * int(name.rsplit("_w", 1)[1]),)
    pdl.launch(get_kernel(CU_FILE, name), grid, block, args)


def _codes_rows(codes: Any, w: Any, kernel: str) -> int:
    """The rows of ``codes`` (w8a8_quantize's result, K = the weight's), else a MetraleError
    naming ``kernel``."""
    if not isinstance(codes, DeviceA8Codes):
        raise MetraleError(f"{kernel}: codes are {type(codes).__name__}, want w8a8_quantize's result")
    m, k = codes.q.shape
    if k != w.k:
        raise MetraleError(f"{kernel}: codes have K={k}, {w.name} wants K={w.k}")
    return int(m)


def w8a8_gemv(
    codes: DeviceA8Codes, w: Any, out: Any, warps: int | None = None, gemm: str | None = None
) -> None:
    """out[:m] = bf16((f32(q_a · q_w) · s_a) · s_w[n]) for the m rows of ``codes``; ``warps``
    (4 or 8) forces a tensor-core GEMV CTA shape, also for one row, ``gemm`` (a ``GEMM_TILES``
    name) the tiled GEMM at any m (tests and benchmarks; every choice gives the same bits)."""
    arr = weight_arrays(w, "w8a8", "w8a8_gemv")
    m = _codes_rows(codes, w, "w8a8_gemv")
    outa, ldo = device_out(out, m, w.n, "out")
    if m == 0:
        return
    _gemv_launch(codes.q, codes.scale, w, arr, outa, ldo, warps, gemm)


def _dual_args(codes: Any, w: Any, w2: Any, kernel: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(w's arrays, w2's arrays, rows of ``codes``) of a launch over gate and up, which must have
    one shape; else a MetraleError naming ``kernel``."""
    arr = weight_arrays(w, "w8a8", kernel)
    arr2 = weight_arrays(w2, "w8a8", kernel)
    m = _codes_rows(codes, w, kernel)
    if (w2.n, w2.k) != (w.n, w.k):
        raise MetraleError(
            f"{kernel}: {w.name} is [{w.n}, {w.k}] and {w2.name} [{w2.n}, {w2.k}], want one shape"
        )
    return arr, arr2, m


def w8a8_gemv_dual(
    codes: DeviceA8Codes, w: Any, out: Any, w2: Any, out2: Any, gemm: str | None = None
) -> None:
    """``w8a8_gemv(codes, w, out)`` and ``w8a8_gemv(codes, w2, out2)`` (gate and up of the W8A8
    arm: one quantized input, two weights of one shape) in one launch where the split-K or
    stream-K kernels serve the rows (one ramp and tail for both; routed by their 2 N columns),
    else one launch each. The same bits as the two calls: each output's int32 dot is the same."""
    arr, arr2, m = _dual_args(codes, w, w2, "w8a8_gemv_dual")
    outa, ldo = device_out(out, m, w.n, "out")
    outb, ldo2 = device_out(out2, m, w.n, "out2")
    if m == 0:
        return
    _gemv_launch(codes.q, codes.scale, w, arr, outa, ldo, None, gemm, _Second(w2, arr2, outb, ldo2))


#: Elements of a row per CTA of the SiLU-quantize kernels (w8a8.cu SILU_SLICE).
SILU_SLICE = 1024
_scratch: dict[tuple[int, int], tuple[DeviceA8Codes, Any]] = {}


def _codes_scratch(m: int, k: int) -> tuple[DeviceA8Codes, Any]:
    """Reusable device buffers for m rows of A8 codes of length k and their slices' (amax, flag)
    parts (grown on demand)."""
    import cupy

    key = (device_id(), k)
    buf = _scratch.get(key)
    if buf is None or buf[0].q.shape[0] < m:
        rows_ = max(m, 64)
        codes = DeviceA8Codes(
            q=cupy.empty((rows_, k), dtype=cupy.int8), scale=cupy.empty((rows_,), dtype=cupy.float32)
        )
        buf = _scratch[key] = (codes, cupy.empty((rows_ * cdiv(k, SILU_SLICE) * 2,), dtype=cupy.uint32))
    return DeviceA8Codes(q=buf[0].q[:m], scale=buf[0].scale[:m]), buf[1]


#: ``w8a8_silu_quant`` (sm_90, a cluster of 8 CTAs per row) serves up to
#: SILU_QUANT_CLUSTER_MAX_ROWS rows (configs.W8A8_SILU_CLUSTER_MAX_ROWS), the slice pair beyond
#: and on other devices (tests run both on the same inputs). SILU_QUANT_BUILDS: each one-launch
#: build's CTAs per row -> (threads per CTA, 8-element groups per thread), as w8a8.cu's
#: instantiations read them.
SILU_QUANT_CLUSTER_MAX_ROWS = configs.W8A8_SILU_CLUSTER_MAX_ROWS
SILU_QUANT_BUILDS = configs.W8A8_SILU_QUANT_BUILDS


def _silu_row_kernels(text: str | None) -> tuple[tuple[int, int], ...]:
    """``METRALE_W8A8_SILU_ROW_KERNELS`` ("64:4,128:2,4096:1": most rows and CTAs per row, rows
    rising; empty: none) as SILU_ROW_KERNELS, or configs.W8A8_SILU_ROW_KERNELS when unset."""
    if text is None:
        return configs.W8A8_SILU_ROW_KERNELS
    out: list[tuple[int, int]] = []
    for item in filter(None, text.split(",")):
        rows, _, cl = item.partition(":")
        if not (rows.isdigit() and cl.isdigit() and int(cl) in SILU_QUANT_BUILDS):
            raise MetraleError(
                f"METRALE_W8A8_SILU_ROW_KERNELS={text!r}: want rows:ctas items, ctas one of "
                f"{sorted(SILU_QUANT_BUILDS)}, e.g. '64:4,128:2,4096:1'"
            )
        out.append((int(rows), int(cl)))
    if [r for r, _ in out] != sorted(r for r, _ in out):
        raise MetraleError(f"METRALE_W8A8_SILU_ROW_KERNELS={text!r}: the rows must rise")
    return tuple(out)


#: The one-launch kernels with fewer CTAs per row (``w8a8_silu_quant_c{CL}``) past those rows:
#: (most rows, CL) in order (configs.W8A8_SILU_ROW_KERNELS; METRALE_W8A8_SILU_ROW_KERNELS for
#: benchmarks); each build's (threads, groups) in SILU_QUANT_BUILDS.
SILU_ROW_KERNELS = _silu_row_kernels(os.environ.get("METRALE_W8A8_SILU_ROW_KERNELS"))


#: From this many rows (None: never) the step takes ``w8a8_silu_quant_st`` (the compact SiLU table
#: in shared memory, persistent CTAs: configs.W8A8_SILU_QUANT_ST) where K fits its registers.
SILU_ST_MIN_ROWS = configs.W8A8_SILU_ST_MIN_ROWS


def silu_quant_st_grid(m: int, k: int) -> int | None:
    """CTAs of ``w8a8_silu_quant_st`` for m rows of K = k (at most MINB per multiprocessor and
    one per row), or None where it is not routed (SILU_ST_MIN_ROWS) or K exceeds its registers."""
    threads, groups, minb = configs.W8A8_SILU_QUANT_ST
    if SILU_ST_MIN_ROWS is None or m < SILU_ST_MIN_ROWS or k > 8 * groups * threads:
        return None
    return min(m, minb * sm_count())


def silu_quant_kernel(m: int, k: int) -> tuple[str, int, int] | None:
    """(name, CTAs per row, threads per CTA) of the one-launch SiLU-quantize kernel for m rows of
    K = k, or None (the slice pair): ``w8a8_silu_quant`` up to SILU_QUANT_CLUSTER_MAX_ROWS rows,
    then SILU_ROW_KERNELS' ``w8a8_silu_quant_c{CL}``, where the build's registers hold K."""
    cl = (
        8
        if m <= SILU_QUANT_CLUSTER_MAX_ROWS
        else next((c for rows, c in SILU_ROW_KERNELS if m <= rows), None)
    )
    if cl is None or cl not in SILU_QUANT_BUILDS:
        return None
    threads, groups = SILU_QUANT_BUILDS[cl]
    if k > 8 * groups * threads * cl:
        return None
    return ("w8a8_silu_quant" if cl == 8 else f"w8a8_silu_quant_c{cl}"), cl, threads


def w8a8_silu_quant_gemv(gate: Any, up: Any, w: Any, out: Any, warps: int | None = None) -> None:
    """out[:m] = down(quantize_a8(h)), h = bf16(silu[gate] · f32(up)) written over ``gate``: the
    SiLU-quantize kernel (``w8a8_silu_quant`` on sm_90, else the slice pair) into a scratch
    buffer, then the tensor-core GEMV (module docstring)."""
    arr = weight_arrays(w, "w8a8", "w8a8_silu_quant_gemv")
    k = w.k
    if k > MAX_K:
        raise MetraleError(f"w8a8_silu_quant_gemv: {w.name} has K={k} > {MAX_K}")
    from metrale.cuda.backend import as_device_bits

    g0 = as_device_bits(gate, "gate")
    if g0.ndim != 2:
        raise MetraleError(f"gate: shape {tuple(g0.shape)}, want 2-D [m, K]")
    m = g0.shape[0]
    g = device_rows(g0, k, m, "gate")
    u = device_rows(up, k, m, "up")
    if u.shape[0] != m:
        raise MetraleError(f"act_mul: gate shape {tuple(g.shape)} != up shape {tuple(u.shape)}")
    outa, ldo = device_out(out, m, w.n, "out")
    if m == 0:
        return
    codes, parts = _codes_scratch(m, k)
    _silu_quant_rows(g, u, g0, codes, parts)
    _gemv_launch(codes.q, codes.scale, w, arr, outa, ldo, warps)


def _silu_quant_rows(g: Any, u: Any, gate: Any, codes: DeviceA8Codes, parts: Any) -> None:
    """``_silu_quant`` over the first m rows of ``g`` and ``u`` (``device_rows`` of the caller's
    ``gate`` and up); where ``g`` is an aligned copy of ``gate``, h is given back to its rows."""
    m = codes.q.shape[0]
    _silu_quant(g[:m], u[:m], codes, parts)
    if g is not gate:
        gate[:m] = g[:m]


def _silu_quant(g: Any, u: Any, codes: DeviceA8Codes, parts: Any) -> None:
    """h = bf16(silu[g] · f32(u)) over ``g`` and its A8 codes into ``codes`` (g, u: aligned
    device rows [m, K]; ``parts``: the slices' scratch): ``w8a8_silu_quant_st`` where
    ``silu_quant_st_grid`` routes it, else ``silu_quant_kernel``'s one launch, else the slice
    pair."""
    m, k = codes.q.shape
    ldg, ldu = np.int64(g.strides[0] // 2), np.int64(u.strides[0] // 2)
    ctas = silu_quant_st_grid(m, k)
    st = get_kernel(CU_FILE, "w8a8_silu_quant_st") if ctas is not None else None
    if st is not None:
        ctab = device_table("silu", compact=True)
        pdl.launch(
            st,
            (ctas,),
            (configs.W8A8_SILU_QUANT_ST[0],),
            (g, ldg, u, ldu, ctab, np.int32(ctab.size), np.int32(k), np.int32(m), codes.q, codes.scale),
            4 * ctab.size,
        )
        return
    pick = silu_quant_kernel(m, k)
    fused = get_kernel(CU_FILE, pick[0]) if pick is not None else None
    if pick is not None and fused is not None:
        pdl.launch(
            fused,
            (pick[1], m),
            (pick[2],),
            (g, ldg, u, ldu, device_table("silu"), np.int32(k), codes.q, codes.scale),
        )
        return
    grid = (cdiv(k, SILU_SLICE), m)
    pdl.launch(
        get_kernel(CU_FILE, "w8a8_silu_parts"),
        grid,
        (SILU_SLICE // 8,),
        (g, ldg, u, ldu, device_table("silu"), np.int32(k), parts),
    )
    _quantize_parts(g, codes, parts, grid[0])


def _quantize_parts(h: Any, codes: DeviceA8Codes, parts: Any, p: int) -> None:
    """The A8 codes of h (aligned device rows [m, K]) from each row's ``p`` (amax, flag) parts."""
    m, k = codes.q.shape
    pdl.launch(
        get_kernel(CU_FILE, "w8a8_quantize_parts"),
        (cdiv(k, SILU_SLICE), m),
        (SILU_SLICE // 8,),
        (h, np.int64(h.strides[0] // 2), np.int32(k), parts, np.int32(p), codes.q, codes.scale),
    )


_tile_parts: dict[int, Any] = {}


def _tile_parts_scratch(count: int) -> Any:
    """Room for ``count`` (amax, flag) parts of the fused pair tile on this device: uint32
    [>= 2 count] (grown on demand; one stream at a time)."""
    import cupy

    buf = _tile_parts.get(device_id())
    if buf is None or buf.size < 2 * count:
        buf = _tile_parts[device_id()] = cupy.empty((max(2 * count, 1 << 16),), dtype=cupy.uint32)
    return buf


def w8a8_gemv_dual_silu_quant(
    codes: DeviceA8Codes, w: Any, out: Any, w2: Any, out2: Any, gemm: str | None = None
) -> DeviceA8Codes:
    """``w8a8_gemv_dual(codes, w, out, w2, out2)``, then h = bf16(silu[out] · f32(out2)) over
    ``out`` and h's A8 codes (new arrays [m, N]): the W8A8 arm's gate, up and the down GEMV's
    input. Where ``pair_tile`` gives gate and up one launch of a wgmma tile (``gemm``: a tile of
    configs.W8A8_SILU_TILES forces it at any m; tests), that launch forms h in its epilogue
    (``w8a8_wgmma_silu_*``: each CTA holds the same columns of both, writes h and up and its
    rows' amax over its columns) and ``w8a8_quantize_parts`` writes the codes; where the
    stream-K pair serves the rows instead (``tma_silu_tier``; ``gemm``: a TMA_SILU_NAMES kernel
    forces it), its SiLU form does the same per 64-column tile; else the dual launch and
    ``w8a8_silu_quant_gemv``'s SiLU-quantize step. The same bits either way."""
    import cupy

    arr, arr2, m = _dual_args(codes, w, w2, "w8a8_gemv_dual_silu_quant")
    n = w.n
    if n % 16:
        raise MetraleError(
            f"w8a8_gemv_dual_silu_quant: {w.name} has N={n}, want a multiple of 16 (h is A8 rows)"
        )
    outa, ldo = device_out(out, m, n, "out")
    outb, ldo2 = device_out(out2, m, n, "out2")
    h = DeviceA8Codes(q=cupy.empty((m, n), dtype=cupy.int8), scale=cupy.empty((m,), dtype=cupy.float32))
    if m == 0:
        return h
    if gemm in TMA_SILU_NAMES:
        tile, bn = None, TMA_SILU_NAMES[gemm]
        if get_kernel(WGMMA_FILE, gemm) is None:
            raise MetraleError(f"w8a8_gemv_dual_silu_quant: {gemm} did not build on this device")
    else:
        tile = silu_tile(m, n, gemm)
        bn = tma_silu_tier(m, n) if tile is None and gemm is None else None
    aligned = all(a.strides[0] % 16 == 0 and a.data.ptr % 16 == 0 for a in (outa, outb))
    if gemm is not None and not aligned:
        raise MetraleError(f"w8a8_gemv_dual_silu_quant: gemm={gemm!r} wants out, out2 rows 16-byte aligned")
    if bn is not None and aligned:
        _tma_silu_launch(bn, codes, w, arr, arr2, outa, ldo, outb, ldo2, h)
        return h
    if tile is None or not aligned:
        _gemv_launch(codes.q, codes.scale, w, arr, outa, ldo, None, None, _Second(w2, arr2, outb, ldo2))
        g, u = device_rows(outa, n, m, "out"), device_rows(outb, n, m, "out2")
        _silu_quant_rows(g, u, outa, h, _codes_scratch(m, n)[1])
        return h
    _silu_tile_launch(tile, codes, arr, arr2, outa, ldo, outb, ldo2, h)
    return h


def _tma_silu_launch(
    bn: int,
    codes: DeviceA8Codes,
    w: Any,
    arr: dict[str, Any],
    arr2: dict[str, Any],
    out: Any,
    ldo: int,
    out2: Any,
    ldo2: int,
    h: DeviceA8Codes,
) -> None:
    """``w8a8_tma_silu_n{bn}`` over the m rows of ``codes`` (gate: ``arr``, up: ``arr2``, [N, K],
    boxes of 64 weight rows; h over ``out``, up into ``out2``): one CTA per multiprocessor (at
    most one per unit), then ``w8a8_quantize_parts`` over the ceil(N / 64) parts per row into
    ``h``."""
    m, k = codes.q.shape
    n = w.n
    name = f"w8a8_tma_silu_n{bn}"
    kern = get_kernel(WGMMA_FILE, name)
    table = device_table("silu", compact=True)
    smem = tma_silu_smem(bn, int(table.size))
    set_dynamic_smem(kern, smem)
    p = cdiv(n, 64)
    units = p * cdiv(m, bn) * cdiv(k, 128)
    part, flag = _tma_workspace(bn)
    parts = _tile_parts_scratch(m * p)
    args = (
        tma.row_tiles(arr["weight"], n, k, k, 64),
        tma.row_tiles(arr2["weight"], n, k, k, 64),
        tma.row_tiles(codes.q, m, k, int(codes.q.strides[0]), bn),
        arr["weight_scale"],
        arr2["weight_scale"],
        np.int32(n),
        np.int32(k),
        codes.scale,
        np.int32(m),
        out,
        np.int64(ldo),
        out2,
        np.int64(ldo2),
        part,
        flag,
        table,
        np.int32(table.size),
        parts,
    )
    pdl.launch(kern, (min(sm_count(), units),), (384,), args, smem)
    _quantize_parts(out, h, parts, p)


def silu_tile(m: int, n: int, gemm: str | None = None) -> configs.W8a8WgmmaTile | None:
    """The tile whose epilogue forms h in ``w8a8_gemv_dual_silu_quant`` for m rows, N = n:
    ``gemm`` (a configs.W8A8_SILU_TILES name, forced; a MetraleError where it is none or did not
    build), else ``pair_tile`` where FUSED_SILU and its SiLU kernel built; None: the dual launch
    and the SiLU-quantize step."""
    if gemm is not None:
        if gemm not in configs.W8A8_SILU_TILES:
            raise MetraleError(
                f"w8a8_gemv_dual_silu_quant: gemm={gemm!r}, want one of {sorted(configs.W8A8_SILU_TILES)}"
            )
        tile = WGMMA_TILES[gemm]
        if get_kernel(WGMMA_FILE, _silu_kernel_name(tile)) is None:
            raise MetraleError(
                f"w8a8_gemv_dual_silu_quant: {_silu_kernel_name(tile)} did not build on this device"
            )
        return tile
    tile = pair_tile(m, n, silu=True) if FUSED_SILU else None
    return tile if tile is not None and get_kernel(WGMMA_FILE, _silu_kernel_name(tile)) is not None else None


def _silu_kernel_name(tile: configs.W8a8WgmmaTile) -> str:
    """``tile``'s gate + up kernel with the SiLU epilogue: its compact-table form where SILU_TILE_ST."""
    return tile.silu_st_name if SILU_TILE_ST else tile.silu_name


def _silu_tile_launch(
    tile: configs.W8a8WgmmaTile,
    codes: DeviceA8Codes,
    arr: dict[str, Any],
    arr2: dict[str, Any],
    out: Any,
    ldo: int,
    out2: Any,
    ldo2: int,
    h: DeviceA8Codes,
) -> None:
    """``tile``'s SiLU kernel over the m rows of ``codes`` (gate: ``arr``, up: ``arr2``, [N, K];
    h over ``out``, up into ``out2``, rows 16-byte aligned), grid (row tiles, P = ceil(N / (BN /
    2)) column tiles), then ``w8a8_quantize_parts`` over the P parts per row into ``h``."""
    m, k = codes.q.shape
    n = h.q.shape[1]
    p = cdiv(n, tile.bn // 2)
    parts = _tile_parts_scratch(m * p)
    kern = get_kernel(WGMMA_FILE, _silu_kernel_name(tile))
    set_dynamic_smem(kern, tile.smem)
    table = device_table("silu", compact=SILU_TILE_ST)
    if SILU_TILE_ST and 4 * table.size > tile.smem - 1024:
        raise MetraleError(f"{tile.silu_st_name}: the compact SiLU table does not fit its stage slots")
    args = (
        arr["weight"],
        arr["weight_scale"],
        arr2["weight"],
        arr2["weight_scale"],
        np.int32(n),
        np.int32(k),
        codes.q,
        np.int64(codes.q.strides[0]),
        codes.scale,
        np.int32(m),
        out,
        np.int64(ldo),
        out2,
        np.int64(ldo2),
        table,
        parts,
        *((np.int32(table.size),) if SILU_TILE_ST else ()),
    )
    pdl.launch(kern, (cdiv(m, tile.bm), p), (tile.threads,), args, tile.smem)
    _quantize_parts(out, h, parts, p)


_KERNEL_FUNCS = (
    "w8a8_quantize",
    "w8a8_silu_parts",
    "w8a8_quantize_parts",
    *(f"w8a8_gemv_r{r}" for r in GEMV_TIERS),
    *(f"w8a8_mma_r{t}_w{nw}" for t in MMA_TIERS for nw in MMA_WARPS),
    *GEMM_TILES,
)


def kernels() -> dict[str, Callable[..., Any]]:
    """The W8A8 launchers, when ``w8a8.cu`` built on this device (else none)."""
    return built_launchers(
        CU_FILE,
        _KERNEL_FUNCS,
        (w8a8_quantize, w8a8_gemv, w8a8_gemv_dual, w8a8_gemv_dual_silu_quant, w8a8_silu_quant_gemv),
    )


UPLOADERS: dict[str, Callable[[Any], DeviceWeight]] = {"w8a8": upload_w8a8}
