"""Weights on the device: ``DeviceWeight`` (a host container plus its device arrays) and the
generic uploader.

The layer's dispatch reads only ``format``, ``n``, ``k``, ``name``, ``nbytes``,
``declares_a4``, ``input_scale`` and ``weight_scale_2``; a ``DeviceWeight`` forwards them to
the host container, so routing on the device is the host's routing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metrale.reference.lora import LoraAdapter
from metrale.reference.tables import table


def to_device(a: np.ndarray) -> Any:
    """A cupy copy of host array ``a``; element types CuPy lacks (bf16, e4m3) travel as their
    raw unsigned bits of the same width (bf16 -> uint16, e4m3 -> uint8)."""
    import cupy

    a = np.ascontiguousarray(a)
    if a.dtype.kind not in "biuf" or a.dtype.name in ("bfloat16",) or "float8" in a.dtype.name:
        a = a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])
    return cupy.asarray(a)


@dataclass
class DeviceWeight:
    """A weight container's device form: ``host`` (the reference container) and ``arrays``
    (its tensors on the device, bf16/e4m3 as raw bits)."""

    host: Any
    arrays: dict[str, Any] = field(default_factory=dict)

    @property
    def format(self) -> str:
        return self.host.format

    @property
    def n(self) -> int:
        return int(self.host.n)

    @property
    def k(self) -> int:
        return int(self.host.k)

    @property
    def name(self) -> str:
        return str(self.host.name)

    @property
    def nbytes(self) -> int:
        return int(self.host.nbytes)

    @property
    def declares_a4(self) -> bool:
        return bool(getattr(self.host, "declares_a4", False))

    @property
    def input_scale(self) -> Any:
        return getattr(self.host, "input_scale", None)

    @property
    def weight_scale_2(self) -> Any:
        return getattr(self.host, "weight_scale_2", None)

    def __getitem__(self, key: str) -> Any:
        return self.arrays[key]


@dataclass
class DeviceLora:
    """A LoRA adapter on the device: ``host`` (LoraAdapter), ``arrays`` ``a`` uint16 [r, K]
    and ``b`` uint16 [N, r_pad] (bf16 bits, B zero-padded to a multiple of 16 columns)."""

    host: LoraAdapter
    arrays: dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.host.rank

    @property
    def padded_rank(self) -> int:
        return self.host.padded_rank

    @property
    def scale(self) -> np.float32:
        return np.float32(self.host.scale)

    @property
    def a(self) -> Any:
        return self.arrays["a"]

    @property
    def b(self) -> Any:
        return self.arrays["b"]


def upload_generic(host: Any) -> DeviceWeight:
    """Every numpy array field of a dataclass weight container, copied to the device."""
    arrays: dict[str, Any] = {}
    if dataclasses.is_dataclass(host):
        for f in dataclasses.fields(host):
            v = getattr(host, f.name)
            if isinstance(v, np.ndarray):
                arrays[f.name] = to_device(v)
    return DeviceWeight(host=host, arrays=arrays)


def upload_lora(host: LoraAdapter) -> DeviceLora:
    """A LoRA adapter's A and zero-padded B on the device."""
    return DeviceLora(host=host, arrays={"a": to_device(host.a), "b": to_device(host.b_padded())})


_tables: dict[tuple[str, int], Any] = {}


def device_table(name: str) -> Any:
    """The activation table ``name`` on the current device (uploaded once)."""
    import cupy

    key = (name, int(cupy.cuda.runtime.getDevice()))
    t = _tables.get(key)
    if t is None:
        t = _tables[key] = cupy.asarray(np.ascontiguousarray(table(name)))  # type: ignore[arg-type]
    return t
