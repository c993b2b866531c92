"""BF16 dense weights (the BF16 overlay, arithmetic.md § bf16-format): ``weight`` bf16 [N, K]."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.reference.elements import BF16
from metrale.reference.formats._checks import check_source, require, tensor
from metrale.reference.formats._matrix import BLOCK, MatrixWeight


@dataclass(frozen=True)
class DenseWeight(MatrixWeight):
    """A bf16 weight [N, K]."""

    format = "bf16"
    element = BF16

    @classmethod
    def quantize(cls, w: np.ndarray, *, name: str = "weight") -> DenseWeight:
        """Round a float weight to bf16 (RNE)."""
        w32 = check_source(name, w, BLOCK)
        with np.errstate(over="ignore"):
            b = w32.astype(BF16)
        require(bool(np.isfinite(b.astype(np.float32)).all()), f"{name}: overflows bf16")
        return cls(weight=b, name=name)

    @classmethod
    def from_tensors(cls, t: dict[str, np.ndarray], *, name: str = "weight") -> DenseWeight:
        """From a module's ``weight`` tensor in bf16, f16 or f32 (rounded to bf16, RNE)."""
        return cls.quantize(tensor(t, "weight", name), name=name)
