"""The weight formats (arithmetic.md § formats): one class each, and one
descriptor each in ``FORMATS`` (``spec.py``)."""

from __future__ import annotations

from metrale.reference.formats.bf16 import DenseWeight
from metrale.reference.formats.fp8 import Fp8Weight
from metrale.reference.formats.nvfp4 import Nvfp4Weight
from metrale.reference.formats.q2_0 import Q2_0Weight
from metrale.reference.formats.spec import (
    CONVERT_FORMATS,
    FORMATS,
    FormatSpec,
    TensorSpec,
    spec_of,
    spec_of_tensors,
)
from metrale.reference.formats.w8a8 import W8a8Weight

QuantWeight = Nvfp4Weight | Fp8Weight | W8a8Weight | Q2_0Weight | DenseWeight

__all__ = [
    "CONVERT_FORMATS",
    "FORMATS",
    "DenseWeight",
    "FormatSpec",
    "Fp8Weight",
    "Nvfp4Weight",
    "Q2_0Weight",
    "QuantWeight",
    "TensorSpec",
    "W8a8Weight",
    "spec_of",
    "spec_of_tensors",
]
