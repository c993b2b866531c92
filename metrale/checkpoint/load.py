"""``DenseFfnLayer.from_checkpoint``: one decoder layer's FFN from a checkpoint folder.

Reads what metrale writes and what the producers write: ModelOpt NVFP4 (``weight`` uint8,
``weight_scale`` e4m3, ``weight_scale_2``, optional ``input_scale``), compressed-tensors FP8
and W8A8 (``weight`` e4m3 / int8 with a per-channel ``weight_scale`` [N, 1]; a per-tensor
scale is broadcast to every row, which is the same arithmetic), GGUF Q2_0 (type 42, also
F16/BF16/F32 FFN tensors), and plain bf16 / f16 / f32 folders (rounded to bf16). The sizes and
the activation come from ``config.json`` (``hidden_size``, ``intermediate_size``,
``hidden_act``: silu / swish -> SiLU, gelu* -> GELU) or the GGUF metadata.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from metrale.checkpoint.checks import (
    config_problems,
    ffn_problems,
    layer_problems,
    module_problems,
    require_none,
    weight_problems,
)
from metrale.checkpoint.io import HfFolder
from metrale.errors import MetraleError, a_kind
from metrale.reference.backend import Backend
from metrale.reference.context import FfnConfig
from metrale.reference.formats import DenseWeight, spec_of, spec_of_tensors
from metrale.reference.layer import DenseFfnLayer, FfnActivation, FfnWeights
from metrale.reference.w8a8_arm import W8a8Ffn

PROJS = ("gate_proj", "up_proj", "down_proj")
GGUF_PROJS = ("ffn_gate", "ffn_up", "ffn_down")


def activation_of(name: str, where: str) -> FfnActivation:
    """``hidden_act`` -> FfnActivation (silu, swish -> SiLU; gelu* -> GELU)."""
    a = str(name).lower()
    if a in ("silu", "swish"):
        return FfnActivation.SiLU
    if a.startswith("gelu"):
        return FfnActivation.GELU
    raise MetraleError(f"{where}: hidden_act {name!r} is not supported (want silu or gelu*)")


def weight_from_tensors(mod: str, t: dict[str, np.ndarray]) -> Any:
    """A reference format object from a module's tensors (by suffix: weight, weight_scale, ...),
    through the format descriptor the ``weight`` dtype names (``module_problems`` first)."""
    require_none(module_problems(mod, t))
    spec = spec_of_tensors(t, mod)
    w = spec.from_tensors(t, name=mod)
    require_none(weight_problems(spec.stem, w, mod))
    return w


def _layer_prefix(names: list[str], layer: int, where: str) -> str:
    pat = re.compile(rf"^(.*?\blayers\.{layer}\.mlp\.)(?:gate_proj|up_proj|down_proj)\.")
    for n in names:
        m = pat.match(n)
        if m:
            return m.group(1)
    found = {
        int(m.group(1))
        for n in names
        if (m := re.search(r"\blayers\.(\d+)\.mlp\.(?:gate_proj|up_proj|down_proj)\.", n))
    }
    raise MetraleError(f"{where}: no FFN for layer {layer} (layers with an FFN: {sorted(found)})")


def build_ffn_layer(
    config: FfnConfig, act: FfnActivation, ws: list[Any], backend: Backend | str | None, where: str
) -> DenseFfnLayer:
    """A layer from gate, up and down weights of one format (W8A8 goes to the W8A8 arm)."""
    kinds = {type(w).__name__ for w in ws}
    if len(kinds) != 1:
        raise MetraleError(f"{where}: gate/up/down mix formats {sorted(kinds)}")
    require_none(ffn_problems([getattr(w, "name", "?") for w in ws], ws))
    slot = spec_of(ws[0]).slot
    if slot == "w8a8":
        layer = DenseFfnLayer(config, activation=act, backend=backend)
        layer.set_w8a8_decode_weights(W8a8Ffn(*ws), config.hidden_size, config.intermediate_size)
        return layer
    return DenseFfnLayer(config, activation=act, backend=backend, **{slot: FfnWeights(*ws)})


def _tp_slice(
    proj: str, tensors: dict[str, np.ndarray], cols: tuple[int, int], down_rows: tuple[int, int] | None
) -> dict[str, np.ndarray]:
    """The rank's part of one module's tensors (views of the mapped file; only the copy that
    follows reads their pages): gate/up rows ``cols`` (16-column blocks, in elements); down K
    blocks ``cols`` // 16 (``down_rows`` None: the K split) or down rows ``down_rows`` (the N
    split). Scalars, and per-row scales of a K-split down, stay whole."""
    w = tensors["weight"]
    c0, c1 = cols
    nvfp4 = str(w.dtype) == "uint8"
    rows = cols if proj != "down_proj" else down_rows
    out = {}
    for suffix, t in tensors.items():
        if t.ndim == 0 or t.size == 1 or suffix not in ("weight", "weight_scale"):
            out[suffix] = t
        elif rows is not None:
            out[suffix] = t[rows[0] : rows[1]]
        elif suffix == "weight":
            out[suffix] = t[:, c0 // 2 : c1 // 2] if nvfp4 else t[:, c0:c1]
        elif nvfp4:
            out[suffix] = t[:, c0 // 16 : c1 // 16]
        else:
            out[suffix] = t  # per-row scale [N, 1] / [N]
    return {k: np.array(v) for k, v in out.items()}


#: A rank's part of a layer, from the layer's config: gate/up rows and down K columns ``cols``
#: (element range, whole 16-element blocks), and down rows ``down_rows`` (None: down split by K).
Part = tuple[tuple[int, int], tuple[int, int] | None]


def read_ffn_weights(
    path: Path, layer: int, part: Callable[[FfnConfig], Part] | None = None
) -> tuple[FfnConfig, FfnActivation, list[Any]]:
    """The config, activation and gate/up/down weights of decoder layer ``layer`` of a
    safetensors folder; with ``part``, only the tensors of ``part(config)`` are read (a
    tensor-parallel rank's slices, ``metrale.distributed.load``)."""
    with HfFolder(path) as folder:
        cfg = folder.config
        where = str(path)
        require_none(config_problems(cfg, str(path / "config.json")))
        act = activation_of(cfg.get("hidden_act", "silu"), str(path / "config.json"))
        names = folder.names()
        require_none(layer_problems(names, cfg, str(path / "config.json")))
        prefix = _layer_prefix(names, layer, where)
        conf = FfnConfig(int(cfg["hidden_size"]), int(cfg["intermediate_size"]))
        cols, down_rows = part(conf) if part is not None else (None, None)
        ws = []
        for proj in PROJS:
            mod = prefix + proj
            views = {n[len(mod) + 1 :]: folder.tensor(n) for n in names if n.startswith(mod + ".")}
            if cols is None:
                ws.append(weight_from_tensors(mod, {k: np.array(v) for k, v in views.items()}))
                continue
            if "weight" not in views:
                raise MetraleError(f"{mod}: no {mod}.weight tensor")
            if proj == "down_proj" and down_rows is None and str(views["weight"].dtype) == "int8":
                from metrale.reference.formats.w8a8 import MAX_K

                if views["weight"].shape[1] > MAX_K:
                    raise MetraleError(f"{mod}: W8A8 K={views['weight'].shape[1]} exceeds {MAX_K}")
            ws.append(weight_from_tensors(mod, _tp_slice(proj, views, cols, down_rows)))
        return conf, act, ws


def _load_gguf(path: Path, layer: int, backend: Backend | str | None) -> DenseFfnLayer:
    from metrale.checkpoint.gguf_q2 import HIDDEN_ACT_KEY, field_value, float_tensor, open_gguf, q2_weight
    from metrale.reference.formats.q2_0 import GGML_TYPE_Q2_0

    r = open_gguf(path)
    arch = field_value(r, "general.architecture")
    if arch is None:
        raise MetraleError(f"{path}: GGUF lacks general.architecture")
    hidden = field_value(r, f"{arch}.embedding_length")
    inter = field_value(r, f"{arch}.feed_forward_length")
    if hidden is None or inter is None:
        raise MetraleError(f"{path}: GGUF lacks {arch}.embedding_length / {arch}.feed_forward_length")
    if isinstance(inter, list):
        inter = inter[layer]
    act_name = field_value(r, HIDDEN_ACT_KEY) or ("gelu" if str(arch).startswith("gemma") else "silu")
    act = activation_of(act_name, str(path))
    by_name = {t.name: t for t in r.tensors}
    ws = []
    for proj in GGUF_PROJS:
        nm = f"blk.{layer}.{proj}.weight"
        t = by_name.get(nm)
        if t is None:
            raise MetraleError(f"{path}: no tensor {nm!r} (layer {layer})")
        if int(t.tensor_type) == GGML_TYPE_Q2_0:
            ws.append(q2_weight(t, nm))
        else:
            ws.append(DenseWeight.quantize(float_tensor(t, nm), name=nm))
    return build_ffn_layer(FfnConfig(int(hidden), int(inter)), act, ws, backend, str(path))


def checkpoint_path(path: str | os.PathLike[str], layer: int) -> Path:
    """``path`` as a Path, refused unless it exists and ``layer`` is an int >= 0."""
    if not isinstance(path, (str, os.PathLike)):
        raise MetraleError(f"load_ffn_layer: path is {a_kind(path)}, want a str or os.PathLike")
    p = Path(path)
    if not p.exists():
        raise MetraleError(f"{p}: no such checkpoint")
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
        raise MetraleError(f"load_ffn_layer: layer={layer!r} is {a_kind(layer)}, want an int >= 0")
    layer = int(layer)
    if layer < 0:
        raise MetraleError(f"layer={layer}: want >= 0")
    return p


def load_ffn_layer(
    path: str | os.PathLike[str], layer: int = 0, backend: Backend | str | None = "auto"
) -> DenseFfnLayer:
    """The FFN of decoder layer ``layer`` of the checkpoint at ``path`` (a folder, or a .gguf
    file). A tensor-parallel rank's layer: ``metrale.load_ffn_layer(..., tp_rank=, tp_size=)``
    (``metrale.distributed.load``)."""
    from metrale.checkpoint.gguf_q2 import find_gguf

    p = checkpoint_path(path, layer)
    g = find_gguf(p)
    if g is not None:
        return _load_gguf(g, layer, backend)
    conf, act, ws = read_ffn_weights(p, layer)
    return build_ffn_layer(conf, act, ws, backend, str(p))
