"""Shared validation helpers for the weight formats."""

from __future__ import annotations

import numpy as np

from metrale.errors import MetraleError, a_kind


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


def scalar_f32(a: object, name: str) -> np.float32:
    """A scalar tensor (shape (), [1] or [1, 1], as producers store it) as f32."""
    v = np.asarray(a)
    require(v.size == 1, f"{name}: want a scalar, got shape {list(v.shape)}")
    return np.float32(v.astype(np.float32).reshape(-1)[0])


def row_scale_f32(a: object, n: int, name: str) -> np.ndarray:
    """A per-row scale f32 [n] from [n, 1] (compressed-tensors), [n], or one per-tensor value
    broadcast to every row (the same arithmetic)."""
    s = np.asarray(a)
    require(s.dtype.kind == "f" or str(s.dtype) == "bfloat16", f"{name}: dtype {s.dtype}, want a float type")
    s = s.astype(np.float32)
    if s.size == 1:
        return np.full(n, s.reshape(-1)[0], dtype=np.float32)
    require(s.shape in ((n, 1), (n,)), f"{name}: shape {list(s.shape)}, want [{n}, 1], [{n}] or a scalar")
    return np.ascontiguousarray(s.reshape(n))


def tensor(t: object, suffix: str, name: str) -> np.ndarray:
    """``t[suffix]`` of a module's tensors (a mapping by suffix), or an error naming it."""
    require(isinstance(t, dict), f"{name}: tensors must be a dict by suffix, got {type(t).__name__}")
    assert isinstance(t, dict)
    v = t.get(suffix)
    require(v is not None, f"{name}: no {name}.{suffix} tensor")
    return np.asarray(v)


def shown(v: object) -> str:
    """A one-line, bounded description of a value for an error message."""
    if isinstance(v, np.ndarray):
        return f"an array {list(v.shape)} of {v.dtype}"
    r = " ".join(repr(v).split())
    return r if len(r) <= 60 else r[:57] + "..."


def check_scalar(name: str, v: object, *, positive: bool = False) -> None:
    """``v`` is a finite real scalar (a Python or numpy number, or a 0-d numeric array; not a
    bool), and > 0 when ``positive``; else MetraleError naming ``name``."""
    want = "a finite positive f32 scalar" if positive else "a finite f32 scalar"
    real = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    real = real or (isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "fiu")
    require(real, f"{name}: must be {want}, got {type(v).__name__} {shown(v)}")
    f = float(v)  # type: ignore[arg-type]
    require(np.isfinite(f) and (f > 0 or not positive), f"{name}: must be {want}, got {shown(v)}")


def check_name(cls: str, name: object) -> None:
    """A weight's ``name`` is a str (it names the tensors in every message)."""
    require(isinstance(name, str), f"{cls}: name={shown(name)} is {a_kind(name)}, want a str")
