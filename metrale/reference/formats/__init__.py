"""The five weight formats of CONTRACT §3, as typed containers."""

from __future__ import annotations

from metrale.reference.formats.dense import DenseWeight
from metrale.reference.formats.fp8 import Fp8Weight
from metrale.reference.formats.nvfp4 import Nvfp4Weight
from metrale.reference.formats.q2_0 import Q2_0Weight
from metrale.reference.formats.w8a8 import W8a8Weight

QuantWeight = Nvfp4Weight | Fp8Weight | W8a8Weight | Q2_0Weight | DenseWeight

FORMATS: dict[str, type] = {
    "nvfp4": Nvfp4Weight,
    "fp8": Fp8Weight,
    "w8a8": W8a8Weight,
    "q2_0": Q2_0Weight,
    "bf16": DenseWeight,
}

__all__ = [
    "FORMATS",
    "DenseWeight",
    "Fp8Weight",
    "Nvfp4Weight",
    "Q2_0Weight",
    "QuantWeight",
    "W8a8Weight",
]
