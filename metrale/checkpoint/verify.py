"""``metrale verify``: layout invariants of every tensor and, against SRC, error statistics.

A violation is anything a loader would trip on or that breaks the declared layout: a tensor
that fails its format's checks (dtypes, shapes, NaN codes, non-positive scales), a
``quantization_config`` that disagrees with the tensors (ModelOpt ``quant_algo`` vs the
``input_scale`` tensors, compressed-tensors ``format`` vs the weight dtype, a quantized
module listed as ignored, a config the ``compressed-tensors`` package refuses), an index
that disagrees with the shards; against SRC, a copied tensor that differs from SRC, a shape
mismatch, or a relative error above the format's bound.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from metrale.checkpoint.convert import FFN_RE
from metrale.checkpoint.fusion import shared_amax, sibling_groups
from metrale.checkpoint.inspect import Row, Scan, scan
from metrale.checkpoint.io import HfFolder
from metrale.checkpoint.load import weight_from_tensors
from metrale.checkpoint.work import quantize_array, rel_error
from metrale.errors import MetraleError
from metrale.reference.formats import FORMATS, Nvfp4Weight

#: Default bound on ‖ŵ − w‖ / ‖w‖ per quantized format, from the format descriptors.
MAX_REL_ERROR = {s: f.max_rel_error for s, f in FORMATS.items() if f.convertible}


@dataclass
class Stat:
    """Error of one quantized tensor against SRC."""

    name: str
    format: str
    rel_error: float
    max_abs_error: float
    bit_exact: bool


@dataclass
class VerifyResult:
    """``checked`` tensors, ``violations`` (messages) and, with SRC, ``stats``."""

    scan: Scan
    checked: int = 0
    violations: list[str] = field(default_factory=list)
    stats: list[Stat] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def _fmt_key(fmt: str) -> str:
    return "nvfp4" if fmt.startswith("nvfp4") else fmt


def _check_configs(res: VerifyResult, quant_rows: list[Row]) -> None:
    s = res.scan
    cfg, hq = s.config, s.hf_quant
    qc = cfg.get("quantization_config") or {}
    fmts = {_fmt_key(r.format) for r in quant_rows}
    mods = [r.name for r in quant_rows]
    v = res.violations
    if s.layout == "modelopt":
        algo = (hq or {}).get("quantization", {}).get("quant_algo") if hq else qc.get("quant_algo")
        if hq is None:
            v.append("modelopt layout without hf_quant_config.json")
        if qc and qc.get("quant_method") not in ("modelopt", "modelopt_fp4"):
            v.append(
                f"config.json quantization_config quant_method {qc.get('quant_method')!r}, want 'modelopt'"
            )
        if qc and hq and qc.get("quant_algo") not in (None, algo):
            v.append(
                f"quant_algo {qc.get('quant_algo')!r} in config.json but {algo!r} in hf_quant_config.json"
            )
        if fmts - {"nvfp4"}:
            v.append(f"modelopt NVFP4 folder holds {sorted(fmts - {'nvfp4'})} tensors")
        a4 = [r.format == "nvfp4+a4" for r in quant_rows]
        if algo == "NVFP4" and not all(a4):
            v.append("quant_algo NVFP4 declares FP4 activations but some modules lack input_scale")
        if algo == "W4A16_NVFP4" and any(a4):
            v.append("quant_algo W4A16_NVFP4 is weight-only but some modules carry input_scale")
        if algo not in ("NVFP4", "W4A16_NVFP4"):
            v.append(f"quant_algo {algo!r}: metrale reads NVFP4 and W4A16_NVFP4")
        group = (hq or {}).get("quantization", {}).get("group_size", qc.get("group_size", 16))
        if group != 16:
            v.append(f"group_size {group}, want 16")
    elif s.layout == "compressed-tensors":
        want = {s: f.ct_format[0] for s, f in FORMATS.items() if f.ct_format is not None}
        for f in fmts:
            if f in want and qc.get("format") != want[f]:
                v.append(f"compressed-tensors format {qc.get('format')!r} but {f} weights (want {want[f]!r})")
        try:
            from compressed_tensors.quantization import QuantizationConfig
        except ImportError:  # pragma: no cover - optional
            QuantizationConfig = None
        if QuantizationConfig is not None:
            try:
                QuantizationConfig.model_validate(qc)
            except Exception as e:  # pydantic's ValidationError and friends
                v.append(f"compressed-tensors rejects quantization_config: {str(e).splitlines()[0]}")
    elif s.layout not in ("none", "gguf") and quant_rows:
        v.append(f"unknown quantization layout {s.layout!r}")
    elif s.layout == "none" and quant_rows:
        v.append(f"quantized tensors ({len(quant_rows)}) but config.json declares no quantization_config")
    ignore = [
        str(x) for x in ((hq or {}).get("quantization", {}).get("exclude_modules") or qc.get("ignore") or [])
    ]
    for m in mods:
        for pat in ignore:
            plain = pat[3:] if pat.startswith("re:") else pat
            if m == plain or (not pat.startswith("re:") and fnmatch.fnmatchcase(m, pat)):
                v.append(f"{m}: quantized but listed as ignored ({pat!r})")


def _check_siblings(res: VerifyResult, weights: dict[str, Any]) -> None:
    """NVFP4 fused siblings (gate/up, q/k/v) must share weight_scale_2: vLLM runs them as one
    layer with one global scale (docs/arithmetic.md, "NVFP4 fused siblings")."""
    nv = {m: w for m, w in weights.items() if isinstance(w, Nvfp4Weight)}
    for group in sibling_groups(nv):
        bits = {np.float32(nv[m].weight_scale_2).view(np.uint32).item() for m in group}
        if len(bits) > 1:
            vals = ", ".join(f"{float(nv[m].weight_scale_2):.9g}" for m in group)
            res.violations.append(
                f"{', '.join(group)}: fused siblings have different weight_scale_2 ({vals}); "
                "vLLM runs them as one layer with one global scale"
            )


def _check_loader(res: VerifyResult) -> None:
    """Every decoder layer's FFN must load through DenseFfnLayer.from_checkpoint (the loader's
    checks: config.json sizes, layer count and activation, each module's tensors and values,
    GGUF metadata and tensor types): the layers with FFN tensors and, with those, every layer
    below ``num_hidden_layers`` (or the GGUF ``block_count``). verify fails exactly when
    loading some decoder layer's FFN fails (``tests/test_verify_load_agree.py``)."""
    from metrale.checkpoint.load import load_ffn_layer

    s = res.scan
    layers = {int(m.group(1) or m.group(2)) for r in s.rows if (m := _LAYER_RE.search(r.name))}
    count = s.config.get("num_hidden_layers") if s.layout != "gguf" else None
    if layers and isinstance(count, int) and not isinstance(count, bool) and 0 < count <= 1 << 16:
        layers |= set(range(count))
    seen = set(res.violations)
    for i in sorted(layers):
        try:
            load_ffn_layer(s.path, layer=i, backend="reference")
        except MetraleError as e:
            if str(e) not in seen:
                seen.add(str(e))
                res.violations.append(str(e))


_LAYER_RE = re.compile(r"(?:\blayers\.(\d+)\.mlp\.(?:gate|up|down)_proj|^blk\.(\d+)\.ffn_(?:gate|up|down))")


def verify_path(
    path: str | os.PathLike[str],
    against: str | os.PathLike[str] | None = None,
    *,
    max_rel_error: float | None = None,
    exact: bool = False,
) -> VerifyResult:
    """Verify the checkpoint at ``path``; with ``against``, compare with that source folder.
    ``exact`` also requires every quantized tensor to equal metrale's quantization of SRC."""
    if max_rel_error is not None and not (np.isfinite(max_rel_error) and max_rel_error > 0):
        raise MetraleError(f"--max-rel-error {max_rel_error}: want a finite number > 0")
    try:
        s = scan(path)
    except MetraleError as e:
        r = VerifyResult(Scan(Path(path), "?", "", []))
        r.violations.append(str(e))
        return r
    res = VerifyResult(s)
    quant_rows = [r for r in s.rows if _fmt_key(r.format) in MAX_REL_ERROR]
    weights: dict[str, Any] = {}
    if s.layout == "gguf":
        _load_gguf_weights(s, quant_rows, res, weights)
    else:
        _load_folder_weights(s, quant_rows, res, weights)
        _check_index(s, res)
        _check_siblings(res, weights)
    _check_configs(res, quant_rows)
    _check_loader(res)
    if against is not None:
        _against(res, Path(against), weights, max_rel_error, exact)
    return res


def _load_folder_weights(s: Scan, rows: list[Row], res: VerifyResult, out: dict[str, Any]) -> None:
    with HfFolder(s.path, need_config=False) as folder:
        res.checked += len(s.rows)
        for r in rows:
            tensors = {n[len(r.name) + 1 :]: np.array(folder.tensor(n)) for n in r.tensors}
            try:
                w = weight_from_tensors(r.name, tensors)
            except MetraleError as e:
                res.violations.append(str(e))
                continue
            out[r.name] = w


def _load_gguf_weights(s: Scan, rows: list[Row], res: VerifyResult, out: dict[str, Any]) -> None:
    from metrale.checkpoint.gguf_q2 import open_gguf, q2_weight

    g = open_gguf(s.path)
    by = {t.name: t for t in g.tensors}
    res.checked += len(s.rows)
    for r in rows:
        try:
            w = q2_weight(by[r.name], r.name)
        except MetraleError as e:
            res.violations.append(str(e))
            continue
        out[r.name] = w


def _check_index(s: Scan, res: VerifyResult) -> None:
    from metrale.checkpoint.io import INDEX_NAME, read_json

    idx = s.path / INDEX_NAME
    if not idx.exists():
        return
    wm = read_json(idx, "safetensors index").get("weight_map", {})
    listed = set(wm)
    held = {n for r in s.rows for n in r.tensors}
    for n in sorted(held - listed):
        res.violations.append(f"{idx}: tensor {n!r} is in a shard but not in the index")


def _against(res: VerifyResult, src: Path, weights: dict[str, Any], bound: float | None, exact: bool) -> None:
    s = res.scan
    out = None if s.layout == "gguf" else HfFolder(s.path, need_config=False)
    try:
        _compare(res, src, out, weights, bound, exact)
    finally:
        if out is not None:
            out.close()


def _compare(
    res: VerifyResult,
    src: Path,
    out: HfFolder | None,
    weights: dict[str, Any],
    bound: float | None,
    exact: bool,
) -> None:
    s = res.scan
    with HfFolder(src) as source:
        if s.layout == "gguf":
            from metrale.checkpoint.gguf_q2 import NameMapper

            mapper = NameMapper(source.config)
            to_src = {}
            for n in source.names():
                try:
                    to_src[mapper(n)] = n
                except MetraleError:
                    continue
        else:
            to_src = {n[: -len(".weight")]: n for n in source.names() if n.endswith(".weight")}
        shared: dict[str, float] = {}
        if s.layout != "gguf":
            nv = [m for m, w in weights.items() if isinstance(w, Nvfp4Weight) and m in to_src]
            shared = shared_amax(nv, lambda m: source.tensor(to_src[m]))
        covered = {to_src.get(r.name, r.name) for r in s.rows}
        for n in source.names():
            if n.endswith(".weight") and FFN_RE.search(n[: -len(".weight")]) and n not in covered:
                res.violations.append(f"{n}: SRC FFN weight without a counterpart in {s.path}")
        for r in s.rows:
            fmt = _fmt_key(r.format)
            src_name = to_src.get(r.name)
            if fmt not in MAX_REL_ERROR:
                if out is not None and r.name in source.where:
                    a, b = np.asarray(source.tensor(r.name)), np.asarray(out.tensor(r.name))
                    if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                        res.violations.append(f"{r.name}: copied tensor differs from SRC")
                continue
            if src_name is None:
                res.violations.append(f"{r.name}: no source tensor in {src}")
                continue
            w = weights.get(r.name)
            if w is None:
                continue
            src_w = np.asarray(source.tensor(src_name))
            if s.layout == "gguf":
                from metrale.checkpoint.gguf_q2 import permute_rows, rope_heads

                h = rope_heads(src_name, source.config)
                if h is not None:
                    src_w = permute_rows(src_w, h, src_name)
            if tuple(src_w.shape) != (w.n, w.k):
                res.violations.append(
                    f"{r.name}: shape [{w.n}, {w.k}] but SRC {src_name} is {list(src_w.shape)}"
                )
                continue
            deq = w.dequantize()
            src32 = src_w.astype(np.float32)
            err = rel_error(src32, deq)
            mae = float(np.max(np.abs(deq.astype(np.float64) - src32))) if src32.size else 0.0
            try:
                again = quantize_array(fmt, src_w, r.name, weight_amax=shared.get(r.name))
                same = bool(np.array_equal(again.dequantize().view(np.uint32), deq.view(np.uint32)))
            except MetraleError:
                same = False
            res.stats.append(Stat(r.name, fmt, err, mae, same))
            lim = MAX_REL_ERROR[fmt] if bound is None else bound
            if not err <= lim:
                res.violations.append(f"{r.name}: relative error {err:.4g} exceeds {lim:g} ({fmt})")
            if exact and not same:
                res.violations.append(f"{r.name}: differs from metrale's {fmt} quantization of SRC")
