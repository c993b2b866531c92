"""Argument helpers of every launcher: bf16 matrices with their row stride, device rows and
outputs in the layout the kernels take, the device arrays of a weight, and the row tier for m
rows."""

from __future__ import annotations

from typing import Any

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
    import cupy

    from metrale.cuda.backend import as_device_bits

    a = as_device_bits(x, name)
    if a.ndim != 2:
        raise MetraleError(f"{name}: shape {tuple(a.shape)}, want 2-D [m, K]")
    if a.shape[1] != k:
        raise MetraleError(f"{name}: K={a.shape[1]}, the weight wants K={k}")
    if a.shape[0] < rows:
        raise MetraleError(f"{name}: {a.shape[0]} rows, the launch needs {rows}")
    if a.strides[1] != 2 or a.strides[0] % 16 or a.data.ptr % 16:
        a = cupy.ascontiguousarray(a)
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


def tier(m: int, tiers: dict[int, int]) -> int:
    """The smallest row tier >= m, else the largest (then grid.y row groups)."""
    for t in sorted(tiers):
        if m <= t:
            return t
    return max(tiers)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
