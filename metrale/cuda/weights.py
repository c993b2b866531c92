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

from metrale.errors import MetraleError
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


_tables: dict[tuple[str, int, bool], Any] = {}


def compact_table(name: str) -> np.ndarray:
    """The activation table ``name`` (65,536 f32 indexed by bf16 bits) as common.cuh's
    ``CompactAct`` reads it from shared memory: float32 [4 + D], word 0 the exponents
    lo | pos_hi << 8 | neg_hi << 16 (as bits), word 1 P = 128 (pos_hi - lo), then D = P + 128
    (neg_hi - lo) entries: positive binades lo .. pos_hi - 1, then negative binades lo ..
    neg_hi - 1, 128 codes each. Outside them the table is x / 2 (exponent < lo), x (positive,
    exponent >= pos_hi: Inf and NaN included) and -0.0 (negative, exponent >= neg_hi; NaN stays
    NaN): the rules found from the table and checked on every code here; a MetraleError if a
    binade fits none. SiLU: 30,736 bytes."""
    t = table(name)
    bits = np.arange(65536, dtype=np.uint32)
    x = (bits << 16).view(np.float32)
    e, neg, nan = (bits >> 7) & 0xFF, bits >> 15 == 1, np.isnan(x)
    with np.errstate(invalid="ignore"):
        half = (x * np.float32(0.5)).view(np.uint32)
    tb = t.view(np.uint32)

    def fits(mask: np.ndarray, want: np.ndarray) -> bool:  # equal bits, or NaN where x is NaN
        return bool(np.all((tb[mask] == want[mask]) | (nan[mask] & np.isnan(t[mask]))))

    minus0 = np.where(nan, bits << 16, np.uint32(0x80000000))
    lo = next(k for k in range(256) if not fits(e == k, half))
    pos_hi = next(
        (k for k in range(lo, 256) if all(fits(~neg & (e == q), bits << 16) for q in range(k, 256))), None
    )
    neg_hi = next(
        (k for k in range(lo, 256) if all(fits(neg & (e == q), minus0) for q in range(k, 256))), None
    )
    if pos_hi is None or neg_hi is None:
        raise MetraleError(f"{name} table: its top binades are not x (positive) and -0.0 (negative)")
    pos = t[(bits >= lo << 7) & (bits < pos_hi << 7)]
    negs = t[(bits >= 0x8000 | lo << 7) & (bits < 0x8000 | neg_hi << 7)]
    head = np.array([lo | pos_hi << 8 | neg_hi << 16, pos.size, 0, 0], dtype=np.uint32).view(np.float32)
    return np.concatenate([head, pos, negs]).astype(np.float32)


def device_table(name: str, compact: bool = False) -> Any:
    """The activation table ``name`` on the current device (uploaded once): the whole table, or
    with ``compact`` ``compact_table``'s form."""
    import cupy

    key = (name, int(cupy.cuda.runtime.getDevice()), compact)
    t = _tables.get(key)
    if t is None:
        host = compact_table(name) if compact else np.ascontiguousarray(table(name))
        t = _tables[key] = cupy.asarray(host)  # type: ignore[arg-type]
    return t
