"""int8 W8A8 weights, compressed-tensors "int-quantized" channel-wise (arithmetic.md § w8a8-format).

``weight`` int8 [N, K], ``weight_scale`` f32 [N] (stored [N, 1] on disk). ŵ = q · scale[n].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.reference.formats._checks import check_source
from metrale.reference.formats._matrix import BLOCK, RowScaledWeight

F32 = np.float32
_EPS = np.finfo(np.float32).eps
#: The W8A8 arm accumulates a whole row in int32: refuse K above this.
MAX_K = 131072


@dataclass(frozen=True)
class W8a8Weight(RowScaledWeight):
    """An int8 weight [N, K] with one f32 scale per output row."""

    format = "w8a8"
    element = np.dtype(np.int8)
    max_k = MAX_K

    @classmethod
    def quantize(cls, w: np.ndarray, *, name: str = "weight") -> W8a8Weight:
        """compressed-tensors (0.20) channel int8: scale = amax_row/127.5, eps where exactly 0
        (docs/arithmetic.md, "Tiny and zero scales"); q = clamp(rne(w/scale), −128, 127)."""
        w32 = check_source(name, w, BLOCK)
        scale = (np.abs(w32).max(axis=1) / F32(127.5)).astype(F32)
        scale = np.where(scale == 0, F32(_EPS), scale).astype(F32)
        q = np.clip(np.rint(w32 / scale[:, None]), -128, 127).astype(np.int8)
        return cls(weight=q, weight_scale=scale, name=name)
