"""Launcher of the integer tensor-core kernels of ``kernels/mma_gemm.cuh`` (NVFP4 × A16/A4 in
``nvfp4_mma.cu``, Q2_0 × A16 in ``q2_0_mma.cu``; FP8/BF16 × A16 in ``fp8_bf16_mma.cu`` through
``gemm`` with its own tables): one prologue per chunk of rows writes the
activation codes in MMA fragment order into a persistent workspace, then either the prefill GEMM
(``{prefix}_gemm_*``: every warp a 16-column × 8·NT-row tile over all of K, or over one of up to
GEMM_MAX_PARTS aligned K parts whose roots ``mma_finish`` sums where the grid would be small)
where its grid fills every multiprocessor, or the K-split MMA kernels (``{prefix}_mma_nt{NT}_*``:
a CTA per 16 columns, K split across its warps) in chunks of MMA_ROWS rows. Every path gives the
same bits (arithmetic.md § tree). The A16 prologues, the kernels and ``mma_finish`` are launched
programmatically (metrale/cuda/pdl.py: the prefill GEMM requests its first step's weights before
it waits; the K-split kernels wait first).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from metrale.cuda import configs, pdl, runtime
from metrale.errors import MetraleError

#: METRALE_CUDA_MMA=0 turns the tensor-core paths off (the CUDA-core kernels give the same bits).
ENABLED = os.environ.get("METRALE_CUDA_MMA", "1") != "0"
MMA_ROWS = 8 * configs.NVFP4_MMA_TILES[-1]
#: The launch shape the kernels are built with (configs.py states it for both).
MMA_WARPS = configs.MMA_WARPS
MMA_RUN = configs.MMA_RUN
#: The GEMM from GEMM_MIN_ROWS rows on (METRALE_GEMM_MIN_ROWS moves the switch: tests and
#: benchmarks), in chunks of GEMM_ROWS rows (the workspace: 36 bytes per row and block).
GEMM_MIN_ROWS = int(os.environ.get("METRALE_GEMM_MIN_ROWS", "33"))
GEMM_ROWS = 2048
#: Take the GEMM also where its grid does not fill the GPU (tests, ``metrale bench --variants nvfp4-gemm``).
GEMM_ANY_GRID = False
GEMM_WARPS = configs.GEMM_WARPS
GEMM_TILES = configs.NVFP4_GEMM_TILES
GEMM_SMALL_TILES = configs.NVFP4_GEMM_SMALL_TILES
#: Split K into at most GEMM_MAX_PARTS aligned parts of at least GEMM_MIN_PART_STEPS steps
#: (8 blocks each) while the grid has fewer than two CTAs per multiprocessor.
GEMM_MAX_PARTS = 64
GEMM_MIN_PART_STEPS = 4
#: The block-dot family the NVFP4 (A16, A4) and Q2_0 launchers take (configs.BLOCK_DOT;
#: METRALE_BLOCK_DOT moves it, for benchmarks of the two): "s8" (``w4a16_*``, ``w4a4_*``,
#: ``q2_*``) or "f16" (``w4a16h_*``, ``w4a4h_*``, ``q2h_*``: one f16 MMA per block, the same bits).
BLOCK_DOT_FAMILIES = ("s8", "f16")
BLOCK_DOT = os.environ.get("METRALE_BLOCK_DOT", configs.BLOCK_DOT)
if BLOCK_DOT not in BLOCK_DOT_FAMILIES:
    raise MetraleError(f"METRALE_BLOCK_DOT={BLOCK_DOT!r}: want one of {', '.join(BLOCK_DOT_FAMILIES)}")


def family_prefix(s8: str, family: str | None = None) -> str:
    """The kernel prefix of block-dot ``family`` (None: BLOCK_DOT, the one in use) for the s8
    family's prefix ``s8`` (+ "h" for the f16 one)."""
    return s8 if (family or BLOCK_DOT) == "s8" else f"{s8}h"


#: Dynamic shared memory a launch may ask for (of the H200's 227 KB per CTA, with headroom).
SMEM_LIMIT = 220 * 1024
#: Shared memory of a multiprocessor (sm_90) and what the system keeps of it per CTA.
SM_SMEM, CTA_RESERVED = 228 * 1024, 1024
#: Threads per CTA of the prologues (one per row and block).
PREP_THREADS = 256
#: prep(r0, m, rows8, nb, act, fac): launch the prologue of rows r0 .. r0 + m - 1 into act/fac.
Prep = Callable[[int, int, int, int, Any, Any], None]
#: device -> persistent prologue workspace (stream-ordered reuse; graph-capture safe).
_workspace: dict[int, Any] = {}


def workspace(nbytes: int) -> Any:
    """A device buffer of at least ``nbytes`` bytes, kept per device and grown on demand."""
    import cupy

    dev = runtime.device_id()
    buf = _workspace.get(dev)
    if buf is None or buf.nbytes < nbytes:
        buf = cupy.empty(nbytes, dtype=cupy.uint8)
        _workspace[dev] = buf
    return buf


def a16_prep(cu: str, name: str, x: Any, ldx: int, b: int, *, programmatic: bool = True) -> Prep | None:
    """The A16 prologue ``name`` of ``cu`` over bf16 rows ``x`` (row stride ``ldx`` elements) of
    ``b`` blocks, as a Prep; None where the kernel did not build. ``programmatic``: whether it
    may be launched programmatically (pdl.launch's ``programmatic_ok``)."""
    kern = runtime.get_kernel(cu, name)
    if kern is None:
        return None

    def prep(r0: int, m: int, rows8: int, nb: int, act: Any, fac: Any) -> None:
        args = (x[r0:], np.int64(ldx), np.int32(m), np.int32(rows8), np.int32(b), np.int32(nb), act, fac)
        grid = (-(-rows8 * nb // PREP_THREADS),)
        pdl.launch(kern, grid, (PREP_THREADS,), args, programmatic_ok=programmatic)

    return prep


def launch(
    cu: str,
    prefix: str,
    prep: Prep | None,
    rows: int,
    b: int,
    args0: tuple,
    args1: tuple,
    gz: int,
    n: int,
    *,
    programmatic: bool = True,
) -> bool:
    """``rows`` rows times one weight set (gz = 1) or two (gz = 2, gate and up) of N = ``n``
    columns and B = ``b`` blocks; ``args0``/``args1`` the sets' (codes, scales, rowscale, out,
    ldo). False (nothing launched) where the kernels did not build or do not fit.
    ``programmatic``: whether the K-split MMA kernels may be launched programmatically."""
    if prep is None:
        return False
    if rows >= GEMM_MIN_ROWS and gemm(cu, prefix, prep, rows, b, args0, args1, gz, n):
        return True
    suffix = "a" if b % 8 == 0 else "u"
    nb = MMA_RUN * -(-b // MMA_RUN)
    runs = nb // MMA_RUN
    plan = []
    for r0 in range(0, rows, MMA_ROWS):
        m = min(MMA_ROWS, rows - r0)
        nt = -(-m // 8)
        smem = 16 * 8 * nt * runs * 4
        kern = runtime.get_kernel(cu, f"{prefix}_mma_nt{nt}_{suffix}")
        if kern is None or smem > SMEM_LIMIT:
            return False
        plan.append((r0, m, nt, smem, kern))
    ws = workspace(MMA_ROWS * nb * 36)
    (w0, s0, rs0, o0, ldo0), (w1, s1, rs1, o1, ldo1) = args0, args1
    tail = (np.int32(n), np.int32(b), np.int32(nb))
    for r0, m, nt, smem, kern in plan:
        rows8 = 8 * nt
        act = ws[: rows8 * nb * 32]
        fac = ws[rows8 * nb * 32 : rows8 * nb * 36]
        prep(r0, m, rows8, nb, act, fac)
        runtime.set_dynamic_smem(kern, smem)
        pdl.launch(
            kern,
            (-(-n // 16), 1, gz),
            (32 * MMA_WARPS,),
            (act, fac, np.int32(m), w0, s0, rs0, o0[r0:], ldo0, w1, s1, rs1, o1[r0:], ldo1, *tail),
            smem,
            programmatic_ok=programmatic,
        )
    return True


def gemm(
    cu: str,
    prefix: str,
    prep: Prep,
    rows: int,
    b: int,
    args0: tuple,
    args1: tuple,
    gz: int,
    n: int,
    *,
    tiles: dict[int, tuple[int, int]] | None = None,
    small_tiles: dict[int, tuple[int, int]] | None = None,
    suffix: str | dict[int, str] | None = None,
    colscale: tuple[Any, Any] | None = None,
    rows_first: bool = False,
    min_part_steps: int = GEMM_MIN_PART_STEPS,
) -> bool:
    """The GEMM over chunks of up to GEMM_ROWS rows: the prologue of the chunk, then one launch
    (K split into ``parts`` aligned subtrees where the grid would not fill the GPU twice, the
    parts' roots finished by ``mma_finish``). False (nothing launched) where no kernel covers K,
    or the grid would not fill the GPU (unless GEMM_ANY_GRID). ``tiles``/``small_tiles``: the
    depth -> (NT, MINB) tables (default the NVFP4/Q2_0 ones); ``suffix``: the kernel name's last
    part, one or per counter depth (default ``a``/``u`` by B % 8); ``colscale``: the wide
    kernels' per-column output scales of the two sets (device f32 [N] or None), passed to the
    GEMM and to ``mma_finish``, with ``rows_first`` (the wide kernels only): row tiles along
    grid.x, so the CTAs running together share weight columns (mma_gemm.cuh gemm_body's raster);
    ``min_part_steps``: the fewest steps a K part holds (8 for the chain's kernels: whole chain
    parts)."""
    nb = 8 * -(-b // 8)
    s8 = nb // 8
    chunk = min(rows, GEMM_ROWS)
    table = (small_tiles or GEMM_SMALL_TILES) if chunk <= 8 else (tiles or GEMM_TILES)
    col_ctas = -(-n // (16 * GEMM_WARPS))
    kp8 = 1 << max(0, (s8 - 1).bit_length())  # steps per part: a power of two >= S8 (one part)
    parts = 1
    target = 2 * runtime.sm_count()
    while kp8 > min_part_steps and -(-s8 // (kp8 // 2)) <= GEMM_MAX_PARTS:
        nt_here = table[min((d for d in table if kp8 <= 1 << d), default=max(table))][0]
        if col_ctas * -(-chunk // (8 * nt_here)) * gz * parts >= target:
            break
        kp8 //= 2
        parts = -(-s8 // kp8)
    depth = min((d for d in table if kp8 <= 1 << d), default=None)
    if depth is None:
        return False
    nt, minb = table[depth]
    ctas = col_ctas * -(-chunk // (8 * nt)) * gz * parts
    if not GEMM_ANY_GRID and ctas < minb * runtime.sm_count():
        return False
    if isinstance(suffix, dict):
        suffix = suffix[depth]
    suffix = suffix or ("a" if b % 8 == 0 else "u")
    kern = runtime.get_kernel(cu, f"{prefix}_gemm_nt{nt}_d{depth}_b{minb}_{suffix}")
    finish = runtime.get_kernel(cu, "mma_finish")
    if kern is None or finish is None:
        return False
    ws_bytes = (GEMM_ROWS + 8 * nt) * nb * 36
    part_bytes = parts * gz * chunk * n * 4 if parts > 1 else 0
    ws = workspace(ws_bytes + part_bytes)
    partial = ws[ws_bytes : ws_bytes + part_bytes].view(np.float32) if parts > 1 else None
    (w0, s0, rs0, o0, ldo0), (w1, s1, rs1, o1, ldo1) = args0, args1
    # no partial buffer: a null pointer (the kernel then writes y itself)
    tail = (
        np.int32(n),
        np.int32(b),
        np.int32(nb),
        np.int32(gz),
        np.int32(kp8),
        np.uint64(0) if partial is None else partial,
    )
    # the column scales: null pointers where a set has none
    cs = tuple(np.uint64(0) if c is None else c for c in (colscale or (None, None)))
    if colscale is not None:
        tail = (*tail, *cs, np.int32(rows_first))
    elif rows_first:
        raise ValueError("rows_first: only the wide GEMM kernels (colscale given) take the raster")
    head = (partial, np.int32(parts), np.int32(gz))
    for r0 in range(0, rows, GEMM_ROWS):
        m = min(GEMM_ROWS, rows - r0)
        tiles = -(-m // (8 * nt))
        rows8 = 8 * nt * tiles
        act = ws[: rows8 * nb * 32]
        fac = ws[rows8 * nb * 32 : rows8 * nb * 36]
        prep(r0, m, rows8, nb, act, fac)
        pdl.launch(
            kern,
            (tiles, col_ctas, gz * parts) if rows_first else (col_ctas, tiles, gz * parts),
            (32 * GEMM_WARPS,),
            (act, fac, np.int32(m), w0, s0, rs0, o0[r0:], ldo0, w1, s1, rs1, o1[r0:], ldo1, *tail),
        )
        if parts > 1:
            items = gz * m * n
            pdl.launch(
                finish,
                (-(-items // 256),),
                (256,),
                (*head, np.int32(m), np.int32(n), rs0, o0[r0:], ldo0, rs1, o1[r0:], ldo1, *cs),
            )
    return True
