"""Shared shape of the formats whose ``weight`` is a plain [N, K] matrix (BF16, FP8, W8A8)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from metrale.reference.formats._checks import check_array, check_name, require, row_scale_f32, tensor

BLOCK = 16
F32 = np.float32


@dataclass(frozen=True)
class MatrixWeight:
    """``weight`` [N, K] of ``element`` dtype (K a multiple of 16), validated on construction."""

    weight: np.ndarray
    name: str = field(default="weight", kw_only=True)

    format: ClassVar[str]
    element: ClassVar[np.dtype]
    max_k: ClassVar[int | None] = None

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
        """Check dtype, 2-D shape, K a multiple of 16 (and ≤ max_k) and finite values."""
        check_name(type(self).__name__, self.name)
        nm = self.name
        require(
            isinstance(self.weight, np.ndarray) and self.weight.ndim == 2,
            f"{nm}.weight: expected a 2-D {np.dtype(self.element)} array [N, K]",
        )
        n, k = self.weight.shape
        require(k % BLOCK == 0 and k > 0, f"{nm}.weight: K={k} is not a multiple of {BLOCK}")
        if self.max_k is not None:
            require(k <= self.max_k, f"{nm}.weight: K={k} exceeds the W8A8 int32 limit of {self.max_k}")
        check_array(f"{nm}.weight", self.weight, np.dtype(self.element), (n, k))
        if self.weight.dtype.kind != "i":
            require(
                bool(np.isfinite(self.weight.astype(F32)).all()),
                f"{nm}.weight: holds NaN codes"
                if self.format == "fp8"
                else f"{nm}.weight: holds non-finite values",
            )

    def dequantize(self) -> np.ndarray:
        """f32 [N, K]."""
        return self.weight.astype(F32)

    def tensors(self) -> dict[str, np.ndarray]:
        """The on-disk tensors by suffix."""
        return {"weight": self.weight}


@dataclass(frozen=True)
class RowScaledWeight(MatrixWeight):
    """A [N, K] matrix with one f32 ``weight_scale`` per output row: ŵ = f32(w) · scale[n]."""

    weight_scale: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.weight.nbytes + self.weight_scale.nbytes)

    def validate(self) -> None:
        super().validate()
        nm = self.name
        check_array(f"{nm}.weight_scale", self.weight_scale, np.dtype(F32), (self.n,))
        require(bool(np.isfinite(self.weight_scale).all()), f"{nm}.weight_scale: non-finite")

    def dequantize(self) -> np.ndarray:
        """f32 [N, K]: f32(w) · scale[n]."""
        return self.weight.astype(F32) * self.weight_scale[:, None]

    @classmethod
    def from_tensors(cls, t: dict[str, np.ndarray], *, name: str = "weight") -> RowScaledWeight:
        """From a module's tensors as compressed-tensors writes them: ``weight`` [N, K] and
        ``weight_scale`` [N, 1] (also [N] or one per-tensor value); a ``weight_zero_point``
        must be all zeros (symmetric)."""
        w = np.ascontiguousarray(tensor(t, "weight", name))
        zp = t.get("weight_zero_point")
        require(
            zp is None or not np.any(np.asarray(zp) != 0),
            f"{name}: asymmetric weights (non-zero weight_zero_point) are not supported",
        )
        n = int(w.shape[0]) if w.ndim else 0
        scale = row_scale_f32(tensor(t, "weight_scale", name), n, f"{name}.weight_scale")
        return cls(weight=w, weight_scale=scale, name=name)

    def tensors(self) -> dict[str, np.ndarray]:
        """The on-disk tensors by suffix; ``weight_scale`` as compressed-tensors' [N, 1]."""
        return {"weight": self.weight, "weight_scale": self.weight_scale.reshape(-1, 1)}
