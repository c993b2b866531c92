"""FP8 (W8A16) and BF16 dense × A16 launchers: ``w8a16_gemv``, ``w8a16_gemm``, ``dense_gemv``,
``dense_gemm`` (kernels in ``kernels/fp8_bf16_gemv.cu``; arithmetic.md § codes24 with 24-bit weight block
codes), and their uploaders.

The FP8 uploader keeps the e4m3 bytes. The BF16 uploader stores, per block, the weight values
the contract's 24-bit codes stand for, c·2^(F−22) (``weight_codes24``): they equal the bf16
weight except in blocks spanning more than 2^15, and are always bf16 values, so the kernel's
exact float64 block dot of those values with the A16 codes is S_b·2^(F−22) exactly.
``w8a16_gemm`` / ``dense_gemm`` with m ≥ ``MMA_MIN_M`` rows run on integer tensor cores over
the 24-bit codes as 8-bit limbs in ``mma.sync`` fragment order (``mma_fragments``, added to the
device weight on its first such call): from ``GEMM_MIN_ROWS`` rows the prefill GEMM of
``kernels/mma_gemm.cuh`` (``kernels/fp8_bf16_mma.cu``, launched by ``metrale.cuda.mma.gemm`` in
chunks of ``mma.GEMM_ROWS`` rows, K split into aligned parts where the grid is small), below it
(or where that GEMM does not fill the GPU) the K-split ``{fp8,bf16}_mma_nt*``; m ≤ 3 rows run the
decode kernels (``{fp8,bf16}_dec_*``, configurations ``configs.FP8_BF16_DEC``) and any other row
count below ``MMA_MIN_M`` the CUDA-core GEMV tiers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from metrale.cuda import configs, mma, pdl, tile
from metrale.cuda.launch_args import built_launchers, cdiv, chain_grid, projection_operands, tier, tier_launch
from metrale.cuda.runtime import get_kernel, set_dynamic_smem
from metrale.cuda.weights import DeviceWeight, to_device
from metrale.errors import MetraleError
from metrale.reference.activations import weight_codes24
from metrale.reference.chain import PART_BLOCKS, fp8_effective
from metrale.reference.elements import BF16, bf16_exponent_field
from metrale.reference.formats import DenseWeight, Fp8Weight

CU_FILE = "fp8_bf16_gemv.cu"
#: Row tiers (rows per warp) -> columns per warp.
WIDE_TIERS = configs.FP8_BF16_TIERS
#: The tree over 1024-element chunks keeps at most 64 chunk roots.
WIDE_MAX_K = 65536
WARPS = 4
BLOCK = 16
#: Rows per prep/GEMV pass (bounds the float64 code scratch at ROW_CHUNK·K·8 bytes).
ROW_CHUNK = 1024
_UPLOAD_ROWS = 2048
#: Integer tensor-core GEMM: row tiers (rows per CTA, 8·NT) -> NT; warps per CTA (they split K
#: into 64-block runs; the kernel file's FP8_BF16_MMA_WARPS, from configs.py).
MMA_TIERS = configs.FP8_BF16_MMA_TILES
MMA_WARPS = configs.FP8_BF16_MMA_WARPS
#: The tensor-core GEMM serves w8a16_gemm / dense_gemm from this many rows; fewer rows run
#: the decode kernels (DECODE "dec", up to 3 rows, configuration per row count in DEC_TIERS)
#: or the GEMV tiers. Module attributes so ``metrale bench --variants fp8-dec`` can switch them.
MMA_MIN_M = configs.FP8_BF16_MMA_MIN_M
DECODE = configs.FP8_BF16_DECODE
DEC_TIERS: dict[int, configs.Fp8Bf16Dec] = dict(configs.FP8_BF16_DEC)
#: Under tile.CHAIN: the decode kernels' chain form for these row counts (FP8 only where
#: CHAIN_DEC_FP8).
CHAIN_DEC_TIERS: dict[int, configs.Fp8Bf16Dec] = dict(configs.FP8_BF16_CHAIN_DEC)
CHAIN_DEC_FP8 = configs.FP8_CHAIN_DEC
#: The prefill GEMM (``fp8_bf16_mma.cu``) from this many rows (METRALE_FP8_BF16_GEMM_MIN_ROWS
#: moves the switch: tests and benchmarks).
GEMM_FILE = "fp8_bf16_mma.cu"
GEMM_MIN_ROWS = int(os.environ.get("METRALE_FP8_BF16_GEMM_MIN_ROWS", str(configs.FP8_BF16_GEMM_MIN_ROWS)))
#: The GEMM kernels' name suffix per counter depth (``p`` / ``l``: configs.FP8_BF16_GEMM_SUFFIX)
#: and raster (configs.FP8_BF16_GEMM_ROWS_FIRST); module attributes so ``metrale bench --variants fp8-gemm``
#: and the tests can switch them.
GEMM_SUFFIX: dict[int, str] = dict(configs.FP8_BF16_GEMM_SUFFIX)
GEMM_ROWS_FIRST = configs.FP8_BF16_GEMM_ROWS_FIRST


def effective_bf16(w: np.ndarray) -> np.ndarray:
    """bf16 [N, K] whose blocks hold c·2^(F−22) for the 24-bit codes c of ``w`` (a copy of w
    except in blocks whose exponent fields span more than 15)."""
    out = np.array(w, dtype=BF16, copy=True)
    n, k = w.shape
    for r0 in range(0, n, _UPLOAD_ROWS):
        sub = w[r0 : r0 + _UPLOAD_ROWS]
        f = np.maximum(bf16_exponent_field(sub).reshape(sub.shape[0], k // BLOCK, BLOCK), 1)
        rows = np.nonzero(((f.max(axis=-1, keepdims=True) - f) > 15).any(axis=(1, 2)))[0]
        if rows.size == 0:
            continue
        wb = weight_codes24(sub[rows])
        exact = np.ldexp(wb.codes, (wb.exp - 22)[..., None]).reshape(rows.size, k)
        eff = exact.astype(BF16)
        if not np.array_equal(eff.astype(np.float64), exact):  # pragma: no cover - by the argument above
            raise MetraleError("dense upload: a 24-bit block code is not a bf16 value")
        out[r0 + rows] = eff
    return out


def mma_fragments(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 24-bit block codes of e4m3/bf16 ``w`` [N, K] as 8-bit limbs in mma.sync A-fragment
    order, u32 [N16, Bp, 32, 6], and 2^(F−22) as the high words of doubles, int32 [N16, Bp, 16]
    (N padded to 16 rows, B to Bp = 8·ceil(B/8) blocks with zero codes); layout in
    ``kernels/fp8_bf16_gemv.cu``."""
    n, k = w.shape
    nb = k // BLOCK
    n16, bp = cdiv(n, 16), 8 * cdiv(nb, 8)
    codes = np.zeros((n16 * 16, bp, BLOCK), dtype=np.int32)
    exps = np.zeros((n16 * 16, bp), dtype=np.int32)
    for r0 in range(0, n, _UPLOAD_ROWS):
        wb = weight_codes24(w[r0 : r0 + _UPLOAD_ROWS])
        codes[r0 : r0 + wb.codes.shape[0], :nb] = wb.codes.astype(np.int32)
        exps[r0 : r0 + wb.codes.shape[0], :nb] = wb.exp
    limbs = np.stack([(codes >> (8 * i)) & 0xFF for i in range(3)]).astype(np.uint8)  # [3, Np, Bp, 16]
    limbs = limbs.reshape(3, n16, 2, 8, bp, 4, 4).transpose(1, 4, 3, 5, 0, 2, 6)  # n16 b g t limb h byte
    frag = np.ascontiguousarray(limbs).view(np.uint32).reshape(n16, bp, 32, 6)
    pw = ((exps - 22 + 1023) << 20).astype(np.int32).reshape(n16, 16, bp).transpose(0, 2, 1)
    return frag, np.ascontiguousarray(pw)


def _mma_arrays(w: np.ndarray) -> dict[str, Any]:
    frag, pw = mma_fragments(w)
    return {"mma_w": to_device(frag), "mma_pw": to_device(pw)}


def tile_fp8_bytes(w: np.ndarray) -> np.ndarray:
    """uint8 [N, K] of e4m3 w [N, K] for the FP8 chain kernels (tile.FP8's tile, ``fp8_chain_r*``,
    ``fp8c_dec_*``; docs/chain-revision.md): the rounded values of ``chain.fp8_effective``, row-major,
    16 bytes per block (the tile takes a lane's words by ldmatrix, the others load whole blocks)."""
    return np.ascontiguousarray(fp8_effective(w).view(np.uint8))


def upload_fp8(w: Fp8Weight) -> DeviceWeight:
    """e4m3 weight [N, K] (as uint8 bits) and f32 weight_scale [N]; the tensor-core fragments
    are added on the first call with m ≥ MMA_MIN_M rows."""
    return DeviceWeight(
        host=w, arrays={"weight": to_device(w.weight), "weight_scale": to_device(w.weight_scale)}
    )


def upload_bf16(w: DenseWeight) -> DeviceWeight:
    """bf16 weight [N, K] (uint16 bits) holding the 24-bit block codes' values; the tensor-core
    fragments are added on the first call with m ≥ MMA_MIN_M rows."""
    return DeviceWeight(host=w, arrays={"weight": to_device(effective_bf16(w.weight))})


def _project_mma(
    xa: Any, arr: dict[str, Any], n: int, k: int, m: int, outa: Any, ldo: int, fp8: bool, chain: bool = False
) -> None:
    """The integer tensor-core GEMM (``{fp8,bf16}_mma_nt*``; BF16 on the chain ``bf16c_mma_nt*``)
    over rows in ROW_CHUNK passes."""
    import cupy

    nb = k // BLOCK
    bp = 8 * cdiv(nb, 8)
    prep = get_kernel(CU_FILE, "fp8_bf16_mma_prep")
    scale = arr["weight_scale"] if fp8 else np.uint64(0)
    for r0 in range(0, m, ROW_CHUNK):
        mr = min(ROW_CHUNK, m - r0)
        mt = cdiv(mr, 8)
        act = cupy.empty((mt * bp * 64,), dtype=cupy.uint32)
        pa = cupy.empty((mt * 8 * bp,), dtype=cupy.int32)
        ld = np.int64(xa.strides[0] // 2)
        prep(
            (cdiv(mt * 8 * bp, 256),),
            (256,),
            (xa[r0 : r0 + mr], ld, np.int32(k), np.int32(mr), np.int32(mt), np.int32(bp), act, pa),
        )
        nt = MMA_TIERS[tier(mr, MMA_TIERS)]
        gemm = get_kernel(CU_FILE, f"{'fp8' if fp8 else 'bf16c' if chain else 'bf16'}_mma_nt{nt}")
        smem = cdiv(bp // 8, 8) * nt * 4 * 32 * 4  # run roots
        set_dynamic_smem(gemm, smem)
        gemm(
            (cdiv(n, 16), cdiv(mr, 8 * nt)),
            (32 * MMA_WARPS,),
            (
                arr["mma_w"],
                arr["mma_pw"],
                scale,
                act,
                pa,
                np.int32(n),
                np.int32(nb),
                np.int32(bp),
                np.int32(mr),
                outa[r0 : r0 + mr],
                np.int64(ldo),
            ),
            shared_mem=smem,
        )


def _project_dec(
    xa: Any,
    w: Any,
    scale: Any,
    n: int,
    k: int,
    m: int,
    outa: Any,
    ldo: int,
    fp8: bool,
    cfg: configs.Fp8Bf16Dec,
    chain: bool = False,
) -> None:
    """The decode kernel ``cfg`` over all m rows in one pass (prep, then one launch; both
    PDL-capable, so each may start while its predecessor drains); ``chain``: its chain form
    ``{fp8,bf16}c_dec_*`` (FP8 ``w`` in the chain tile's bytes), its block values in dynamic
    shared memory (configs.FP8_BF16_CHAIN_DEC_PART_FLOATS per part, row and column)."""
    import cupy

    chunks = cdiv(k // BLOCK, 32)
    words = m * chunks * 32 * (16 if cfg.act == "h" else 8)  # u32 per row: 16 (h) or 8 (i) per block
    act = cupy.empty((words,), dtype=cupy.uint32)
    pe = cupy.empty((m * chunks * 32,), dtype=cupy.int32)
    prep = get_kernel(CU_FILE, "fp8_bf16_dec_prep")
    pdl.launch(
        prep,
        (cdiv(m * chunks * 32, 256),),
        (256,),
        (
            xa,
            np.int64(xa.strides[0] // 2),
            np.int32(k),
            np.int32(m),
            np.int32(chunks),
            np.int32(cfg.act == "i"),
            act,
            pe,
        ),
    )
    gemv = get_kernel(CU_FILE, cfg.name(("fp8" if fp8 else "bf16") + ("c" if chain else ""), m))
    smem = (
        4 * cfg.nc * m * configs.FP8_BF16_CHAIN_DEC_PART_FLOATS * cdiv(k // BLOCK, PART_BLOCKS)
        if chain
        else 0
    )
    set_dynamic_smem(gemv, smem)
    pdl.launch(
        gemv,
        (cdiv(n, cfg.nc), 1),
        (32 * cfg.warps,),
        (w, scale, np.int32(n), np.int32(k), act, pe, np.int32(m), outa, np.int64(ldo)),
        smem,
    )


def _project_gemm(
    xa: Any, arr: dict[str, Any], n: int, k: int, m: int, outa: Any, ldo: int, fp8: bool, chain: bool = False
) -> bool:
    """The prefill GEMM (``fp8_bf16_gemm_*``; BF16 on the chain ``bf16c_gemm_*``, K split by whole
    chain parts) over all m rows; False (nothing launched) where it did not build or its grid
    would not fill the GPU."""
    nb = k // BLOCK
    prep = mma.a16_prep(GEMM_FILE, "fp8_bf16_gemm_prep", xa, xa.strides[0] // 2, nb)
    if prep is None:
        return False
    args = (arr["mma_w"], arr["mma_pw"], np.float32(1.0), outa, np.int64(ldo))
    return mma.gemm(
        GEMM_FILE,
        "bf16c" if chain else "fp8_bf16",
        prep,
        m,
        nb,
        args,
        args,
        1,
        n,
        tiles=configs.FP8_BF16_GEMM_TILES,
        small_tiles=configs.FP8_BF16_GEMM_SMALL_TILES,
        suffix=GEMM_SUFFIX,
        colscale=(arr["weight_scale"] if fp8 else None, None),
        rows_first=GEMM_ROWS_FIRST,
        min_part_steps=PART_BLOCKS // 8 if chain else mma.GEMM_MIN_PART_STEPS,
    )


def _project_chain(xa: Any, arr: dict[str, Any], w: Any, m: int, outa: Any, ldo: int, fp8: bool) -> None:
    """tile.CHAIN (docs/chain-revision.md): the decode kernels' chain form at the row counts of
    CHAIN_DEC_TIERS (DECODE "dec"; FP8 only where CHAIN_DEC_FP8); FP8 on the chain tile where it
    takes the rows (from ``tile.FP8.chain_min_rows``, B % 8 == 0); BF16 from
    configs.FP8_BF16_CHAIN_MMA_MIN_M rows on the wide tensor-core kernels' chain form where
    mma.ENABLED (the prefill GEMM ``bf16c_gemm_*`` from GEMM_MIN_ROWS where its grid fills the
    GPU, else the K-split ``bf16c_mma_nt*``: the tree's routing, the same block values); else
    ``{fp8,bf16}_chain_r{R}`` after ``fp8_bf16_a16_prep`` in ROW_CHUNK passes. FP8 reads the
    chain's bytes (``tile_fp8_bytes``, added to the device weight on its first such call), BF16
    its uploaded weight."""
    import cupy

    n, k = w.n, w.k
    nb = k // BLOCK
    if fp8 and "chain_w" not in arr:
        arr["chain_w"] = to_device(tile_fp8_bytes(w.host.weight))
    wt, scale = (arr["chain_w"], arr["weight_scale"]) if fp8 else (arr["weight"], np.uint64(0))
    if DECODE == "dec" and m in CHAIN_DEC_TIERS and (CHAIN_DEC_FP8 or not fp8):
        _project_dec(xa, wt, scale, n, k, m, outa, ldo, fp8, CHAIN_DEC_TIERS[m], chain=True)
        return
    if fp8 and m >= tile.FP8.chain_min_rows:
        ws = (wt, scale, np.float32(1.0), outa, np.int64(ldo))
        if tile.gemm_fp8(xa, xa.strides[0] // 2, m, nb, ws, ws, 1, n):
            return
    if not fp8 and mma.ENABLED and m >= configs.FP8_BF16_CHAIN_MMA_MIN_M:
        if "mma_w" not in arr:
            arr.update(_mma_arrays(w.host.weight))
        if not (m >= GEMM_MIN_ROWS and _project_gemm(xa, arr, n, k, m, outa, ldo, False, chain=True)):
            _project_mma(xa, arr, n, k, m, outa, ldo, False, chain=True)
        return
    prep = get_kernel(CU_FILE, "fp8_bf16_a16_prep")
    for r0 in range(0, m, ROW_CHUNK):
        mr = min(ROW_CHUNK, m - r0)
        ac = cupy.empty((mr * k,), dtype=cupy.float64)
        p2 = cupy.empty((mr * nb,), dtype=cupy.float64)
        prep(
            (cdiv(mr * nb, 256),),
            (256,),
            (xa[r0 : r0 + mr], np.int64(xa.strides[0] // 2), np.int32(k), np.int32(mr), ac, p2),
        )
        r = max(c for c in configs.CHAIN_GENERIC_ROWS if c <= mr)
        kern = get_kernel(CU_FILE, f"{'fp8' if fp8 else 'bf16'}_chain_r{r}")
        args = (wt, scale, np.int32(n), np.int32(k), ac, p2, np.int32(mr), outa[r0 : r0 + mr], np.int64(ldo))
        pdl.launch(kern, chain_grid(n, nb, mr, r), (configs.CHAIN_GENERIC_THREADS,), args)


def _project(x: Any, w: Any, out: Any, m: int, kernel: str, fp8: bool) -> None:
    import cupy

    ops = projection_operands(x, w, out, m, "fp8" if fp8 else "bf16", kernel, WIDE_MAX_K)
    if ops is None:
        return
    arr, xa, outa, ldo = ops
    n, k = w.n, w.k
    if tile.CHAIN:
        _project_chain(xa, arr, w, m, outa, ldo, fp8)
        return
    if m >= MMA_MIN_M:
        if "mma_w" not in arr:  # 3 bytes per weight plus a factor per block: built when first needed
            arr.update(_mma_arrays(w.host.weight))
        if not (mma.ENABLED and m >= GEMM_MIN_ROWS and _project_gemm(xa, arr, n, k, m, outa, ldo, fp8)):
            _project_mma(xa, arr, n, k, m, outa, ldo, fp8)
        return
    scale = arr["weight_scale"] if fp8 else np.uint64(0)
    if DECODE == "dec" and m in DEC_TIERS:
        _project_dec(xa, arr["weight"], scale, n, k, m, outa, ldo, fp8, DEC_TIERS[m])
        return
    nb = k // BLOCK
    prep = get_kernel(CU_FILE, "fp8_bf16_a16_prep")
    for r0 in range(0, m, ROW_CHUNK):
        mr = min(ROW_CHUNK, m - r0)
        ac = cupy.empty((mr * k,), dtype=cupy.float64)
        p2 = cupy.empty((mr * nb,), dtype=cupy.float64)
        xs = xa[r0 : r0 + mr]
        prep(
            (cdiv(mr * nb, 256),),
            (256,),
            (xs, np.int64(xa.strides[0] // 2), np.int32(k), np.int32(mr), ac, p2),
        )
        name, grid, block = tier_launch(f"{'fp8' if fp8 else 'bf16'}_gemv", WIDE_TIERS, n, mr, WARPS)
        get_kernel(CU_FILE, name)(
            grid,
            block,
            (
                arr["weight"],
                scale,
                np.int32(n),
                np.int32(k),
                ac,
                p2,
                np.int32(mr),
                outa[r0 : r0 + mr],
                np.int64(ldo),
            ),
        )


def w8a16_gemv(x: Any, w: Any, out: Any) -> None:
    """out[:1] = FP8 × A16 projection of x[:1]."""
    _project(x, w, out, 1, "w8a16_gemv", True)


def w8a16_gemm(x: Any, w: Any, out: Any) -> None:
    """out = FP8 × A16 projection of every row of x."""
    _project(x, w, out, int(x.shape[0]), "w8a16_gemm", True)


def dense_gemv(x: Any, w: Any, out: Any) -> None:
    """out[:1] = BF16 × A16 projection of x[:1]."""
    _project(x, w, out, 1, "dense_gemv", False)


def dense_gemm(x: Any, w: Any, out: Any) -> None:
    """out = BF16 × A16 projection of every row of x."""
    _project(x, w, out, int(x.shape[0]), "dense_gemm", False)


_KERNEL_FUNCS = (
    "fp8_bf16_a16_prep",
    "fp8_bf16_mma_prep",
    "fp8_bf16_dec_prep",
    *(d.name(p, r) for p in ("fp8", "bf16") for r, d in configs.FP8_BF16_DEC.items()),
    *(f"{p}_gemv_r{t}" for p in ("fp8", "bf16") for t in WIDE_TIERS),
    *(f"{p}_mma_nt{nt}" for p in ("fp8", "bf16", "bf16c") for nt in MMA_TIERS.values()),
)


def kernels() -> dict[str, Callable[..., Any]]:
    """The FP8/BF16 launchers, when ``fp8_bf16_gemv.cu`` built on this device (else none)."""
    return built_launchers(CU_FILE, _KERNEL_FUNCS, (w8a16_gemv, w8a16_gemm, dense_gemv, dense_gemm))


UPLOADERS: dict[str, Callable[[Any], DeviceWeight]] = {"fp8": upload_fp8, "bf16": upload_bf16}
