"""Launchers of the NVFP4 kernels (``kernels/nvfp4_gemv.cu``, ``kernels/nvfp4_a4.cu``), with the
reference's signatures (metrale/reference/kernels.py).

Activations and outputs are CuPy uint16 arrays (bf16 bits) with unit column stride; outputs
may be row slices of larger buffers (the row stride is passed). Weights are ``DeviceWeight``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrale.cuda import configs, mma, pdl, runtime, tile
from metrale.cuda.launch_args import mat
from metrale.cuda.weights import upload_generic
from metrale.errors import MetraleError
from metrale.reference.activations import A4Codes
from metrale.reference.backend import W4A16_TIERS
from metrale.reference.elements import E4M3

A16_FILE = "nvfp4_gemv.cu"
A4_FILE = "nvfp4_a4.cu"
WARPS = configs.NVFP4_WARPS
THREADS = 32 * WARPS
#: K up to 64 chunks of 64 blocks (two 2048-block slots of the tree).
MAX_K = 65536
A16_ROWS = configs.NVFP4_A16_ROWS
A4_ROWS = configs.NVFP4_A4_ROWS
F32 = np.float32
#: Use the fast A16 kernels where they apply (B % 64 == 0); METRALE_CUDA_FAST=0 turns
#: them off (the generic kernels give the same bits).
FAST_ENABLED = os.environ.get("METRALE_CUDA_FAST", "1") != "0"
#: Tensor-core kernels (kernels/nvfp4_mma.cu, launched by metrale/cuda/mma.py) for m >=
#: MMA_MIN_ROWS; METRALE_CUDA_MMA=0 forces the CUDA-core kernels (same bits). MMA_MIN_ROWS = 4:
#: on the H200 (docs/performance-log.md) the Qwen3-8B FFN took 77.2 us at m = 2 on the MMA path
#: against 56.0 us on the CUDA-core kernels; the tests lower it to 2 to keep m = 2, 3 covered;
#: METRALE_NVFP4_MMA_MIN_ROWS moves it (benchmarks of the routing). Up to FAST_ONE_PASS_ROWS
#: rows a projection whose fast kernel takes all rows in one pass (its shared memory fits) runs
#: that instead: the Qwen3-8B FFN at m = 4 took 86.0 us on the MMA path against 73.6 us on the
#: fast kernels (all three projections in one pass), while Llama-3-8B, whose down projection
#: (K = 14336) fits three rows per pass, took 107.3 us on the fast kernels against 98.4 us on
#: the MMA path.
MMA_FILE = "nvfp4_mma.cu"
MMA_MIN_ROWS = int(os.environ.get("METRALE_NVFP4_MMA_MIN_ROWS", "4"))
FAST_ONE_PASS_ROWS = 4
#: The A4 kernels take the tensor-core path from 2 rows (the CUDA-core A4 kernels make one
#: pass per row below 4 rows and per 4 rows above) where the fast A4 kernels do not apply.
A4_MMA_MIN_ROWS = 2
#: W4A4 rows m <= A4_FAST_MAX_ROWS run the fast kernels ``nvfp4_a4f_r{m}`` (kernels/nvfp4_a4.cu,
#: one pass of all m rows) where they apply (FAST_ENABLED, B % 64 == 0, shared memory within
#: mma.SMEM_LIMIT), ahead of the tensor-core path; same bits either way. The row limit is
#: measured (``python -m metrale.bench --formats w4a4 --m 1,2,3`` as is and with
#: METRALE_CUDA_A4_FAST_ROWS=1, m = 2, 3 on the tensor cores): H200, Qwen3-8B FFN 53.6 / 60.9 us
#: at m = 2 / 3 against 81.8 / 82.2 us (m = 1: 44.5 against 56.1 on the generic kernel); m = 4
#: (where its shared memory fits; Llama-3-8B's down projection takes the tensor cores):
#: docs/performance-log.md.
A4_FAST_MAX_ROWS = int(os.environ.get("METRALE_CUDA_A4_FAST_ROWS", "4"))

UPLOADERS: dict[str, Callable[[Any], Any]] = {"nvfp4": upload_generic}


def _geometry(k: int) -> tuple[int, int, int]:
    if k % 16 or k <= 0:
        raise MetraleError(f"K={k} is not a positive multiple of 16")
    if k > MAX_K:
        raise MetraleError(f"the CUDA NVFP4 kernels serve K up to {MAX_K} (K={k})")
    b = k // 16
    c = (b + 63) // 64
    return b, c, 32 * c


def _smem(mode: int, r: int, k: int) -> int:
    """Dynamic shared memory of the generic kernel of ``mode`` (0: A16, 1: A4) for r rows of K:
    the rows' records (A16 72, A4 40 bytes per block pair of P = 32 ceil(B / 64)); tile.CHAIN:
    the same records of ``nvfp4_{a16,a4}c_r{r}`` (36 / 20 bytes per record slot, 64 per part)
    and a root per thread and row."""
    _, _, p = _geometry(k)
    return r * p * (72 if mode == 0 else 40) + (r * THREADS * 4 if tile.CHAIN else 0)


def _rows_per_pass(mode: int, want: int, k: int) -> int:
    choices = A16_ROWS if mode == 0 else A4_ROWS
    r = max(c for c in choices if c <= max(1, want))
    while r > 1 and _smem(mode, r, k) > mma.SMEM_LIMIT:
        r = max(c for c in choices if c < r)
    return r


def _generic_name(mode: str, r: int, b: int) -> str:
    """The generic kernel of ``mode`` ("a16", "a4") for r rows and B = b: ``nvfp4_{mode}_r{r}_{e,o}``
    (B even / odd), or where tile.CHAIN its chain twin ``nvfp4_{mode}c_r{r}`` (any B)."""
    return f"nvfp4_{mode}c_r{r}" if tile.CHAIN else f"nvfp4_{mode}_r{r}_{'e' if b % 2 == 0 else 'o'}"


def _grid(n: int, groups: int, gz: int, smem: int, k: int) -> tuple[int, int, int]:
    """The generic kernels' grid: CTAs persistent over the columns (one per warp; tile.CHAIN:
    THREADS // Q per round, nvfp4_chain_body) along x, row groups along y, sets along z."""
    sms = runtime.sm_count()
    occ = max(1, min(4, (228 * 1024) // (smem + 1024)))
    total = sms * occ
    per_cta = THREADS // _geometry(k)[1] if tile.CHAIN else WARPS
    gx_full = -(-n // per_cta)
    gx = max(1, min(gx_full, total // gz))
    gy = max(1, min(groups, total // (gx * gz)))
    return gx, gy, gz


def _check_weight(w: Any, x_k: int, name: str) -> None:
    if getattr(w, "format", None) != "nvfp4" or not hasattr(w, "arrays"):
        raise MetraleError(f"{name}: want a device NVFP4 weight (backend.upload), got {type(w).__name__}")
    if w.k != x_k:
        raise MetraleError(f"{w.name}: input K={x_k}, the weight wants K={w.k}")


def _set(w: Any, out: Any, rowscale: np.float32, rows: int) -> tuple[Any, ...]:
    o, ldo = mat(out, f"{w.name} output")
    if o.shape[1] != w.n or o.shape[0] < rows:
        raise MetraleError(f"{w.name}: output shape {tuple(o.shape)}, want at least [{rows}, {w.n}]")
    return (w.arrays["weight"], w.arrays["weight_scale"], F32(rowscale), o, np.int64(ldo))


#: The fast kernels (kernels/nvfp4.cuh nvfp4_fast_body; A16 nvfp4_a16f_r*, A4 nvfp4_a4f_r*):
#: 512 threads, one CTA per SM, work items of 256 blocks (4 chunks of 64); shared memory: one
#: FAST_SLOT-byte activation record per chunk and row, then each of the 16 warps' rings of
#: depths[r] item slots (FAST_DEPTH for A16, A4F_DEPTH for A4).
FAST_THREADS = configs.NVFP4_FAST_THREADS
FAST_ITEM_BLOCKS = 256
FAST_SLOT = configs.NVFP4_FAST_SLOT
FAST_DEPTH = configs.NVFP4_FAST_DEPTH
A4F_DEPTH = configs.NVFP4_A4F_DEPTH


def _fast_threads() -> int:
    """Threads per CTA of the fast kernels (tile.CHAIN: their chain twins', NVFP4_RUN_THREADS)."""
    return configs.NVFP4_RUN_THREADS if tile.CHAIN else FAST_THREADS


def _fast_smem(r: int, k: int, depths: dict[int, int] = FAST_DEPTH) -> int:
    """The fast kernel's activation records and each warp's ring of item slots; tile.CHAIN: its
    chain twin's (``*fc_r{r}``, nvfp4.cuh nvfp4_run_body: 36 bytes of records per block and row,
    NVFP4_RUN_THREADS / 32 rings of NVFP4_RUN_DEPTH slots, a ring of scale group buffers per warp
    where NVFP4_RUN_SCALE_SLICES > 1, a root per thread and row)."""
    b, _, _ = _geometry(k)
    if tile.CHAIN:
        threads, depth = configs.NVFP4_RUN_THREADS, configs.NVFP4_RUN_DEPTH[r]
        warps, sg = threads // 32, configs.NVFP4_RUN_SCALE_SLICES
        nbuf = (sg - 1 + depth - 1) // sg + 1  # scale group buffers per warp (nvfp4_run_body's NBUF)
        groups = warps * nbuf * 32 * 8 * sg if sg > 1 else 0
        return r * 36 * b + warps * depth * FAST_SLOT + groups + r * threads * 4
    items = -(-b // FAST_ITEM_BLOCKS)
    return r * items * (FAST_ITEM_BLOCKS // 64) * FAST_SLOT + (FAST_THREADS // 32) * depths[r] * FAST_SLOT


def _fast_name(mode: str, r: int) -> str:
    """The fast kernel of ``mode`` ("a16", "a4") and r rows: ``nvfp4_{mode}f_r{r}``, or its chain
    twin ``nvfp4_{mode}fc_r{r}`` where tile.CHAIN (docs/chain-revision.md)."""
    return f"nvfp4_{mode}f{'c' if tile.CHAIN else ''}_r{r}"


def _fast_grid_x(n: int, gz: int, k: int) -> int:
    """CTAs along grid.x of a fast kernel: one per SM (shared by ``gz`` weight sets), at most
    one per column per warp; tile.CHAIN: NVFP4_RUN_CTAS_PER_SM per SM, at most one per round of
    NVFP4_RUN_THREADS // Q columns (nvfp4_run_body)."""
    per_cta, slots = _fast_threads() // 32, runtime.sm_count()
    if tile.CHAIN:
        per_cta = configs.NVFP4_RUN_THREADS // (_geometry(k)[0] // 64)
        slots *= configs.NVFP4_RUN_CTAS_PER_SM
    return max(1, min(-(-n // per_cta), slots // gz))


def _fast_smem_limit() -> int:
    """The most dynamic shared memory of a fast kernel: mma.SMEM_LIMIT, and under tile.CHAIN
    its share of the multiprocessor at NVFP4_RUN_CTAS_PER_SM CTAs."""
    if not tile.CHAIN:
        return mma.SMEM_LIMIT
    return min(mma.SMEM_LIMIT, mma.SM_SMEM // configs.NVFP4_RUN_CTAS_PER_SM - mma.CTA_RESERVED)


def a4_fast_smem(m: int, k: int) -> int | None:
    """Dynamic shared memory of the fast A4 kernel ``nvfp4_a4f_r{m}`` for m rows of K, or None
    where it does not apply (routing: A4_FAST_MAX_ROWS, FAST_ENABLED, B % 64, mma.SMEM_LIMIT)."""
    b, _, _ = _geometry(k)
    if not (FAST_ENABLED and m <= A4_FAST_MAX_ROWS and m in A4F_DEPTH and b % 64 == 0):
        return None
    if tile.CHAIN and b // 64 > configs.NVFP4_RUN_THREADS:
        return None
    smem = _fast_smem(m, k, A4F_DEPTH)
    return smem if smem <= _fast_smem_limit() else None


def _fast_rows(want: int, k: int) -> int | None:
    """Rows per pass of the fast A16 kernel (B % 64 == 0; tile.CHAIN: at most
    NVFP4_RUN_THREADS parts), or None when it does not apply."""
    b, _, _ = _geometry(k)
    if b % 64 or (tile.CHAIN and b // 64 > configs.NVFP4_RUN_THREADS):
        return None
    r = max(c for c in A16_ROWS if c <= max(1, want))
    while _fast_smem(r, k) > _fast_smem_limit():
        if r == 1:
            return None
        r = max(c for c in A16_ROWS if c < r)
    return r


def fast_one_pass(rows: int, k: int, r_want: int) -> bool:
    """Whether ``rows`` (at most FAST_ONE_PASS_ROWS) rows of K = ``k`` run on the fast A16
    kernel in one pass (its R = rows fits in shared memory), ahead of the tensor cores."""
    if not FAST_ENABLED or rows > FAST_ONE_PASS_ROWS:
        return False
    return _fast_rows(min(r_want, rows), k) == rows


def nvfp4_a16(x: Any, sets: list[tuple[Any, Any]], rows: int, r_want: int) -> None:
    """Rows ``0..rows-1`` of ``x`` times each (weight, out) in ``sets`` (one or two), A16."""
    x, ldx = mat(x, "input")
    if rows <= 0:
        return
    if x.shape[0] < rows:
        raise MetraleError(f"input has {x.shape[0]} rows, the kernel reads {rows}")
    w0 = sets[0][0]
    for w, _ in sets:
        _check_weight(w, x.shape[1], "w4a16")
    if len(sets) == 2 and (sets[1][0].n, sets[1][0].k) != (w0.n, w0.k):
        raise MetraleError("dual launch: gate and up must have the same shape")
    k = w0.k
    b, _, _ = _geometry(k)
    args0 = _set(sets[0][0], sets[0][1], F32(sets[0][0].weight_scale_2), rows)
    args1 = _set(sets[-1][0], sets[-1][1], F32(sets[-1][0].weight_scale_2), rows)
    tail = (np.int32(w0.n), np.int32(k))
    fast = _fast_rows(min(r_want, rows), k) if FAST_ENABLED else None
    if tile.takes(rows, tile.NVFP4) and tile.gemm(x, ldx, rows, b, args0, args1, len(sets), w0.n):
        return
    if mma.ENABLED and not tile.CHAIN and rows >= MMA_MIN_ROWS and not fast_one_pass(rows, k, r_want):
        prefix = mma.family_prefix("w4a16")
        prep = mma.a16_prep(MMA_FILE, f"{prefix}_mma_prep", x, ldx, b)
        if mma.launch(MMA_FILE, prefix, prep, rows, b, args0, args1, len(sets), w0.n):
            return
    if fast is not None:
        kern = runtime.get_kernel(A16_FILE, _fast_name("a16", fast))
        if kern is not None:
            smem = _fast_smem(fast, k)
            runtime.set_dynamic_smem(kern, smem)
            threads = _fast_threads()
            gz = len(sets)
            gx = _fast_grid_x(w0.n, gz, k)
            gy = max(1, min(-(-rows // fast), runtime.sm_count() // (gx * gz)))
            pdl.launch(
                kern,
                (gx, gy, gz),
                (threads,),
                (x, np.int64(ldx), np.int32(rows), *args0, *args1, *tail),
                smem,
            )
            return
    r = _rows_per_pass(0, min(r_want, rows), k)
    name = _generic_name("a16", r, b)
    kern = runtime.get_kernel(A16_FILE, name)
    if kern is None:
        raise MetraleError(f"{name} kernel missing in this target build")
    smem = _smem(0, r, k)
    runtime.set_dynamic_smem(kern, smem)
    grid = _grid(w0.n, -(-rows // r), len(sets), smem, k)
    args = (x, np.int64(ldx), np.int32(rows), *args0, *args1, *tail)
    if tile.CHAIN:  # the chain's generic kernels are PDL-capable, the tree's are not
        pdl.launch(kern, grid, (THREADS,), args, smem)
    else:
        kern(grid, (THREADS,), args, shared_mem=smem)


@dataclass
class DeviceA4Codes:
    """A4 activation codes on the device (``w4a4_quantize``): ``codes`` int8 [m, K],
    ``scales`` uint8 e4m3 bits [m, B], ``finite`` uint8 [m, B], ``afac`` f32 [m, B]
    (f32(scale), NaN for a non-finite block); ``input_scale`` the global scale used."""

    codes: Any
    scales: Any
    finite: Any
    afac: Any
    input_scale: np.float32

    @property
    def m(self) -> int:
        return int(self.codes.shape[0])

    @property
    def k(self) -> int:
        return int(self.codes.shape[1])

    def to_host(self) -> A4Codes:
        """The reference's A4Codes (host copies)."""
        return A4Codes(
            codes=self.codes.get(),
            scales=self.scales.get().view(E4M3),
            finite=self.finite.get().astype(bool),
        )

    def __getitem__(self, rows: slice) -> DeviceA4Codes:
        return DeviceA4Codes(
            self.codes[rows], self.scales[rows], self.finite[rows], self.afac[rows], self.input_scale
        )


#: Threads per CTA of w4a4_quantize (one per (row, 16-block)): few, so a decode row's B blocks
#: still spread over many multiprocessors.
QUANT_THREADS = 64


def w4a4_quantize(x: Any, input_scale: Any) -> DeviceA4Codes:
    """A4 codes of bf16 rows ``x`` with global scale 1/input_scale (reference quantize_a4)."""
    import cupy

    x, ldx = mat(x, "input")
    m, k = x.shape
    b, _, _ = _geometry(k)
    s = F32(input_scale)
    if not (np.isfinite(s) and s > 0):
        raise MetraleError(f"input_scale must be a finite positive f32, got {input_scale!r}")
    g = F32(1.0) / s
    inv_g = F32(1.0) / g
    c16 = F32(1.0 / 6.0)
    codes = cupy.empty((m, k), dtype=cupy.int8)
    scales = cupy.empty((m, b), dtype=cupy.uint8)
    finite = cupy.empty((m, b), dtype=cupy.uint8)
    afac = cupy.empty((m, b), dtype=cupy.float32)
    if m:
        kern = runtime.get_kernel(A4_FILE, "w4a4_quantize")
        if kern is None:
            raise MetraleError("w4a4_quantize kernel missing in this target build")
        pdl.launch(
            kern,
            (-(-m * b // QUANT_THREADS),),
            (QUANT_THREADS,),
            (x, np.int64(ldx), np.int32(m), np.int32(k), g, inv_g, c16, codes, scales, finite, afac),
        )
    return DeviceA4Codes(codes, scales, finite, afac, s)


def _a4_prep(codes: DeviceA4Codes, b: int, prefix: str) -> mma.Prep | None:
    """The A4 prologue of kernel family ``prefix`` (``w4a4`` or ``w4a4h``) as a Prep; None where
    it did not build or the codes' rows are off 16-byte boundaries."""
    kern = runtime.get_kernel(MMA_FILE, f"{prefix}_mma_prep")
    c, ldc = codes.codes, codes.codes.strides[0]
    if kern is None or ldc % 16 or c.data.ptr % 16:
        return None

    def prep(r0: int, m: int, rows8: int, nb: int, act: Any, fac: Any) -> None:
        args = (c[r0:], np.int64(ldc), codes.afac[r0:], np.int32(m), np.int32(rows8), np.int32(b))
        kern((-(-rows8 * nb // mma.PREP_THREADS),), (mma.PREP_THREADS,), (*args, np.int32(nb), act, fac))

    return prep


def w4a4_gemv_small_m(codes: DeviceA4Codes, w: Any, out: Any) -> None:
    """out[:m] = NVFP4 x A4 projection of the codes' m rows (reference project(..., "A4")).

    Routing (same bits on every path): the fast kernels ``nvfp4_a4f_r{m}`` where
    ``a4_fast_smem`` admits them (m <= A4_FAST_MAX_ROWS), else (tile.A4_ENABLED) the tiled GEMM
    for the rows ``tile.takes``, else the tensor-core kernels from A4_MMA_MIN_ROWS rows, else the
    generic ``nvfp4_a4_r{1,4}_{e,o}``."""
    if not isinstance(codes, DeviceA4Codes):
        raise MetraleError(f"w4a4_gemv_small_m: want codes from w4a4_quantize, got {type(codes).__name__}")
    _check_weight(w, codes.k, "w4a4")
    if w.input_scale is None:
        raise MetraleError(f"{w.name}: A4 needs an input_scale (the weight declares no FP4 activations)")
    m, k = codes.m, codes.k
    if m <= 0:
        return
    b, _, _ = _geometry(k)
    c, ldc = codes.codes, codes.codes.strides[0]
    if ldc % 16 or c.data.ptr % 16:  # every kernel loads a block's codes as one 16-byte word
        raise MetraleError(f"w4a4_gemv_small_m: codes rows must start on 16-byte boundaries (stride {ldc})")
    rowscale = F32(F32(w.input_scale) * F32(w.weight_scale_2))
    args = _set(w, out, rowscale, m)
    tail = (np.int32(w.n), np.int32(k))
    smem = a4_fast_smem(m, k)
    kern = runtime.get_kernel(A4_FILE, _fast_name("a4", m)) if smem is not None else None
    if kern is not None:
        runtime.set_dynamic_smem(kern, smem)
        a4_args = (c, np.int64(ldc), codes.afac, np.int32(m), *args, *args, *tail)
        pdl.launch(kern, (_fast_grid_x(w.n, 1, k),), (_fast_threads(),), a4_args, smem)
        return
    if tile.takes(m, tile.A4_FORMAT) and tile.gemm_a4(c, ldc, codes.afac, m, b, args, w.n):
        return
    family = mma.family_prefix("w4a4")
    prep = _a4_prep(codes, b, family)
    if (
        mma.ENABLED
        and not tile.CHAIN
        and m >= A4_MMA_MIN_ROWS
        and mma.launch(MMA_FILE, family, prep, m, b, args, args, 1, w.n)
    ):
        return
    r = _rows_per_pass(1, m, k)
    name = _generic_name("a4", r, b)
    kern = runtime.get_kernel(A4_FILE, name)
    if kern is None:
        raise MetraleError(f"{name} kernel missing in this target build")
    smem = _smem(1, r, k)
    runtime.set_dynamic_smem(kern, smem)
    grid = _grid(w.n, -(-m // r), 1, smem, k)
    a4_args = (c, np.int64(ldc), codes.afac, np.int32(m), *args, *args, *tail)
    if tile.CHAIN:  # the chain's generic kernels are PDL-capable, the tree's are not
        pdl.launch(kern, grid, (THREADS,), a4_args, smem)
    else:
        kern(grid, (THREADS,), a4_args, shared_mem=smem)


def _fixed(rows: int) -> Callable[..., None]:
    def kernel(x: Any, w: Any, out: Any) -> None:
        nvfp4_a16(x, [(w, out)], rows, rows)

    return kernel


def _dual(rows: int) -> Callable[..., None]:
    def kernel(x: Any, w0: Any, out0: Any, w1: Any, out1: Any) -> None:
        nvfp4_a16(x, [(w0, out0), (w1, out1)], rows, rows)

    return kernel


def _tier(max_m: int) -> Callable[..., None]:
    def kernel(x: Any, w: Any, out: Any, m: int) -> None:
        nvfp4_a16(x, [(w, out)], min(int(m), max_m), 4)  # a tier writes only its first MAX_M rows

    return kernel


def _gemm(x: Any, w: Any, out: Any) -> None:
    x, _ = mat(x, "input")
    nvfp4_a16(x, [(w, out)], int(x.shape[0]), 4)


def _gemm_dual(x: Any, w0: Any, out0: Any, w1: Any, out1: Any) -> None:
    """Gate and up over the same rows in one launch of each kernel (one prologue, gz = 2)."""
    x, _ = mat(x, "input")
    nvfp4_a16(x, [(w0, out0), (w1, out1)], int(x.shape[0]), 4)


_LAUNCHERS: dict[str, tuple[str, str, Callable[..., Any]]] = {
    "w4a16_gemv": (A16_FILE, "nvfp4_a16_r1_e", _fixed(1)),
    "w4a16_gemv_batch2": (A16_FILE, "nvfp4_a16_r2_e", _fixed(2)),
    "w4a16_gemv_batch3": (A16_FILE, "nvfp4_a16_r3_e", _fixed(3)),
    "w4a16_gemv_dual_batch2": (A16_FILE, "nvfp4_a16_r2_e", _dual(2)),
    "w4a16_gemv_dual_batch3": (A16_FILE, "nvfp4_a16_r3_e", _dual(3)),
    **{f"w4a16_gemv_batch{t}": (A16_FILE, "nvfp4_a16_r4_e", _tier(t)) for t in W4A16_TIERS},
    "w4a16_gemm": (A16_FILE, "nvfp4_a16_r4_e", _gemm),
    "w4a16_gemm_dual": (A16_FILE, "nvfp4_a16_r4_e", _gemm_dual),
    "w4a4_quantize": (A4_FILE, "w4a4_quantize", w4a4_quantize),
    "w4a4_gemv_small_m": (A4_FILE, "nvfp4_a4_r4_e", w4a4_gemv_small_m),
}


def kernels() -> dict[str, Callable[..., Any]]:
    """The NVFP4 kernels whose module built on the current device."""
    return {
        name: fn for name, (cu, probe, fn) in _LAUNCHERS.items() if runtime.get_kernel(cu, probe) is not None
    }
