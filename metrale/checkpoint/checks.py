"""The checks a quantized checkpoint's weights must pass, one set per format, shared by the
loader (``DenseFfnLayer.from_checkpoint``, which raises on the first) and ``metrale verify``
(which lists them all). Keyed by the format descriptor's stem, so they can move beside it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from metrale.errors import MetraleError


def _positive(v: float) -> bool:
    return bool(np.isfinite(v)) and v > 0


def _nvfp4(w: Any, name: str) -> list[str]:
    out = []
    s2 = float(w.weight_scale_2)
    if not _positive(s2):
        out.append(f"{name}.weight_scale_2 = {s2}: want a finite number > 0")
    sc = np.asarray(w.weight_scale).astype(np.float32)
    if not np.isfinite(sc).all() or (sc < 0).any():
        out.append(f"{name}.weight_scale: negative or non-finite block scales")
    if w.input_scale is not None and not _positive(float(w.input_scale)):
        out.append(f"{name}.input_scale = {float(w.input_scale)}: want a finite number > 0")
    return out


def _row_scaled(w: Any, name: str) -> list[str]:
    sc = np.asarray(w.weight_scale, dtype=np.float32).reshape(-1)
    bad = np.flatnonzero(~(np.isfinite(sc) & (sc > 0)))
    if bad.size:
        r = int(bad[0])
        return [f"{name}.weight_scale: row {r} scale {float(sc[r])}: want a finite number > 0"]
    return []


def _q2_0(w: Any, name: str) -> list[str]:
    d = np.asarray(w.d()).astype(np.float32)
    if not np.isfinite(d).all() or (d < 0).any():
        return [f"{name}: negative or non-finite block scale d"]
    return []


#: format stem -> the checks of one weight of that format.
WEIGHT_CHECKS: dict[str, Callable[[Any, str], list[str]]] = {
    "nvfp4": _nvfp4,
    "fp8": _row_scaled,
    "w8a8": _row_scaled,
    "q2_0": _q2_0,
}


def weight_problems(stem: str, w: Any, name: str) -> list[str]:
    """What is wrong with weight ``w`` (format ``stem``) under the name ``name``; [] if nothing."""
    check = WEIGHT_CHECKS.get(stem)
    return check(w, name) if check is not None else []


def ffn_problems(names: Sequence[str], ws: Sequence[Any]) -> list[str]:
    """Checks across one FFN's gate/up/down: NVFP4 input_scale on all three or none."""
    has = [getattr(w, "input_scale", None) is not None for w in ws]
    if any(has) and not all(has):
        on = next(n for n, h in zip(names, has, strict=True) if h)
        off = next(n for n, h in zip(names, has, strict=True) if not h)
        return [f"input_scale on {on} but not on {off}: W4A4 needs it on gate, up and down"]
    return []


def require_none(problems: list[str]) -> None:
    """Raise the first problem (the loader's behaviour)."""
    if problems:
        raise MetraleError(problems[0])
