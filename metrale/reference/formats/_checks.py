"""Shared validation helpers for the weight formats."""

from __future__ import annotations

import numpy as np

from metrale.errors import MetraleError


def require(cond: bool, message: str) -> None:
    """Raise MetraleError(message) unless cond."""
    if not cond:
        raise MetraleError(message)


def check_array(name: str, a: object, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Check that tensor `name` is a numpy array of `dtype` and `shape`."""
    require(isinstance(a, np.ndarray), f"{name}: expected a numpy array, got {type(a).__name__}")
    assert isinstance(a, np.ndarray)
    require(a.dtype == dtype, f"{name}: dtype {a.dtype}, want {np.dtype(dtype)}")
    require(tuple(a.shape) == tuple(shape), f"{name}: shape {tuple(a.shape)}, want {tuple(shape)}")
    return a


def check_source(name: str, w: np.ndarray, block: int) -> np.ndarray:
    """A source weight [N, K] as float32: 2-D, K a multiple of `block`, all finite."""
    w = np.asarray(w)
    require(w.ndim == 2, f"{name}: weight must be 2-D [N, K], got shape {tuple(w.shape)}")
    require(
        w.shape[1] % block == 0 and w.shape[1] > 0,
        f"{name}: K={w.shape[1]} is not a multiple of the format's block of {block}",
    )
    require(w.shape[0] > 0, f"{name}: N must be positive, got shape {tuple(w.shape)}")
    require(
        w.dtype.kind == "f" or str(w.dtype) == "bfloat16",
        f"{name}: unsupported dtype {w.dtype} (want a float type)",
    )
    w32 = w.astype(np.float32)
    bad = ~np.isfinite(w32)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise MetraleError(f"{name}: non-finite weight {w32[r, c]} at [{r}, {c}] ({int(bad.sum())} in all)")
    return w32
