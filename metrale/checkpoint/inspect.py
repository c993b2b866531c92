"""``metrale inspect``: what a checkpoint holds, tensor by tensor.

Works on metrale's outputs and on folders and files other tools wrote: ModelOpt NVFP4,
compressed-tensors FP8 / INT8 (and NVFP4 ``weight_packed`` groups, listed not loaded), plain
safetensors folders, and GGUF files. A row is a module's weight with its scale tensors folded
in: the logical shape [N, K], the bytes stored and the compression ratio against bf16.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metrale.checkpoint import layouts
from metrale.checkpoint.io import HfFolder
from metrale.errors import MetraleError

#: Tensors folded into their module's row.
SCALE_SUFFIXES = (
    "weight_scale",
    "weight_scale_2",
    "input_scale",
    "weight_zero_point",
    "weight_global_scale",
    "input_global_scale",
    "weight_shape",
)


@dataclass
class Row:
    """One module (or standalone tensor): name, format, logical shape, bytes, ratio vs bf16."""

    name: str
    format: str
    shape: list[int]
    bytes: int
    tensors: list[str] = field(default_factory=list)

    @property
    def bf16_bytes(self) -> int:
        """Bytes of the logical shape in bf16."""
        n = 1
        for s in self.shape:
            n *= s
        return 2 * n

    @property
    def ratio(self) -> float:
        return (self.bf16_bytes / self.bytes) if self.bytes else 0.0


@dataclass
class Scan:
    """A checkpoint's layout (``modelopt``, ``compressed-tensors``, ``gguf``, ``none``) and rows."""

    path: Path
    layout: str
    detail: str
    rows: list[Row]
    config: dict[str, Any] = field(default_factory=dict)
    hf_quant: dict[str, Any] | None = None

    @property
    def total_bytes(self) -> int:
        return sum(r.bytes for r in self.rows)

    @property
    def logical_bf16_bytes(self) -> int:
        return sum(r.bf16_bytes for r in self.rows)


def _fmt_of(dtypes: dict[str, str]) -> str:
    w = dtypes.get("weight")
    if "weight_packed" in dtypes and "weight_global_scale" in dtypes:
        return "nvfp4 (compressed-tensors)"
    if w == "U8" and dtypes.get("weight_scale") == "F8_E4M3" and "weight_scale_2" in dtypes:
        return "nvfp4+a4" if "input_scale" in dtypes else "nvfp4"
    if w == "F8_E4M3":
        return "fp8"
    if w == "I8":
        return "w8a8"
    return (w or next(iter(dtypes.values()))).lower()


def _scan_folder(path: Path) -> Scan:
    with HfFolder(path, need_config=False) as folder:
        hq_path = path / layouts.HF_QUANT_CONFIG
        hq = json.loads(hq_path.read_text(encoding="utf-8")) if hq_path.is_file() else None
        cfg = folder.config
        layout = layouts.detect(cfg, hq)
        q = cfg.get("quantization_config") or {}
        detail = str(
            q.get("quant_algo")
            or q.get("format")
            or (hq or {}).get("quantization", {}).get("quant_algo")
            or ""
        )
        names = folder.names()
        entries = {n: folder.entry(n) for n in names}
        mods: dict[str, dict[str, str]] = {}
        for n in names:
            for base in ("weight", "weight_packed"):
                if n.endswith("." + base):
                    mods.setdefault(n[: -len(base) - 1], {})
        used: set[str] = set()
        rows: list[Row] = []
        for mod in mods:
            group = {}
            for suf in ("weight", "weight_packed", *SCALE_SUFFIXES):
                n = f"{mod}.{suf}"
                if n in entries:
                    group[suf] = n
            dts = {s: entries[n].dtype for s, n in group.items()}
            fmt = _fmt_of(dts)
            main = entries[group.get("weight", group.get("weight_packed", ""))]
            shape = list(main.shape)
            if fmt.startswith("nvfp4") and shape:
                shape[-1] *= 2
            rows.append(
                Row(mod, fmt, shape, sum(entries[n].nbytes for n in group.values()), list(group.values()))
            )
            used.update(group.values())
        for n in names:
            if n not in used:
                e = entries[n]
                rows.append(Row(n, e.dtype.lower(), list(e.shape), e.nbytes, [n]))
        return Scan(path, layout, detail, rows, cfg, hq)


def _scan_gguf(path: Path) -> Scan:
    from metrale.checkpoint.gguf_q2 import field_value, open_gguf

    r = open_gguf(path)
    rows = []
    for t in r.tensors:
        shape = [int(s) for s in reversed(list(t.shape))]
        rows.append(Row(t.name, t.tensor_type.name.lower(), shape, int(t.n_bytes), [t.name]))
    arch = field_value(r, "general.architecture") or "?"
    return Scan(path, "gguf", str(arch), rows)


def scan(path: str | os.PathLike[str]) -> Scan:
    """Scan a checkpoint folder or a .gguf file."""
    from metrale.checkpoint.gguf_q2 import find_gguf

    p = Path(path)
    if not p.exists():
        raise MetraleError(f"{p}: no such file or folder")
    g = find_gguf(p)
    if g is not None:
        return _scan_gguf(g)
    if p.is_file():
        raise MetraleError(f"{p}: want a model folder or a .gguf file")
    return _scan_folder(p)
