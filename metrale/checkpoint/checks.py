"""The checks a checkpoint must pass to load, shared by the loader
(``DenseFfnLayer.from_checkpoint``, which raises on the first) and ``metrale verify`` (which
lists them all, loading every decoder layer): the config's sizes (``config_problems``), the
decoder layers the tensors hold against ``num_hidden_layers`` (``layer_problems``), each
module's tensors against its format's (``module_problems``) and each weight's values, one set
per format keyed by the format descriptor's stem (``WEIGHT_CHECKS``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from metrale.checkpoint.io import CODES
from metrale.errors import MetraleError, a_kind
from metrale.reference.formats import FORMATS

#: config.json keys the loader reads as sizes, and the optional layer count.
SIZE_KEYS = ("hidden_size", "intermediate_size")
LAYERS_KEY = "num_hidden_layers"
_FFN_NAME = re.compile(r"^(.*?\blayers\.)(\d+)\.mlp\.(?:gate_proj|up_proj|down_proj)\.")
#: The safetensors formats by the dtype code of their ``weight``.
_SAFETENSORS_FORMATS = [f for f in FORMATS.values() if f.layout != "gguf" and f.stem != "bf16"]
_DENSE_CODES = ("BF16", "F16", "F32")


def _positive_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and int(v) > 0


def config_problems(cfg: Mapping[str, Any], where: str, *, required: Sequence[str] = SIZE_KEYS) -> list[str]:
    """config.json's sizes: each of ``required`` present, each size and ``num_hidden_layers``
    (where given) a positive integer (not a string, float or bool)."""
    out = []
    for key in (*SIZE_KEYS, LAYERS_KEY):
        if key not in cfg:
            if key in required:
                out.append(f"{where}: lacks {key!r}")
            continue
        v = cfg[key]
        if not _positive_int(v):
            out.append(f"{where}: {key} {v!r} is {a_kind(v)}, want a positive integer")
    return out


def spans(xs: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out: list[str] = []
    for x in sorted(xs):
        if out and out[-1][1] == x - 1:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def layer_problems(names: Sequence[str], cfg: Mapping[str, Any], where: str) -> list[str]:
    """The decoder layers the tensors hold against config.json's ``num_hidden_layers``: with
    dense FFN tensors (``<prefix>layers.N.mlp.{gate,up,down}_proj.*``), the layers under that
    prefix must be 0..num_hidden_layers-1 and each must have FFN (``mlp.*``) tensors."""
    prefixes = {m.group(1) for n in names if (m := _FFN_NAME.match(n))}
    if not prefixes:
        return []
    pat = re.compile("^(" + "|".join(map(re.escape, sorted(prefixes))) + r")(\d+)\.(mlp\.)?")
    held: set[int] = set()
    with_mlp: set[int] = set()
    for n in names:
        m = pat.match(n)
        if m:
            held.add(int(m.group(2)))
            if m.group(3):
                with_mlp.add(int(m.group(2)))
    want = cfg.get(LAYERS_KEY)
    if not _positive_int(want):
        return []
    out = []
    if held != set(range(int(want))):
        out.append(f"{where}: {LAYERS_KEY} {want} but the tensors hold decoder layers {spans(held)}")
    prefix = sorted(prefixes)[0]
    for i in sorted(held - with_mlp):
        out.append(f"{where}: {LAYERS_KEY} {want} but layer {i} has no FFN tensors ({prefix}{i}.mlp.*)")
    return out


def module_problems(mod: str, t: Mapping[str, np.ndarray]) -> list[str]:
    """One module's tensors (by suffix) against the formats' on-disk tensors: a ``weight``
    whose dtype names a format needs that format's tensors, with their dtypes; scales of one
    format beside a weight of another dtype name the weight's dtype as what is wrong."""
    w = t.get("weight")
    if w is None:
        return [f"{mod}: no {mod}.weight tensor"]
    codes = {k: CODES.get(np.asarray(v).dtype, str(np.asarray(v).dtype)) for k, v in t.items()}
    wc = codes["weight"]

    def scales(f: Any) -> list[Any]:
        return [ts for ts in f.tensors if ts.suffix != "weight" and not ts.optional]

    def matches(f: Any) -> bool:
        return all(codes.get(ts.suffix) == ts.dtype for ts in scales(f))

    mine = [f for f in _SAFETENSORS_FORMATS if f.tensors[0].dtype == wc]
    others = [f for f in _SAFETENSORS_FORMATS if f.tensors[0].dtype != wc and matches(f)]
    # the scales of another format (and not this weight's): the weight dtype is what is wrong
    own = any(codes.get(ts.suffix) == ts.dtype for f in mine for ts in scales(f))
    if others and not own:
        # the fullest match: NVFP4's weight_scale + weight_scale_2 before FP8's weight_scale
        n = max(len(scales(f)) for f in others)
        best = [f for f in others if len(scales(f)) == n]
        held = ", ".join(f"{ts.suffix} {ts.dtype}" for ts in scales(best[0]))
        labels = " or ".join(f"{f.label}'s" for f in best)
        want = " or ".join(f.tensors[0].dtype for f in best)
        verb = "are" if n > 1 else "is"
        return [f"{mod}.weight: {wc}, but {held} {verb} {labels} (want {want})"]
    if wc in _DENSE_CODES:
        return []
    if not mine:
        known = ", ".join(f"{f.tensors[0].dtype} {f.label}" for f in _SAFETENSORS_FORMATS)
        return [f"{mod}.weight: dtype {wc} is not a format metrale loads (want {known}, or BF16/F16/F32)"]
    f = mine[0]
    out = []
    for ts in scales(f):
        got = codes.get(ts.suffix)
        if got is None:
            out.append(f"{mod}: {f.label} weight ({wc}) without {mod}.{ts.suffix} ({ts.dtype})")
        elif got != ts.dtype and not (f.stem != "nvfp4" and got in _DENSE_CODES):
            out.append(f"{mod}.{ts.suffix}: dtype {got}, want {ts.dtype} for the {f.label} weight")
    return out


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
