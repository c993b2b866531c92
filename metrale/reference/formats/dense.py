"""BF16 dense weights (the BF16 overlay of CONTRACT §3): ``weight`` bf16 [N, K]."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.reference.elements import BF16
from metrale.reference.formats._checks import check_array, check_source, require

BLOCK = 16


@dataclass(frozen=True)
class DenseWeight:
    """A bf16 weight [N, K]."""

    weight: np.ndarray
    name: str = "weight"

    format = "bf16"

    def __post_init__(self) -> None:
        self.validate()

    @property
    def n(self) -> int:
        return int(self.weight.shape[0])

    @property
    def k(self) -> int:
        return int(self.weight.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.weight.nbytes)

    def validate(self) -> None:
        nm = self.name
        require(
            isinstance(self.weight, np.ndarray) and self.weight.ndim == 2,
            f"{nm}.weight: expected a 2-D bf16 array [N, K]",
        )
        n, k = self.weight.shape
        require(k % BLOCK == 0 and k > 0, f"{nm}.weight: K={k} is not a multiple of {BLOCK}")
        check_array(f"{nm}.weight", self.weight, BF16, (n, k))
        require(
            bool(np.isfinite(self.weight.astype(np.float32)).all()),
            f"{nm}.weight: holds non-finite values",
        )

    def dequantize(self) -> np.ndarray:
        return self.weight.astype(np.float32)

    @classmethod
    def quantize(cls, w: np.ndarray, *, name: str = "weight") -> DenseWeight:
        """Round a float weight to bf16 (RNE)."""
        w32 = check_source(name, w, BLOCK)
        with np.errstate(over="ignore"):
            b = w32.astype(BF16)
        require(bool(np.isfinite(b.astype(np.float32)).all()), f"{name}: overflows bf16")
        return cls(weight=b, name=name)
