"""int8 W8A8 weights, compressed-tensors "int-quantized" channel-wise (CONTRACT §3).

``weight`` int8 [N, K], ``weight_scale`` f32 [N] (stored [N, 1] on disk). ŵ = q · scale[n].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.reference.formats._checks import check_array, check_source, require

BLOCK = 16
F32 = np.float32
_EPS = np.finfo(np.float32).eps
#: The W8A8 arm accumulates a whole row in int32: refuse K above this.
MAX_K = 131072


@dataclass(frozen=True)
class W8a8Weight:
    """An int8 weight [N, K] with one f32 scale per output row."""

    weight: np.ndarray
    weight_scale: np.ndarray
    name: str = "weight"

    format = "w8a8"

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
            f"{nm}.weight: expected a 2-D int8 array [N, K]",
        )
        n, k = self.weight.shape
        require(k % BLOCK == 0 and k > 0, f"{nm}.weight: K={k} is not a multiple of {BLOCK}")
        require(k <= MAX_K, f"{nm}.weight: K={k} exceeds the W8A8 int32 limit of {MAX_K}")
        check_array(f"{nm}.weight", self.weight, np.dtype(np.int8), (n, k))
        check_array(f"{nm}.weight_scale", self.weight_scale, np.dtype(F32), (n,))
        require(bool(np.isfinite(self.weight_scale).all()), f"{nm}.weight_scale: non-finite")

    def dequantize(self) -> np.ndarray:
        """f32 [N, K]: f32(q) · scale[n]."""
        return self.weight.astype(F32) * self.weight_scale[:, None]

    @classmethod
    def quantize(cls, w: np.ndarray, *, name: str = "weight") -> W8a8Weight:
        """compressed-tensors channel int8: scale = max(amax_row/127.5, eps); q = clamp(rne(w/s))."""
        w32 = check_source(name, w, BLOCK)
        scale = np.maximum(np.abs(w32).max(axis=1) / F32(127.5), F32(_EPS)).astype(F32)
        q = np.clip(np.rint(w32 / scale[:, None]), -128, 127).astype(np.int8)
        return cls(weight=q, weight_scale=scale, name=name)
