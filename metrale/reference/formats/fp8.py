"""FP8 (W8A16) per-row weights, compressed-tensors "float-quantized" (CONTRACT §3).

``weight`` e4m3 [N, K], ``weight_scale`` f32 [N] (stored [N, 1] on disk). ŵ = e4m3 · scale[n].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.reference.elements import E4M3, e4m3_saturate
from metrale.reference.formats._checks import check_array, check_source, require

BLOCK = 16
F32 = np.float32
_EPS = np.finfo(np.float32).eps


@dataclass(frozen=True)
class Fp8Weight:
    """An FP8 e4m3 weight [N, K] with one f32 scale per output row."""

    weight: np.ndarray
    weight_scale: np.ndarray
    name: str = "weight"

    format = "fp8"

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
        return int(self.weight.nbytes + self.weight_scale.nbytes)

    def validate(self) -> None:
        nm = self.name
        require(
            isinstance(self.weight, np.ndarray) and self.weight.ndim == 2,
            f"{nm}.weight: expected a 2-D e4m3 array [N, K]",
        )
        n, k = self.weight.shape
        require(k % BLOCK == 0 and k > 0, f"{nm}.weight: K={k} is not a multiple of {BLOCK}")
        check_array(f"{nm}.weight", self.weight, E4M3, (n, k))
        check_array(f"{nm}.weight_scale", self.weight_scale, np.dtype(F32), (n,))
        require(bool(np.isfinite(self.weight.astype(F32)).all()), f"{nm}.weight: holds NaN codes")
        require(bool(np.isfinite(self.weight_scale).all()), f"{nm}.weight_scale: non-finite")

    def dequantize(self) -> np.ndarray:
        """f32 [N, K]: f32(e4m3) · scale[n]."""
        return self.weight.astype(F32) * self.weight_scale[:, None]

    @classmethod
    def quantize(cls, w: np.ndarray, *, name: str = "weight") -> Fp8Weight:
        """compressed-tensors channel FP8: scale = max(amax_row/448, eps); e4m3(clamp(w/scale))."""
        w32 = check_source(name, w, BLOCK)
        scale = np.maximum(np.abs(w32).max(axis=1) / F32(448.0), F32(_EPS)).astype(F32)
        q = e4m3_saturate((w32 / scale[:, None]).astype(F32))
        return cls(weight=q, weight_scale=scale, name=name)
