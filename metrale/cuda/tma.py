"""TMA tensor maps for the kernels that fill shared memory with ``cp.async.bulk.tensor``.

``row_tiles(array, rows, row_bytes, stride, box_rows)`` encodes (``cuTensorMapEncodeTiled`` of
the loaded CUDA driver) a 2-D uint8 view of a device buffer: ``rows`` rows of ``row_bytes``
bytes, ``stride`` bytes apart; a box is 128 bytes of ``box_rows`` rows, stored in shared memory
with the 128-byte swizzle (16-byte chunk c of box row r at chunk c ^ (r mod 8), the layout the
wgmma descriptors of ``kernels/w8a8_wgmma.cu`` read); box elements past the tensor are zeros. A
kernel takes the map by value (``const __grid_constant__ TmaDesc``), so ``pdl.launch`` passes it
through ``cuLaunchKernelEx`` and a CUDA graph keeps it with the launch.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

from metrale.errors import MetraleError

# cuda.h enums
_UINT8 = 0
_INTERLEAVE_NONE = 0
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3
_OOB_FILL_NONE = 0
#: Bytes of a box row (the 128-byte swizzle's span).
BOX_BYTES = 128


class TensorMap(ctypes.Structure):
    """cuda.h ``CUtensorMap``: 128 opaque bytes (64-byte aligned where the driver writes it)."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


@cache
def _encode() -> Any:
    try:
        fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    except (OSError, AttributeError) as exc:
        raise MetraleError(f"TMA: cuTensorMapEncodeTiled not found in the CUDA driver ({exc})") from exc
    fn.restype = ctypes.c_int
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_uint32,
        ctypes.c_void_p,
        u64p,
        u64p,
        u32p,
        u32p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
    ]
    return fn


_maps: dict[tuple[int, int, int, int, int], TensorMap] = {}


def row_tiles(array: Any, rows: int, row_bytes: int, stride: int, box_rows: int) -> TensorMap:
    """The tensor map of ``rows`` x ``row_bytes`` bytes at the device address of ``array`` (a
    CuPy array), rows ``stride`` bytes apart (a multiple of 16), boxes of 128 bytes x
    ``box_rows`` rows (at most 256); cached by address and shape."""
    ptr = int(array.data.ptr)
    key = (ptr, rows, row_bytes, stride, box_rows)
    tm = _maps.get(key)
    if tm is not None:
        return tm
    if ptr % 16 or stride % 16 or not 0 < box_rows <= 256 or rows <= 0 or row_bytes <= 0:
        raise MetraleError(
            f"TMA: tensor {rows}x{row_bytes} bytes at 0x{ptr:x}, stride {stride}, box rows {box_rows}: "
            "want a 16-byte aligned address and stride, 1..256 box rows"
        )
    raw = (ctypes.c_uint64 * 24)()  # 192 bytes: a 64-byte aligned 128 inside
    addr = (ctypes.addressof(raw) + 63) & ~63
    dims = (ctypes.c_uint64 * 2)(row_bytes, rows)
    strides = (ctypes.c_uint64 * 1)(stride)
    box = (ctypes.c_uint32 * 2)(BOX_BYTES, box_rows)
    elem = (ctypes.c_uint32 * 2)(1, 1)
    rc = _encode()(
        addr,
        _UINT8,
        2,
        ptr,
        dims,
        strides,
        box,
        elem,
        _INTERLEAVE_NONE,
        _SWIZZLE_128B,
        _L2_PROMOTION_256B,
        _OOB_FILL_NONE,
    )
    if rc != 0:
        raise MetraleError(
            f"TMA: cuTensorMapEncodeTiled of {rows}x{row_bytes} bytes (stride {stride}, box rows "
            f"{box_rows}) failed with CUresult {rc}"
        )
    tm = TensorMap()
    ctypes.memmove(ctypes.addressof(tm), addr, 128)
    if len(_maps) > 4096:
        _maps.clear()
    _maps[key] = tm
    return tm
