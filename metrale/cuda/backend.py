"""``CudaBackend``: the kernel registry on one CUDA device, and its memory helpers.

The registry is assembled from the launcher modules ``metrale.cuda.{nvfp4, elementwise, q2,
w8a8, fp8_bf16}``. Each exposes ``kernels() -> dict[name, callable]`` (only the kernels whose
``.cu`` file built on this device) and ``UPLOADERS: dict[format, callable]`` (host weight ->
device weight). A module that fails to import contributes nothing (its kernels are then
"missing in this target build"); the reason is kept in ``CudaBackend.import_errors``.

Buffers are CuPy ``uint16`` arrays holding bf16 bits. ``rows`` accepts those, torch bfloat16
CUDA tensors (zero-copy through DLPack), other objects exposing ``__cuda_array_interface__`` or
``__dlpack__`` with 16-bit elements, and numpy bfloat16 arrays (copied to the device).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from metrale.cuda import pdl
from metrale.cuda.weights import DeviceLora, DeviceWeight, upload_generic, upload_lora
from metrale.errors import MetraleError
from metrale.reference.activations import check_row_shape
from metrale.reference.backend import KERNEL_NAMES, Backend
from metrale.reference.elements import BF16
from metrale.reference.lora import LoraAdapter

LAUNCHER_MODULES: tuple[str, ...] = ("nvfp4", "elementwise", "q2_0", "w8a8", "fp8_bf16")


def _load_launchers() -> tuple[dict[str, Callable[..., Any]], dict[str, Callable[..., Any]], dict[str, str]]:
    kernels: dict[str, Callable[..., Any]] = {}
    uploaders: dict[str, Callable[..., Any]] = {}
    errors: dict[str, str] = {}
    for mod_name in LAUNCHER_MODULES:
        try:
            mod = importlib.import_module(f"metrale.cuda.{mod_name}")
            got = dict(mod.kernels())
            ups = dict(getattr(mod, "UPLOADERS", {}))
        except Exception as exc:  # a launcher module absent or broken: its kernels are missing
            errors[mod_name] = f"{type(exc).__name__}: {exc}"
            continue
        kernels.update({k: v for k, v in got.items() if k in KERNEL_NAMES})
        uploaders.update(ups)
    return kernels, uploaders, errors


def _is_cupy(x: Any) -> bool:
    import cupy

    return isinstance(x, cupy.ndarray)


def _is_torch(x: Any) -> bool:
    t = type(x)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter")


def as_device_bits(x: Any, name: str = "input") -> Any:
    """``x`` as a CuPy uint16 array of bf16 bits, zero-copy where ``x`` is on the device.

    Raises MetraleError naming ``name`` for another element type.
    """
    import cupy

    if _is_cupy(x):
        if x.dtype == cupy.uint16:
            return x
        if x.dtype == cupy.int16:
            return x.view(cupy.uint16)
        raise MetraleError(f"{name}: dtype {x.dtype}, want bfloat16 (CuPy arrays carry bf16 as uint16 bits)")
    if _is_torch(x):
        import torch

        if x.dtype != torch.bfloat16:
            raise MetraleError(f"{name}: dtype {x.dtype}, want bfloat16")
        if x.is_cuda:
            return cupy.from_dlpack(x.view(torch.int16)).view(cupy.uint16)
        return cupy.asarray(x.detach().view(torch.int16).numpy().view(np.uint16))
    if isinstance(x, np.ndarray):
        if x.dtype != BF16:
            raise MetraleError(f"{name}: dtype {x.dtype}, want bfloat16")
        return cupy.asarray(np.ascontiguousarray(x).view(np.uint16))
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        try:
            a = cupy.asarray(x) if hasattr(x, "__cuda_array_interface__") else cupy.from_dlpack(x)
        except Exception as exc:
            raise MetraleError(f"{name}: cannot view {type(x).__name__} on the device ({exc})") from exc
        if a.dtype.itemsize != 2 or a.dtype.kind not in "iu":
            raise MetraleError(f"{name}: dtype {a.dtype}, want bfloat16 bits (16-bit elements)")
        return a.view(cupy.uint16)
    raise MetraleError(
        f"{name}: expected a bf16 array (CuPy uint16 bits, torch bfloat16, numpy bfloat16), "
        f"got {type(x).__name__}"
    )


class CudaBackend(Backend):
    """Every kernel the launcher modules built on device ``device``; buffers are CuPy uint16."""

    name = "cuda"

    def __init__(self, device: int | None = None) -> None:
        import cupy

        self.device = int(cupy.cuda.runtime.getDevice() if device is None else device)
        with cupy.cuda.Device(self.device):
            kernels, uploaders, errors = _load_launchers()
        super().__init__(kernels)
        self.uploaders = uploaders
        self.import_errors = errors

    # ---- memory helpers ----
    def upload(self, weight: Any) -> Any:
        """Host container -> DeviceWeight (LoraAdapter -> DeviceLora); device forms pass through."""
        if weight is None or isinstance(weight, (DeviceWeight, DeviceLora)):
            return weight
        if isinstance(weight, LoraAdapter):
            return upload_lora(weight)
        fmt = getattr(weight, "format", None)
        up = self.uploaders.get(fmt or "", upload_generic)
        return up(weight)

    def empty_bf16(self, shape: tuple[int, ...]) -> Any:
        """An uninitialised CuPy uint16 (bf16 bits) buffer."""
        import cupy

        return cupy.empty(tuple(shape), dtype=cupy.uint16)

    def rows(self, x: Any, k: int, name: str = "input") -> Any:
        """Activation rows [m, k] as CuPy uint16 bits with unit column stride, starting 16-byte
        aligned (a copy only when ``x`` is on the host, its columns are strided or its start is
        off 16 bytes). Errors as the reference's check_rows. An entry point's input arrives here:
        the next PDL-capable kernel is launched plainly (metrale/cuda/pdl.py), so the FFN does
        not overlap the work before it."""
        pdl.entry_start()

        a = as_device_bits(x, name)
        check_row_shape(tuple(a.shape), k, name)
        if a.strides[1] != 2 or a.strides[0] % 2 or (a.data.ptr % 16):
            a = a.copy(order="C")  # not ascontiguousarray: it keeps an unaligned one-row view
        return a

    def to_numpy(self, a: Any) -> np.ndarray:
        """A host numpy bfloat16 copy of a device (or host) bf16 buffer."""
        if isinstance(a, np.ndarray):
            return np.array(a, dtype=BF16, copy=True)
        bits = as_device_bits(a, "buffer")
        return np.ascontiguousarray(bits.get()).view(BF16)
