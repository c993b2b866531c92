"""Launcher of the tiled NVFP4 and Q2_0 × A16 GEMM (``kernels/nvfp4_tile.cu``, and on sm_90
``kernels/nvfp4_wgmma.cu``, the same tiles on warpgroup MMA): the prologue writes the scaled A16
operand, the per-block factors and the slow-row marks of a chunk of rows into the mma.py
workspace, then ``w4a16b_gemm_f{NF}`` / ``w4a16w_gemm_f{NF}`` (NVFP4) or ``q2a16b_gemm_f{NF}`` /
``q2a16w_gemm_f{NF}`` (Q2_0) runs CTA tiles of 8·NF rows × 128 columns over K (split into
aligned parts where the grid would not fill the GPU; ``mma_finish`` sums their roots). The A16
prologue, the GEMM and ``mma_finish`` are launched programmatically (metrale/cuda/pdl.py: the
GEMM requests its first stages' weights before it waits). The same bits as every other path of
the format (arithmetic.md § tree, § kernel-notes).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrale.cuda import configs, mma, pdl, runtime, tma

FILE = "nvfp4_tile.cu"
#: The same GEMM on Hopper's warpgroup MMA (sm_90a): the launcher takes it where it builds.
WG_FILE = "nvfp4_wgmma.cu"
#: METRALE_NVFP4_TILE=0 turns the tiled GEMM off (the mma.py paths give the same bits).
ENABLED = os.environ.get("METRALE_NVFP4_TILE", "1") != "0"
#: Rows from which the NVFP4 × A16 / A4 and Q2_0 × A16 projections take the tiled GEMM
#: (METRALE_NVFP4_TILE_MIN_ROWS moves it: tests and benchmarks). From 25 rows both it and the
#: K-split MMA kernels run 32-row tiles, and the tile is the faster: H200, Qwen3-8B FFN at m = 32
#: (the launches programmatic) NVFP4 138.8 against 154.2 us, Q2_0 129.7 against 149.1; at m = 16
#: and 24 (16- and 24-row MMA tiles against its 16 and 32) it is not (performance-log.md,
#: "2026-12-04 (evening)").
MIN_ROWS = int(os.environ.get("METRALE_NVFP4_TILE_MIN_ROWS", "25"))
#: Rows (first, last) below MIN_ROWS that the tile takes too where its wgmma kernels build: NF = 2,
#: two CTAs per multiprocessor (``configs.NVFP4_WGMMA_TILE_CTAS``) against the K-split MMA
#: kernels' 16-row tiles. H200, Qwen3-8B FFN at m = 12 / 16: NVFP4 97.7 / 98.8 against 116.8 /
#: 118.0 us, W4A4 108.4 / 109.2 against 119.0 / 120.2, Q2_0 84.5 / 86.0 against 85.4 / 86.4; at
#: 20 and 24 rows (NF = 4, one CTA) it is not faster (performance-log.md, "2026-12-04 (night)").
#: METRALE_TILE_SMALL_ROWS="first-last" moves them ("0-0": none).
SMALL_ROWS = tuple(int(r) for r in os.environ.get("METRALE_TILE_SMALL_ROWS", "9-16").split("-", 1))
#: NVFP4 × A4 on the tiled GEMM (``w4a4b_prep``); METRALE_NVFP4_TILE_A4=0 keeps A4 on the mma.py
#: kernels (same bits).
A4_ENABLED = os.environ.get("METRALE_NVFP4_TILE_A4", "1") != "0"
#: Q2_0 × A16 on the tiled GEMM (``q2a16b_gemm_f{NF}``); METRALE_Q2_TILE=0 keeps Q2_0 on the
#: q2_0.py kernels (same bits).
Q2_ENABLED = os.environ.get("METRALE_Q2_TILE", "1") != "0"
FRAGS = configs.NVFP4_TILE_FRAGS
#: METRALE_TILE_WGMMA=0 keeps the tile on mma.sync (nvfp4_tile.cu) on sm_90 too (same bits).
WG_ENABLED = os.environ.get("METRALE_TILE_WGMMA", "1") != "0"
WG_FRAGS = configs.NVFP4_WGMMA_TILE_FRAGS
#: The tile on the block-value chain (docs/chain-revision.md: ``{chain_prefix}_gemm_f{NF}`` of
#: nvfp4_wgmma.cu, sm_90a), whose bits are ``chain.project_chain``'s, not the contract's: off
#: until the revision's switch; tests and benchmarks turn it on (METRALE_TILE_CHAIN=1).
CHAIN = os.environ.get("METRALE_TILE_CHAIN", "0") == "1"
CHAIN_FRAGS = configs.TILE_CHAIN_FRAGS
#: The chain tile's rows from here (CHAIN), the NVFP4 formats': below, the fast chain decode
#: kernels (1..4 rows) and the generic ones (nvfp4.py); the K-split MMA kernels (mma.py) are the
#: tree's. Q2_0 and FP8 take the tile from one row (TileFormat.chain_min_rows): their generic
#: chain kernels were slower at every row count (H100, Qwen3-8B FFN on the chain, µs at 1 / 2 /
#: 4 rows: Q2_0 72.2 / 91.5 / 160.7, FP8 312.8 / 369.5 / 675.2, against the tile's 65.6 / 97.9 at
#: 8 rows, whose one fragment of 8 rows costs the same for fewer; performance-log.md
#: "2026-12-07 (d)").
CHAIN_MIN_ROWS = 5
#: Steps (8 blocks) per chain part: a CTA's K part holds whole parts (or all of K).
CHAIN_PART_STEPS = 1 << configs.TILE_CHAIN_PART_LOG
#: Steps per CTA K part of the chain kernels (first, last), powers of two from CHAIN_PART_STEPS;
#: the last also bounded by the counter's levels that fit in shared memory. Tests narrow it.
CHAIN_CTA_STEPS = (CHAIN_PART_STEPS, 128)
assert CHAIN_CTA_STEPS[1] <= CHAIN_PART_STEPS << configs.TILE_CHAIN_LEVELS, "a local counter's levels"


@dataclass(frozen=True)
class TileFormat:
    """A weight format of the tiled GEMM: its kernels' prefix, the bytes of codes and of scales per
    column and 8-block step (``WB``/``SB`` of nvfp4_tile.cu, codes at a ``wrow``-byte stride in
    shared memory), and the block exponents E_b its fast epilogue takes (arithmetic.md
    § kernel-notes, scaled A16 operands)."""

    prefix: str
    wrow: int
    sb: int
    e_lo: int
    e_hi: int
    #: Its kernels' NF (None: ``FRAGS``, the NVFP4 kernels', which benchmarks may narrow).
    frags: tuple[int, ...] | None = None
    #: CTAs per multiprocessor its kernels are built for (their ``__launch_bounds__``).
    ctas_per_sm: int = 1
    #: Its kernels' prefix in nvfp4_wgmma.cu (``{wg_prefix}_gemm_f{NF}``, NF in ``WG_FRAGS``).
    wg_prefix: str = ""
    #: Its chain kernels' prefix there (``{chain_prefix}_gemm_f{NF}``, NF in ``CHAIN_FRAGS``).
    chain_prefix: str = ""
    #: Activation limbs per element (the stage holds ``limbs`` activation tiles; xh 2·limbs·K
    #: bytes per row) and whether the output scale is per column (the set's scales: f32 [N]).
    limbs: int = 1
    col_scale: bool = False
    #: Its chain kernels' builds, NF -> (stages, CTAs per multiprocessor), and the NF whose
    #: counter over parts is in local memory (None: configs.TILE_CHAIN_BUILDS and
    #: TILE_CHAIN_LOCAL, the NVFP4 and Q2_0 ones).
    chain_builds: dict[int, tuple[int, int]] | None = None
    chain_local: frozenset[int] | None = None
    #: Whether a stage holds the step's per-row block factors (``FAC`` of tile.cuh: 8 blocks x
    #: 8 NF rows of f32; the prologue writes them block-major, fac [B][rows_pad]).
    staged_fac: bool = False
    #: CHAIN: the rows from which its chain tile serves (CHAIN_MIN_ROWS).
    chain_min_rows: int = CHAIN_MIN_ROWS


#: Steps (8 blocks) per K part at most: the counter keeps levels 1 .. dlog - 1 in shared memory.
MAX_PART_STEPS = 32
MIN_PART_STEPS = 4
#: Parts at most: ``mma_finish`` folds up to 64 part roots (its counter's seven levels).
MAX_PARTS = 64
#: K is split further than filling the slots needs where that shortens the plan's span (whole
#: waves of CTAs times a part's steps plus PART_OVERHEAD_STEPS, a CTA's pipeline fill and
#: epilogue) by more than WAVE_GAIN: Qwen3-8B gate + up at 33..64 rows, 192 CTAs of 32 steps
#: (two waves on 132 multiprocessors), run as 384 of 16 (three). METRALE_TILE_WAVES=0 keeps the
#: first plan that fills the slots (benchmarks).
WAVES = os.environ.get("METRALE_TILE_WAVES", "1") != "0"
WAVE_GAIN = 0.1
PART_OVERHEAD_STEPS = 2
#: Row tiles per raster group (tile.cuh ``tile_at``): the CTAs of a group take its row tiles
#: fastest, then the next column tile, so a wave reads the activations of about this many row
#: tiles; 0: all of the chunk's row tiles in one group (each column tile's row tiles in turn).
#: Measured on an H100 (Qwen3-8B NVFP4 chain tile at 4096 rows, two runs each, alternated;
#: performance-log.md "2026-12-07 (b)"): groups of 4 2,790 / 1,700 us gate + up / down against
#: 2,863-2,945 / 1,733-1,751 in one group; the same within 1 % at 256 and 1024 rows and for
#: Q2_0. METRALE_TILE_ROW_GROUP sets it (benchmarks).
ROW_GROUP = int(os.environ.get("METRALE_TILE_ROW_GROUP", "4"))
NVFP4 = TileFormat("w4a16b", 80, 8, -102, 110, wg_prefix="w4a16w", chain_prefix="w4c")
#: NVFP4 × A4 (``w4a4b_prep``'s operand, no window): on wgmma its exact block values fuse the
#: tree's level 1 into an fma (``w4a4w_gemm_f{NF}``); on mma.sync the NVFP4 kernels.
#: METRALE_TILE_A4_FMA=0 runs A4 on the NVFP4 kernels there too (same bits; benchmarks).
NVFP4_A4 = TileFormat("w4a16b", 80, 8, -102, 110, wg_prefix="w4a4w", chain_prefix="w4c")
A4_FMA = os.environ.get("METRALE_TILE_A4_FMA", "1") != "0"
#: The format NVFP4 × A4 runs as on the tile.
A4_FORMAT = NVFP4_A4 if A4_FMA else NVFP4
Q2_0 = TileFormat(
    "q2a16b",
    48,
    4,
    -88,
    105,
    configs.Q2_0_TILE_FRAGS,
    configs.Q2_0_TILE_CTAS_PER_SM,
    wg_prefix="q2a16w",
    chain_prefix="q2c",
    chain_min_rows=1,
)
#: FP8 × A16 on the chain only (``w8c_prep``, ``w8c_gemm_f{NF}``: docs/chain-revision.md, "The
#: FP8 chain tile"): weights as ``fp8_bf16.tile_fp8_bytes`` lays them out, 128 bytes per column
#: and step in 144-byte rows, no block scales, the per-channel scale per column; the prologue's
#: window is -119 <= E <= 114 (the two-fma epilogue's: nvfp4_wgmma.cu w8c_body).
FP8 = TileFormat(
    "",
    144,
    0,
    -119,
    114,
    chain_prefix="w8c",
    limbs=2,
    col_scale=True,
    chain_builds=configs.TILE_FP8_CHAIN_BUILDS,
    chain_local=configs.TILE_FP8_CHAIN_LOCAL,
    staged_fac=True,
    chain_min_rows=1,
)
THREADS = 256
COLS = 128
STAGES = 3
#: Rows per prologue + GEMM pass (the workspace holds 2 K + 4 B + 1 bytes per row).
CHUNK_ROWS = 4096


def prep_threads(b: int) -> int:
    """Threads of ``w4a16b_prep`` for rows of ``b`` blocks: one block per thread, 256 to 1024."""
    return min(1024, max(THREADS, 32 * -(-b // 32)))


def frags_for(rows: int, frags: tuple[int, ...] | None = None) -> int:
    """NF of the CTA tile for a chunk of ``rows`` rows among ``frags`` (default ``FRAGS``, the
    NVFP4 kernels'): the smallest that covers them, else the largest."""
    frags = FRAGS if frags is None else frags
    return next((nf for nf in frags if 8 * nf >= rows), frags[-1])


def takes(rows: int, fmt: TileFormat) -> bool:
    """Whether a projection of ``rows`` rows (one chunk's worth) is the tile's to try: from
    MIN_ROWS rows, and over SMALL_ROWS where the format's wgmma kernel for them is built; CHAIN:
    from the format's ``chain_min_rows`` (no K-split MMA kernel gives the chain's bits)."""
    if rows >= (fmt.chain_min_rows if CHAIN else MIN_ROWS):
        return True
    if not SMALL_ROWS[0] <= rows <= SMALL_ROWS[1]:
        return False
    kern = pick_kernel(fmt, rows)
    return kern is not None and kern.wg


def smem_bytes(
    nf: int,
    dlog: int,
    fmt: TileFormat = NVFP4,
    wg: bool = False,
    stages: int = STAGES,
    chain: bool = False,
    local: bool = False,
) -> int:
    """Dynamic shared memory of the format's GEMM ``{prefix}_gemm_f{nf}`` (wg: nvfp4_wgmma.cu's,
    its stages 1024-byte aligned) for K parts of 2^dlog steps: ``stages`` pipeline stages, then
    the counter's levels (over steps, levels 1 .. dlog - 1; chain: over parts of CHAIN_PART_STEPS
    steps, levels 0 .. dlog - log2(CHAIN_PART_STEPS) - 1; none where ``local``, the counter in
    local memory), nf x 256 threads x 16 bytes each."""
    stage = 8 * nf * 256 * fmt.limbs + COLS * fmt.wrow + COLS * fmt.sb + 256 * nf * fmt.staged_fac
    if wg:
        stage = -(-stage // 1024) * 1024
    part_log = CHAIN_PART_STEPS.bit_length() - 1
    levels = 0 if local else max(0, dlog - part_log) if chain else max(0, dlog - 1)
    return (1024 if wg else 0) + stages * stage + levels * nf * THREADS * 16


@dataclass(frozen=True)
class TileKernel:
    """The GEMM kernel a chunk runs on: its file and name, NF (8 NF activation rows per CTA), CTAs
    per multiprocessor, whether it is nvfp4_wgmma.cu's, its pipeline stages, whether it runs the
    block-value chain, whether its counter over parts is in local memory, its weight rows
    (columns) per CTA and its threads per CTA."""

    file: str
    name: str
    nf: int
    ctas_per_sm: int
    wg: bool
    stages: int = STAGES
    chain: bool = False
    local: bool = False
    cols: int = COLS
    threads: int = THREADS


#: ``w4s_gemm_f16`` and ``w4p_gemm_f16`` (configs.TILE_CHAIN_SHARED_A): NVFP4 × A16 / A4 on the
#: chain, 64 weight rows x 256 activation rows per CTA (NF = 32 in rows), two stages of
#: activations, the counter in local memory; w4p with a producer warpgroup (384 threads). Their
#: dynamic shared memory: 1024 bytes of alignment, 2 x 64 KB of activations, 2 x 16 KB of decoded
#: weights, 3 x 5.5 KB of weight bytes, 2 x 2 KB of f32 scales. Their activations come by TMA:
#: the last argument is the tensor map of xh (``tma.row_tiles``).
SHARED_A = {
    name: TileKernel(WG_FILE, name, 32, 1, True, 2, True, True, 64, threads)
    for name, threads in (("w4s_gemm_f16", 256), ("w4p_gemm_f16", 384))
}
SHARED_A_SMEM = 1024 + 2 * 65536 + 2 * 16384 + 3 * 64 * 88 + 2 * 2048


def pick_kernel(fmt: TileFormat, rows: int) -> TileKernel | None:
    """The GEMM for a chunk of ``rows`` rows: nvfp4_wgmma.cu's where WG_ENABLED and it builds for
    this device (sm_90a), else nvfp4_tile.cu's; None when neither is built. CHAIN: the chain
    kernel of nvfp4_wgmma.cu, or None (no other kernel gives its bits)."""
    if CHAIN:
        if configs.TILE_CHAIN_SHARED_A and fmt.chain_prefix == "w4c" and rows > 128:
            kern = SHARED_A[configs.TILE_CHAIN_SHARED_A]
            return kern if runtime.get_kernel(WG_FILE, kern.name) is not None else None
        builds = chain_builds(fmt)
        nf = frags_for(rows, CHAIN_FRAGS if fmt.chain_builds is None else tuple(builds))
        if not fmt.chain_prefix or nf not in builds:
            return None
        kern = chain_kernel(fmt, nf)
        return kern if runtime.get_kernel(WG_FILE, kern.name) is not None else None
    if WG_ENABLED and fmt.wg_prefix:
        nf = frags_for(rows, WG_FRAGS)
        name = f"{fmt.wg_prefix}_gemm_f{nf}"
        if runtime.get_kernel(WG_FILE, name) is not None:
            return TileKernel(WG_FILE, name, nf, configs.NVFP4_WGMMA_TILE_CTAS[nf], True)
    nf = frags_for(rows, fmt.frags)
    name = f"{fmt.prefix}_gemm_f{nf}"
    if runtime.get_kernel(FILE, name) is None:
        return None
    return TileKernel(FILE, name, nf, fmt.ctas_per_sm, False)


def chain_builds(fmt: TileFormat) -> dict[int, tuple[int, int]]:
    """The format's chain kernels: NF -> (stages, CTAs per multiprocessor)."""
    return configs.TILE_CHAIN_BUILDS if fmt.chain_builds is None else fmt.chain_builds


def chain_kernel(fmt: TileFormat, nf: int) -> TileKernel:
    """The format's chain kernel of NF ``nf`` as built (stages, CTAs, where its counter lives)."""
    stages, ctas = chain_builds(fmt)[nf]
    local = configs.TILE_CHAIN_LOCAL if fmt.chain_local is None else fmt.chain_local
    return TileKernel(WG_FILE, f"{fmt.chain_prefix}_gemm_f{nf}", nf, ctas, True, stages, True, nf in local)


def chain_smem(kern: TileKernel, fmt: TileFormat, dlog: int) -> int:
    """Shared memory of a chain kernel for K parts of 2^dlog steps."""
    if kern.name in SHARED_A:
        return SHARED_A_SMEM
    return smem_bytes(kern.nf, dlog, fmt, True, kern.stages, True, kern.local)


def chain_plan(kern: TileKernel, fmt: TileFormat, s8: int, ctas: int, slots: int) -> tuple[int, int]:
    """(dlog, parts) of a chain kernel: ``plan_parts`` within CHAIN_CTA_STEPS, CTA K parts of
    whole chain parts (CHAIN_PART_STEPS steps; or all of K), at most as many as the counter's
    levels fit beside the stages of the CTAs per multiprocessor it is built for."""
    lo, hi = CHAIN_CTA_STEPS
    limit = min(mma.SMEM_LIMIT, mma.SM_SMEM // kern.ctas_per_sm - mma.CTA_RESERVED)
    least = lo.bit_length() - 1
    fits = (d for d in range(hi.bit_length() - 1, least, -1) if chain_smem(kern, fmt, d) <= limit)
    return plan_parts(s8, ctas, slots, lo, 1 << next(fits, least))


def plan_parts(
    s8: int, ctas_per_part: int, slots: int, min_steps: int | None = None, max_steps: int | None = None
) -> tuple[int, int]:
    """(dlog, parts): K of ``s8`` steps in aligned parts of 2^dlog <= ``max_steps`` (default
    MAX_PART_STEPS) steps, halved (down to ``min_steps``, default MIN_PART_STEPS, and while at
    most MAX_PARTS parts) while the grid would hold fewer CTAs than ``slots`` (multiprocessors
    times the CTAs each runs at once), then (WAVES) while a halving shortens the span by more
    than WAVE_GAIN."""
    min_steps = MIN_PART_STEPS if min_steps is None else min_steps
    max_steps = MAX_PART_STEPS if max_steps is None else max_steps

    def parts(d: int) -> int:
        return -(-s8 // (1 << d))

    def span(d: int) -> int:
        return -(-ctas_per_part * parts(d) // slots) * (min(1 << d, s8) + PART_OVERHEAD_STEPS)

    def may_halve(d: int) -> bool:
        return (1 << d) > min_steps and parts(d - 1) <= MAX_PARTS

    dlog = min(max(0, (s8 - 1).bit_length()), max_steps.bit_length() - 1)
    while may_halve(dlog) and ctas_per_part * parts(dlog) < slots:
        dlog -= 1
    if WAVES:
        for d in range(dlog - 1, min_steps.bit_length() - 2, -1):
            if parts(d) <= MAX_PARTS and span(d) < (1 - WAVE_GAIN) * span(dlog):
                dlog = d
    return dlog, parts(dlog)


#: rows -> launch the prologue of rows r0 .. r0 + m - 1 padded to pad: (r0, m, pad, xh, fac, slow).
Prologue = Callable[[int, int, int, Any, Any, Any], None]


def gemm(
    x: Any, ldx: int, rows: int, b: int, args0: tuple, args1: tuple, gz: int, n: int, fmt: TileFormat = NVFP4
) -> bool:
    """``rows`` bf16 rows ``x`` (row stride ``ldx``) times one weight set or two (gz = 2) of N =
    ``n`` columns and B = ``b`` blocks, A16; ``args0``/``args1`` the sets' (codes, scales,
    rowscale, out, ldo) in the layout of ``fmt``. False (nothing launched) where it does not
    apply: B % 8, rows not 16-byte aligned (the prologue's vector loads), kernels not built."""
    if not ENABLED or ldx % 8 != 0 or x.data.ptr % 16 != 0:
        return False
    kern = runtime.get_kernel(FILE, "w4a16b_prep")
    if kern is None:
        return False
    window = (np.int32(fmt.e_lo), np.int32(fmt.e_hi))

    def prologue(r0: int, m: int, pad: int, xh: Any, fac: Any, slow: Any) -> None:
        args = (x[r0:], np.int64(ldx), np.int32(m), np.int32(pad), np.int32(b), *window, xh, fac, slow)
        pdl.launch(kern, (pad,), (prep_threads(b),), args)

    return _run(prologue, rows, b, args0, args1, gz, n, fmt)


def gemm_fp8(x: Any, ldx: int, rows: int, b: int, args0: tuple, args1: tuple, gz: int, n: int) -> bool:
    """FP8 × A16 on the chain (CHAIN only: no other kernel gives its bits): ``rows`` bf16 rows
    ``x`` times one weight set or two (gz = 2) of N = ``n`` columns and B = ``b`` blocks;
    ``args0``/``args1`` the sets' (tile bytes, f32 column scales, unused rowscale, out, ldo).
    False where it does not apply (not CHAIN, B % 8, rows not 16-byte aligned, not built)."""
    if not (ENABLED and CHAIN) or ldx % 8 != 0 or x.data.ptr % 16 != 0:
        return False
    kern = runtime.get_kernel(WG_FILE, "w8c_prep")
    if kern is None:
        return False

    def prologue(r0: int, m: int, pad: int, xh: Any, fac: Any, slow: Any) -> None:
        args = (x[r0:], np.int64(ldx), np.int32(m), np.int32(pad), np.int32(b), xh, fac, slow)
        pdl.launch(kern, (pad,), (prep_threads(b),), args)

    return _run(prologue, rows, b, args0, args1, gz, n, FP8)


def gemm_a4(codes: Any, ldc: int, afac: Any, rows: int, b: int, args: tuple, n: int) -> bool:
    """NVFP4 × A4: ``rows`` rows of w4a4_quantize's codes (int8, row stride ``ldc`` bytes) and
    factors ``afac`` (f32 [rows, B]) times one weight set (``args``: its codes, scales, rowscale
    f32(input_scale · weight_scale_2), out, ldo). False where it does not apply (A4_ENABLED, B % 8,
    rows not 16-byte aligned, kernels not built)."""
    if not (ENABLED and A4_ENABLED) or ldc % 16 != 0 or codes.data.ptr % 16 != 0:
        return False
    kern = runtime.get_kernel(FILE, "w4a4b_prep")
    if kern is None:
        return False

    def prologue(r0: int, m: int, pad: int, xh: Any, fac: Any, slow: Any) -> None:
        args_ = (codes[r0:], np.int64(ldc), afac[r0:], np.int32(m), np.int32(pad), np.int32(b), xh, fac, slow)
        kern((pad,), (THREADS,), args_)

    return _run(prologue, rows, b, args, args, 1, n, A4_FORMAT)


def _run(
    prologue: Prologue,
    rows: int,
    b: int,
    args0: tuple,
    args1: tuple,
    gz: int,
    n: int,
    fmt: TileFormat = NVFP4,
) -> bool:
    """The prologue and the GEMM (and ``mma_finish`` where K is split) over chunks of rows."""
    if b % 8 != 0 or rows <= 0:
        return False
    chunk = min(rows, CHUNK_ROWS)
    pick = pick_kernel(fmt, chunk)
    finish = runtime.get_kernel(FILE, "mma_finish")
    if pick is None or finish is None:
        return False
    kern = runtime.get_kernel(pick.file, pick.name)
    nf = pick.nf
    k = 16 * b
    s8 = b // 8
    tile_rows = 8 * nf
    col_ctas = -(-n // pick.cols)
    slots = runtime.sm_count() * pick.ctas_per_sm
    ctas = -(-chunk // tile_rows) * col_ctas * gz  # per K part
    if pick.chain:
        dlog, parts = chain_plan(pick, fmt, s8, ctas, slots)
    else:
        dlog, parts = plan_parts(s8, ctas, slots)
    smem = chain_smem(pick, fmt, dlog) if pick.chain else smem_bytes(nf, dlog, fmt, pick.wg, pick.stages)
    if smem > mma.SMEM_LIMIT or parts > MAX_PARTS:
        return False
    rows_pad = tile_rows * -(-chunk // tile_rows)
    xh_bytes = rows_pad * k * 2 * fmt.limbs
    fac_bytes = rows_pad * b * 4
    part_bytes = parts * gz * chunk * n * 4 if parts > 1 else 0
    ws = mma.workspace(xh_bytes + fac_bytes + rows_pad + part_bytes)
    xh = ws[:xh_bytes]
    fac = ws[xh_bytes : xh_bytes + fac_bytes].view(np.float32)
    slow = ws[xh_bytes + fac_bytes : xh_bytes + fac_bytes + rows_pad]
    o = xh_bytes + fac_bytes + rows_pad
    partial = ws[o : o + part_bytes].view(np.float32) if parts > 1 else None
    runtime.set_dynamic_smem(kern, smem)
    (w0, s0, rs0, o0, ldo0), (w1, s1, rs1, o1, ldo1) = args0, args1
    for r0 in range(0, rows, CHUNK_ROWS):
        m = min(CHUNK_ROWS, rows - r0)
        tiles = -(-m // tile_rows)
        pad = tiles * tile_rows
        prologue(r0, m, pad, xh, fac, slow)
        group = min(tiles, ROW_GROUP) if ROW_GROUP > 0 else tiles
        pdl.launch(
            kern,
            (group * col_ctas, -(-tiles // group), gz * parts),
            (pick.threads,),
            (
                xh,
                fac,
                slow,
                np.int32(m),
                w0,
                s0,
                rs0,
                o0[r0:],
                ldo0,
                w1,
                s1,
                rs1,
                o1[r0:],
                ldo1,
                np.int32(n),
                np.int32(b),
                np.int32(gz),
                np.int32(1 << dlog),
                np.int32(dlog),
                np.uint64(0) if partial is None else partial,
                *((tma.row_tiles(xh, pad, 2 * k, 2 * k, tile_rows),) if pick.name in SHARED_A else ()),
            ),
            smem,
        )
        if parts > 1:
            items = gz * m * n
            pdl.launch(
                finish,
                (-(-items // 256),),
                (256,),
                (
                    partial,
                    np.int32(parts),
                    np.int32(gz),
                    np.int32(m),
                    np.int32(n),
                    rs0,
                    o0[r0:],
                    ldo0,
                    rs1,
                    o1[r0:],
                    ldo1,
                    s0 if fmt.col_scale else np.uint64(0),
                    s1 if fmt.col_scale else np.uint64(0),
                ),
            )
    return True
