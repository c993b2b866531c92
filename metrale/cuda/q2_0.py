"""Q2_0 (GGUF type 42) × A16 launchers: ``q2_0_gemv_vec``, ``q2_0_gemv_vec_batchm``, ``q2_0_gemm``
(kernels in ``kernels/q2_0_gemv.cu``; arithmetic.md § q2_0-format), the Q2_0 uploader, and the small argument
helpers the other launcher modules of this family (``w8a8``, ``fp8_bf16``) share.

Every launch is two kernels: a prologue turns the bf16 rows into A16 codes (byte limbs, per-block
code sum and 2^(E−14)), then a GEMV computes the exact block dots, the contract's fp32 block values
and the fixed tree. Up to DEC_MAX_ROWS rows: ``q2_dec_prep`` and one pass of the decode kernels
``q2_dec_r{R}_c{NC}_d{D}_{s,l}`` (``kernels/q2_0_dec.cu``, R = m; the variant by DEC_ROUTE or
DEC_VARIANT); where tile.Q2_ENABLED, for the rows tile.takes (from tile.MIN_ROWS, and
tile.SMALL_ROWS on wgmma) where B % 8 == 0 the tiled GEMM
(``q2a16b_gemm_f{NF}`` of ``nvfp4_tile.cu``, on sm_90 ``q2a16w_gemm_f{NF}`` of ``nvfp4_wgmma.cu``:
metrale/cuda/tile.py); from MMA_MIN_ROWS rows the
integer tensor cores (``q2_mma_prep`` and the MMA kernels or the prefill GEMM of ``q2_0_mma.cu``);
else ``q2_a16_prep`` and ``q2_0_gemv_r{1,2,4,8}``. The
output of a row never depends on how many rows the call had, nor on the kernel that computed it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from metrale.cuda import configs, mma, pdl, runtime, tile
from metrale.cuda.launch_args import built_launchers, cdiv, chain_grid, projection_operands, tier_launch
from metrale.cuda.runtime import get_kernel
from metrale.cuda.weights import DeviceWeight, to_device
from metrale.errors import MetraleError
from metrale.reference.formats.q2_0 import QK, Q2_0Weight

CU_FILE = "q2_0_gemv.cu"
#: Tensor-core kernels (kernels/q2_0_mma.cu via metrale/cuda/mma.py) from MMA_MIN_ROWS rows
#: (the GEMV below it); METRALE_CUDA_MMA=0 keeps the GEMV at every m (same bits).
MMA_FILE = "q2_0_mma.cu"
MMA_MIN_ROWS = 2
#: Whether its prologue and K-split MMA kernels are launched programmatically (pdl.py): not. In
#: one run on an H200 (Qwen3-8B FFN, METRALE_CUDA_PDL=1 / 0) they took m = 16 from 93.1 to 98.8
#: us and m = 8 from 69.9 to 68.1 (performance-log.md, "2026-12-04 (evening)").
MMA_PDL = False
#: Decode kernels (kernels/q2_0_dec.cu) for m <= DEC_MAX_ROWS, before the tensor cores: the variant
#: configs.Q2_0_DEC_ROUTE gives for m and the weight's N (none where no entry covers them), or
#: DEC_VARIANT where set (METRALE_Q2_DEC: a name of configs.Q2_0_DEC_VARIANTS, or "off" for none).
DEC_FILE = "q2_0_dec.cu"
DEC_MAX_ROWS = configs.Q2_0_DEC_MAX_ROWS
DEC_VARIANTS = configs.Q2_0_DEC_VARIANTS
DEC_VARIANT: str | None = os.environ.get("METRALE_Q2_DEC") or None
DEC_ROUTE = configs.Q2_0_DEC_ROUTE
#: Under tile.CHAIN, the row counts whose decode kernels run each step's chains after the next
#: step's block dots (``q2cp_dec_*``; built for configs.Q2_0_CHAIN_PIPE_ROWS_BUILT).
CHAIN_PIPE_ROWS: tuple[int, ...] = configs.Q2_0_CHAIN_PIPE_ROWS
#: Warps per decode CTA (fewer where the column groups would not give every multiprocessor a CTA).
DEC_WARPS = configs.Q2_0_DEC_WARPS
DEC_PREP_THREADS = 128
#: Bytes of act per row and Q2 block: lo and hi planes (4 x 16) and the aux plane (4 x 8).
DEC_ACT_BYTES = 160
#: Row tiers of the GEMV kernel (rows per warp) and columns per warp for each.
Q2_TIERS = configs.Q2_0_TIERS
#: The tree over 2048-element chunks keeps at most 64 chunk roots.
Q2_MAX_K = 131072
WARPS = 4
BLOCK = 16
#: Threads per CTA of ``q2_a16_prep`` (one per row and 16-block): small CTAs spread one row's
#: blocks over several multiprocessors.
PREP_THREADS = 64


# ---- Q2_0 ----
def upload_q2_0(w: Q2_0Weight) -> DeviceWeight:
    """Q2_0 blocks [N, K/64, 18] -> qs uint8 [N, K/4] (each block's 16 code bytes) and d uint16
    [N, K/64] (f16 bits): the same bytes, split so every row of codes is 16-byte aligned."""
    qs = np.ascontiguousarray(w.blocks[..., 2:]).reshape(w.n, w.k // 4)
    d = np.ascontiguousarray(w.blocks[..., :2]).view(np.uint16)[..., 0]
    return DeviceWeight(host=w, arrays={"qs": to_device(qs), "d": to_device(np.ascontiguousarray(d))})


def _tensor_cores(xa: Any, m: int, nb: int, n: int, ws0: tuple, ws1: tuple, gz: int) -> bool:
    """``m`` rows of ``xa`` times one weight set (gz = 1) or two (gz = 2, ``ws0``/``ws1``: codes,
    scales, rowscale, out, ldo) on the tiled GEMM where it takes them, else on the MMA kernels
    from MMA_MIN_ROWS rows (launched plainly unless MMA_PDL). False where neither launched."""
    ldx = xa.strides[0] // 2
    if tile.Q2_ENABLED and tile.takes(m, tile.Q2_0) and tile.gemm(xa, ldx, m, nb, ws0, ws1, gz, n, tile.Q2_0):
        return True
    if not (mma.ENABLED and m >= MMA_MIN_ROWS) or tile.CHAIN:  # the MMA kernels are the tree's
        return False
    prefix = mma.family_prefix("q2")
    prep = mma.a16_prep(MMA_FILE, f"{prefix}_mma_prep", xa, ldx, nb, programmatic=MMA_PDL)
    return mma.launch(MMA_FILE, prefix, prep, m, nb, ws0, ws1, gz, n, programmatic=MMA_PDL)


def _q2_project(x: Any, w: Any, out: Any, m: int, kernel: str) -> None:
    import cupy

    ops = projection_operands(x, w, out, m, "q2_0", kernel, Q2_MAX_K)
    if ops is None:
        return
    arr, xa, outa, ldo = ops
    n, k = w.n, w.k
    if _dec_project(xa, arr, n, k, m, outa, ldo, chain=tile.CHAIN):
        return
    nb = k // BLOCK
    ws = (arr["qs"], arr["d"], np.float32(1.0), outa, np.int64(ldo))
    if _tensor_cores(xa, m, nb, n, ws, ws, 1):
        return
    lohi = cupy.empty((m * nb * 2 * 4,), dtype=cupy.uint32)
    aux = cupy.empty((m * nb * 2,), dtype=cupy.uint32)
    prep = get_kernel(CU_FILE, "q2_a16_prep")
    prep(
        (cdiv(m * nb, PREP_THREADS),),
        (PREP_THREADS,),
        (xa, np.int64(xa.strides[0] // 2), np.int32(k), np.int32(m), lohi, aux),
    )
    args = (arr["qs"], arr["d"], np.int32(n), np.int32(k), lohi, aux, np.int32(m), outa, np.int64(ldo))
    if tile.CHAIN:  # the generic kernels on the chain (configs.CHAIN_GENERIC_ROWS)
        r = max(c for c in configs.CHAIN_GENERIC_ROWS if c <= m)
        grid = chain_grid(n, nb, m, r)
        pdl.launch(get_kernel(CU_FILE, f"q2_0_chain_r{r}"), grid, (configs.CHAIN_GENERIC_THREADS,), args)
        return
    name, grid, block = tier_launch("q2_0_gemv", Q2_TIERS, n, m, WARPS)
    get_kernel(CU_FILE, name)(grid, block, args)


def dec_kernel_name(variant: str, rows: int, k: int, chain: bool = False) -> tuple[str, int, int]:
    """(kernel name, dynamic shared memory bytes, CTAs per multiprocessor cap) of decode
    ``variant`` for ``rows`` rows at K = ``k``: a staged variant whose activations do not fit in
    shared memory reads them through L1 instead (same arithmetic). ``chain``: its chain form
    ``q2c_dec_*``, whose warps' term scratch (``chain_scratch``) comes on top."""
    nc, staged, per_sm, depth = DEC_VARIANTS[variant]
    smem = rows * DEC_ACT_BYTES * (k // 64) if staged else 0
    if smem + (chain_scratch(nc, rows, DEC_WARPS) if chain else 0) > mma.SMEM_LIMIT:
        staged, smem = False, 0
    prefix = ("q2cp" if rows in CHAIN_PIPE_ROWS else "q2c") if chain else "q2"
    return f"{prefix}_dec_r{rows}_c{nc}_d{depth}_{'s' if staged else 'l'}", smem, per_sm


def chain_scratch(nc: int, rows: int, warps: int) -> int:
    """Bytes of the chain form's term scratch: per warp and (row, column) two parts' P_b and f_b
    (``configs.Q2_0_CHAIN_P_FLOATS`` / ``Q2_0_CHAIN_F_FLOATS`` floats each); twice that where the
    chains run a step late (CHAIN_PIPE_ROWS)."""
    per_part = configs.Q2_0_CHAIN_P_FLOATS + configs.Q2_0_CHAIN_F_FLOATS
    return warps * 2 * nc * rows * per_part * 4 * (2 if rows in CHAIN_PIPE_ROWS else 1)


def _resident(kern: Any, smem: int, cap: int, warps: int) -> int:
    """CTAs of ``kern`` (``warps`` warps, ``smem`` bytes) one multiprocessor holds at once, at
    most ``cap`` and at least 1: 64 Ki registers (8-register granularity), 228 KiB of shared
    memory with 1 KiB reserved per CTA."""
    regs = -(-int(getattr(kern, "num_regs", 0) or 0) // 8) * 8
    by_regs = 65536 // max(1, regs * 32 * warps)
    by_smem = (228 * 1024) // (smem + 1024)
    return max(1, min(cap, by_regs, by_smem))


def _dec_project(
    xa: Any, arr: dict[str, Any], n: int, k: int, m: int, outa: Any, ldo: int, chain: bool = False
) -> bool:
    """The decode kernels for m <= DEC_MAX_ROWS rows (one pass); False where they do not serve.
    ``chain``: their chain form (``q2c_dec_*``, tile.CHAIN)."""
    import cupy

    if m > min(DEC_MAX_ROWS, max(configs.Q2_0_DEC_ROWS)):
        return False
    variant = DEC_VARIANT or next((v for rows, cols, v in DEC_ROUTE if m <= rows and n <= cols), "off")
    if variant == "off":
        return False
    if variant not in DEC_VARIANTS:
        raise MetraleError(
            f"METRALE_Q2_DEC={variant!r}: want one of {', '.join(DEC_VARIANTS)} or 'off' "
            "(metrale/cuda/configs.py)"
        )
    name, smem, per_sm = dec_kernel_name(variant, m, k, chain)
    prep, kern = get_kernel(DEC_FILE, "q2_dec_prep"), get_kernel(DEC_FILE, name)
    if prep is None or kern is None:
        return False
    nq = k // 64
    act = cupy.empty((m * DEC_ACT_BYTES // 4 * nq,), dtype=cupy.uint32)
    pdl.launch(
        prep,
        (cdiv(4 * m * (k // BLOCK), DEC_PREP_THREADS),),
        (DEC_PREP_THREADS,),
        (xa, np.int64(xa.strides[0] // 2), np.int32(k), np.int32(m), act),
    )
    groups, sms = cdiv(n, DEC_VARIANTS[variant][0]), runtime.sm_count()
    warps = DEC_WARPS
    while warps > 1 and cdiv(groups, warps) < sms:  # few columns (N = 4096): a CTA on every SM
        warps //= 2
    gx = cdiv(groups, warps)
    if chain:
        smem += chain_scratch(DEC_VARIANTS[variant][0], m, warps)
    if per_sm:
        gx = min(gx, _resident(kern, smem, per_sm, warps) * sms)
    if smem:
        runtime.set_dynamic_smem(kern, smem)
    pdl.launch(
        kern,
        (gx, 1),
        (32 * warps,),
        (arr["qs"], arr["d"], np.int32(n), np.int32(k), act, np.int32(m), outa, np.int64(ldo)),
        smem,
    )
    return True


def q2_0_gemv_vec(x: Any, w: Any, out: Any) -> None:
    """out[:1] = Q2_0 × A16 projection of x[:1] (one row)."""
    _q2_project(x, w, out, 1, "q2_0_gemv_vec")


def q2_0_gemv_vec_batchm(x: Any, w: Any, out: Any, m: int) -> None:
    """out[:m] = the projection of x[:m], any m >= 1."""
    _q2_project(x, w, out, int(m), "q2_0_gemv_vec_batchm")


def q2_0_gemm(x: Any, w: Any, out: Any) -> None:
    """out = the projection of every row of x (prefill)."""
    _q2_project(x, w, out, int(x.shape[0]), "q2_0_gemm")


def q2_0_gemm_dual(x: Any, w0: Any, out0: Any, w1: Any, out1: Any) -> None:
    """Gate and up of the prefill over every row of x: one prologue and one launch of both
    weights (gz = 2) on the tiled GEMM or the MMA kernels; where neither takes them (fewer rows
    than the MMA kernels, the decode rows), ``q2_0_gemm`` twice. The same bits either way."""
    if (w0.n, w0.k) != (w1.n, w1.k):
        raise MetraleError("dual launch: gate and up must have the same shape")
    m = int(x.shape[0])
    ops0 = projection_operands(x, w0, out0, m, "q2_0", "q2_0_gemm_dual", Q2_MAX_K)
    ops1 = projection_operands(x, w1, out1, m, "q2_0", "q2_0_gemm_dual", Q2_MAX_K)
    if ops0 is None or ops1 is None:
        return
    (a0, xa, o0, ld0), (a1, _, o1, ld1) = ops0, ops1
    n, nb = w0.n, w0.k // BLOCK
    ws0 = (a0["qs"], a0["d"], np.float32(1.0), o0, np.int64(ld0))
    ws1 = (a1["qs"], a1["d"], np.float32(1.0), o1, np.int64(ld1))
    if m > min(DEC_MAX_ROWS, max(configs.Q2_0_DEC_ROWS)) and _tensor_cores(xa, m, nb, n, ws0, ws1, 2):
        return
    q2_0_gemm(x, w0, out0)
    q2_0_gemm(x, w1, out1)


_KERNEL_FUNCS = ("q2_a16_prep", *(f"q2_0_gemv_r{t}" for t in Q2_TIERS))


def kernels() -> dict[str, Callable[..., Any]]:
    """The Q2_0 launchers, when ``q2_0_gemv.cu`` built on this device (else none)."""
    launchers = (q2_0_gemv_vec, q2_0_gemv_vec_batchm, q2_0_gemm, q2_0_gemm_dual)
    return built_launchers(CU_FILE, _KERNEL_FUNCS, launchers)


UPLOADERS: dict[str, Callable[[Any], DeviceWeight]] = {"q2_0": upload_q2_0}

assert QK == 64  # the upload split above assumes GGUF's 64-element Q2_0 block
