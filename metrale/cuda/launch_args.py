"""Argument helpers of every launcher: bf16 matrices with their row stride, device rows and
outputs in the layout the kernels take, the device arrays of a weight, the checked operands of
one projection, the row tier for m rows, and a module's launchers where its kernels built."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metrale.cuda import configs, runtime
from metrale.cuda.weights import DeviceWeight
from metrale.errors import MetraleError


def mat(a: Any, name: str) -> tuple[Any, int]:
    """Check a CuPy uint16 [rows, cols] array with unit column stride; return it and its row
    stride in elements."""
    import cupy

    if not isinstance(a, cupy.ndarray) or a.dtype != cupy.uint16 or a.ndim != 2:
        raise MetraleError(
            f"{name}: want a 2-D CuPy uint16 (bf16 bits) array, got "
            f"{type(a).__name__} {getattr(a, 'dtype', '')} {getattr(a, 'shape', '')}"
        )
    cols_ok = a.shape[1] <= 1 or a.strides[1] == 2
    rows_ok = a.shape[0] <= 1 or (a.strides[0] > 0 and a.strides[0] % 2 == 0)
    if not (cols_ok and rows_ok):
        raise MetraleError(f"{name}: want contiguous columns and positive row stride (strides {a.strides})")
    ld = a.strides[0] // 2 if a.shape[0] > 1 else a.shape[1]
    return a, int(ld)


def device_rows(x: Any, k: int, rows: int, name: str = "x") -> Any:
    """``x`` as CuPy uint16 bf16 bits [>= rows, k] with unit column stride and 16-byte aligned
    rows (copied only when that does not hold); MetraleError naming ``name`` otherwise."""
    from metrale.cuda.backend import as_device_bits

    a = as_device_bits(x, name)
    if a.ndim != 2:
        raise MetraleError(f"{name}: shape {tuple(a.shape)}, want 2-D [m, K]")
    if a.shape[1] != k:
        raise MetraleError(f"{name}: K={a.shape[1]}, the weight wants K={k}")
    if a.shape[0] < rows:
        raise MetraleError(f"{name}: {a.shape[0]} rows, the launch needs {rows}")
    if a.strides[1] != 2 or a.strides[0] % 16 or a.data.ptr % 16:
        # a copy, not ascontiguousarray: that returns a one-row view as it is (C-contiguous
        # whatever its start), so an unaligned single row would reach the kernels
        a = a.copy(order="C")
    return a


def device_out(out: Any, rows: int, n: int, name: str = "out") -> tuple[Any, int]:
    """The output buffer (CuPy uint16 [>= rows, n], unit column stride) and its row stride in
    elements; MetraleError naming ``name`` otherwise. The kernels write rows [0, rows) only."""
    import cupy

    if not isinstance(out, cupy.ndarray) or out.dtype not in (cupy.uint16, cupy.int16):
        raise MetraleError(f"{name}: want a CuPy uint16 (bf16 bits) buffer, got {type(out).__name__}")
    if out.ndim != 2 or out.shape[1] != n or out.shape[0] < rows:
        raise MetraleError(f"{name}: shape {tuple(out.shape)}, want [{rows}, {n}]")
    if out.strides[1] != 2 or out.strides[0] % 2:
        raise MetraleError(f"{name}: columns must be contiguous (strides {out.strides})")
    return out, out.strides[0] // 2


def weight_arrays(w: Any, fmt: str, kernel: str) -> dict[str, Any]:
    """The device arrays of an uploaded weight of format ``fmt``."""
    if not isinstance(w, DeviceWeight) or w.format != fmt:
        raise MetraleError(
            f"{kernel}: weight {getattr(w, 'name', '?')} is {type(w).__name__} "
            f"(format {getattr(w, 'format', '?')}), want an uploaded {fmt} weight (backend.upload)"
        )
    return w.arrays


def projection_operands(
    x: Any, w: Any, out: Any, m: int, fmt: str, kernel: str, max_k: int
) -> tuple[dict[str, Any], Any, Any, int] | None:
    """The operands of ``kernel``'s projection of rows ``x[:m]`` by the uploaded ``fmt`` weight
    ``w`` into ``out[:m]``: (the weight's device arrays, the rows as ``device_rows`` gives them,
    the output and its row stride); None where m <= 0 (nothing to launch). MetraleError naming
    the weight where its K is above ``max_k``, the kernel's limit."""
    arr = weight_arrays(w, fmt, kernel)
    if w.k > max_k:
        raise MetraleError(f"{kernel}: {w.name} has K={w.k}, above this kernel's limit of {max_k}")
    if m <= 0:
        return None
    xa = device_rows(x, w.k, m, "x")
    outa, ldo = device_out(out, m, w.n, "out")
    return arr, xa, outa, ldo


def built_launchers(
    cu_file: str, kernel_names: tuple[str, ...], launchers: tuple[Callable[..., Any], ...]
) -> dict[str, Callable[..., Any]]:
    """``launchers`` by their names (the backend's kernel names) where every kernel of
    ``kernel_names`` in ``cu_file`` built on this device, else none (the backend then lacks
    them: "missing in this target build")."""
    if any(runtime.get_kernel(cu_file, f) is None for f in kernel_names):
        return {}
    return {f.__name__: f for f in launchers}


def tier(m: int, tiers: dict[int, int]) -> int:
    """The smallest row tier >= m, else the largest (then grid.y row groups)."""
    for t in sorted(tiers):
        if m <= t:
            return t
    return max(tiers)


def tier_launch(stem: str, tiers: dict[int, int], n: int, m: int, warps: int) -> tuple[str, tuple, tuple]:
    """(kernel name, grid, block) of the CUDA-core GEMV tier ``{stem}_r{R}`` for m rows and N = n
    columns: R = ``tier(m, tiers)`` rows per warp, ``tiers[R]`` columns per warp, ``warps`` warps
    per CTA; grid (ceil(N / (warps · columns)), ceil(m / R)) (row groups along y)."""
    r = tier(m, tiers)
    return f"{stem}_r{r}", (cdiv(n, warps * tiers[r]), cdiv(m, r)), (32 * warps,)


def chain_grid(n: int, b: int, rows: int, r: int) -> tuple[int, int]:
    """(gx, gy) of a generic chain kernel (``q2_0_chain_r{r}``, ``{fp8,bf16}_chain_r{r}``): CTAs of
    configs.CHAIN_GENERIC_THREADS take rounds of whole columns (threads // ceil(b / 64) of N = ``n``,
    b blocks) along x and groups of r of ``rows`` rows along y, two CTAs per multiprocessor in all."""
    slots = 2 * runtime.sm_count()
    gx = min(cdiv(n, configs.CHAIN_GENERIC_THREADS // cdiv(b, 64)), slots)
    return gx, max(1, min(cdiv(rows, r), slots // gx))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
