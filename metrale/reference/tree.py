"""The fixed binary tree over block values (arithmetic.md § tree)."""

from __future__ import annotations

import numpy as np

NEG_ZERO = np.float32(-0.0)


def tree_sum(v: np.ndarray, axis: int = 0) -> np.ndarray:
    """Sum fp32 block values along ``axis`` by the perfect binary tree in K order.

    Leaves are padded with −0.0 up to a power of two, then ``v = v[0::2] + v[1::2]``
    (adjacent pairs first, each add one fp32 rounding) until one node is left.
    """
    v = np.moveaxis(np.asarray(v, dtype=np.float32), axis, 0)
    b = v.shape[0]
    p = 1 << max(0, (b - 1).bit_length())
    if p != b:
        pad = np.full((p - b, *v.shape[1:]), NEG_ZERO, dtype=np.float32)
        v = np.concatenate([v, pad], axis=0)
    with np.errstate(over="ignore", invalid="ignore"):  # ±Inf / NaN propagate by IEEE rules
        while v.shape[0] > 1:
            v = v[0::2] + v[1::2]
    return v[0]
