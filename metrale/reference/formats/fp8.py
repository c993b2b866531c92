"""FP8 (W8A16) per-row weights, compressed-tensors "float-quantized" (arithmetic.md § fp8-format).

``weight`` e4m3 [N, K], ``weight_scale`` f32 [N] (stored [N, 1] on disk). ŵ = e4m3 · scale[n].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.reference.elements import E4M3, e4m3_saturate
from metrale.reference.formats._checks import check_source
from metrale.reference.formats._matrix import BLOCK, RowScaledWeight

F32 = np.float32
_EPS = np.finfo(np.float32).eps


@dataclass(frozen=True)
class Fp8Weight(RowScaledWeight):
    """An FP8 e4m3 weight [N, K] with one f32 scale per output row."""

    format = "fp8"
    element = E4M3

    @classmethod
    def quantize(cls, w: np.ndarray, *, name: str = "weight") -> Fp8Weight:
        """compressed-tensors (0.20) channel FP8: scale = amax_row/448, eps where exactly 0
        (docs/arithmetic.md, "Tiny and zero scales"); e4m3(clamp(w/scale))."""
        w32 = check_source(name, w, BLOCK)
        scale = (np.abs(w32).max(axis=1) / F32(448.0)).astype(F32)
        scale = np.where(scale == 0, F32(_EPS), scale).astype(F32)
        q = e4m3_saturate((w32 / scale[:, None]).astype(F32))
        return cls(weight=q, weight_scale=scale, name=name)
