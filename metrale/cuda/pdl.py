"""Programmatic dependent launch (PDL) of the kernels built for it, through ``cuLaunchKernelEx``.

A kernel launched here with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`` may start
while the previous launch in the stream is still running, once that launch's CTAs have executed
``griddepcontrol.launch_dependents`` (kernels/common.cuh ``pdl_trigger``) or exited. Such a kernel
must call ``pdl_wait`` (``griddepcontrol.wait``: the previous grid has completed and its writes are
visible) before it writes global memory or reads any but the layer's weights: with no other
access before the wait, any predecessor is safe, ours or not (one that never triggers lets the
launch start only when all its CTAs have ended; the wait still covers its memory flush). The
weights are safe to read early because no launch of an FFN writes them and the FFN's first launch
is plain (below), so whatever wrote them has completed. The W8A8 split-K and stream-K GEMMs
(kernels/w8a8_wgmma.cu) load their first stages of weights before the wait, so HBM streams while
the previous launch finishes. Kernels that follow this rule:
``nvfp4_a16f_r*`` (kernels/nvfp4_gemv.cu, the fast A16 GEMV), ``w4a4_quantize`` and
``nvfp4_a4f_r*`` (kernels/nvfp4_a4.cu, the W4A4 decode rows), ``act_mul``
(kernels/elementwise.cu), every W8A8 kernel (kernels/w8a8.cu, kernels/w8a8_wgmma.cu: the
quantize, SiLU-quantize, GEMV, split-K and GEMM kernels), the FP8/BF16 decode kernels
(kernels/fp8_bf16_gemv.cu: ``fp8_bf16_dec_prep``, ``{fp8,bf16}_dec_*``), the Q2_0 decode
kernels (kernels/q2_0_dec.cu: ``q2_dec_prep``, ``q2_dec_r*``), the tensor-core engine's A16
prologues, K-split MMA kernels, prefill GEMMs and ``mma_finish`` (kernels/mma_gemm.cuh: the
prefill GEMM requests its first step's weights before the wait) and the tiled GEMM with its A16 prologue
(kernels/tile.cuh, nvfp4_tile.cu ``w4a16b_prep``: the first stages' weights before the wait).
The decode kernels load their first weights early too (configs.Q2_0_DEC_RING_EARLY,
FP8_BF16_DEC_W_EARLY, NVFP4_RUN_RING_EARLY and, per kernel, NVFP4_FAST_RING_EARLY), and
``act_mul_st`` /
``w8a8_silu_quant_st`` copy the compact activation table (uploaded once, like the weights
written by no launch of an FFN) before the wait.
The bits cannot change: the same kernels run on the same data.

The first PDL-capable launch after ``entry_start()`` (called by ``CudaBackend.rows``, i.e. when an
entry point of ``DenseFfnLayer`` takes its input) is launched plainly: an FFN never overlaps the
work that precedes it in the stream, so one FFN's time is what a benchmark measures. The later
launches of the FFN (up after gate, ``act_mul``, down) are programmatic. ``METRALE_CUDA_PDL=0``
launches everything plainly; so does a device below compute capability 9.0 or a driver without
``cuLaunchKernelEx``.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from metrale.errors import MetraleError

#: cuda.h: CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6
ENABLED = os.environ.get("METRALE_CUDA_PDL", "1") != "0"


class LaunchAttributeValue(ctypes.Union):
    """cuda.h ``CUlaunchAttributeValue`` (a 64-byte union; 8-byte aligned)."""

    _fields_ = [("pad", ctypes.c_char * 64), ("align", ctypes.c_uint64), ("flag", ctypes.c_int)]


class LaunchAttribute(ctypes.Structure):
    """cuda.h ``CUlaunchAttribute``: id, 4 bytes of padding, value (72 bytes)."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    """cuda.h ``CUlaunchConfig`` (56 bytes on 64-bit hosts)."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("numAttrs", ctypes.c_uint),
    ]


def kernel_params(args: Sequence[Any]) -> tuple[list[Any], Any]:
    """``args`` as cuLaunchKernelEx's ``void** kernelParams``: (the ctypes values, which must
    outlive the call, and the pointer array). CuPy arrays pass their device address; numpy
    scalars their value with their width (int32, int64, uint64, float32); a ctypes structure
    (a TMA tensor map, ``tma.TensorMap``) its bytes."""
    vals: list[Any] = []
    for i, a in enumerate(args):
        data = getattr(a, "data", None)
        if hasattr(data, "ptr") and hasattr(a, "__cuda_array_interface__"):
            vals.append(ctypes.c_uint64(int(data.ptr)))
        elif isinstance(a, np.int32):
            vals.append(ctypes.c_int32(int(a)))
        elif isinstance(a, np.int64):
            vals.append(ctypes.c_int64(int(a)))
        elif isinstance(a, np.uint64):
            vals.append(ctypes.c_uint64(int(a)))
        elif isinstance(a, np.float32):
            vals.append(ctypes.c_float(float(a)))
        elif isinstance(a, ctypes.Structure):
            vals.append(a)
        else:
            raise MetraleError(
                f"PDL launch: argument {i} is {type(a).__name__}; want a CuPy array, a numpy "
                "int32/int64/uint64/float32 scalar or a ctypes structure"
            )
    ptrs = (ctypes.c_void_p * max(1, len(vals)))(
        *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals]
    )
    return vals, ptrs


def launch_config(
    grid: tuple[int, ...], block: tuple[int, ...], shared_mem: int, stream: int, attr: LaunchAttribute | None
) -> LaunchConfig:
    """A ``CUlaunchConfig`` for ``grid`` x ``block`` (missing dimensions are 1) on ``stream``
    with at most one attribute."""
    g = (*grid, 1, 1)[:3]
    b = (*block, 1, 1)[:3]
    cfg = LaunchConfig(*g, *b, int(shared_mem), ctypes.c_void_p(int(stream) or None), None, 0)
    if attr is not None:
        cfg.attrs = ctypes.pointer(attr)
        cfg.numAttrs = 1
    return cfg


class _State(threading.local):
    def __init__(self) -> None:
        self.plain_next = True


_state = _State()
#: Launches made here since import, by kind ("plain", "programmatic"); the GPU tests read it.
counts: dict[str, int] = {"plain": 0, "programmatic": 0}
#: Why PDL is off on this machine (None while it is on or untried).
unavailable: str | None = None
_launch_ex: Any = None


def entry_start() -> None:
    """The next PDL-capable launch (in this thread) is launched plainly."""
    _state.plain_next = True


def _driver() -> Any:
    """``cuLaunchKernelEx`` of the loaded CUDA driver, or None (reason in ``unavailable``)."""
    global _launch_ex, unavailable
    if _launch_ex is None and unavailable is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuLaunchKernelEx
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            _launch_ex = fn
        except (OSError, AttributeError) as exc:
            unavailable = f"cuLaunchKernelEx not found in the CUDA driver ({exc})"
    return _launch_ex


def _capable() -> bool:
    from metrale.cuda import runtime

    props = runtime.device_props(runtime.device_id())
    return int(props["major"]) >= 9 and _driver() is not None


def next_programmatic() -> bool:
    """Whether the next PDL-capable launch is programmatic (this consumes ``entry_start``'s mark):
    not for the first launch of an entry point, nor with PDL off or unsupported here."""
    plain = _state.plain_next or not ENABLED or not _capable()
    _state.plain_next = False
    return not plain


def launch(
    kernel: Any,
    grid: tuple[int, ...],
    block: tuple[int, ...],
    args: Sequence[Any],
    shared_mem: int = 0,
    *,
    programmatic_ok: bool = True,
) -> None:
    """Launch the CuPy ``RawKernel`` ``kernel`` (one that keeps the rule of this module's
    docstring) on the current stream, programmatically when ``next_programmatic()`` and
    ``programmatic_ok`` (False: a launcher that measured its kernels slower so; the entry point's
    mark is consumed either way). Arguments that CuPy cannot pass (ctypes structures) go through
    ``cuLaunchKernelEx`` also when plain."""
    programmatic = next_programmatic() and programmatic_ok
    if not programmatic and not any(isinstance(a, ctypes.Structure) for a in args):
        kernel(grid, block, tuple(args), shared_mem=shared_mem)
        counts["plain"] += 1
        return
    import cupy

    attr = None
    if programmatic:
        attr = LaunchAttribute()
        attr.id = ATTR_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.flag = 1
    elif _driver() is None:
        raise MetraleError(f"launch of {kernel.name}: {unavailable}")
    cfg = launch_config(grid, block, shared_mem, cupy.cuda.get_current_stream().ptr, attr)
    vals, ptrs = kernel_params(args)
    rc = _launch_ex(ctypes.byref(cfg), ctypes.c_void_p(int(kernel.kernel.ptr)), ptrs, None)
    del vals
    if rc != 0:
        raise MetraleError(f"cuLaunchKernelEx of {kernel.name} failed with CUresult {rc}")
    counts["programmatic" if programmatic else "plain"] += 1
