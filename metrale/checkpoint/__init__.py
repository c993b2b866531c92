"""Checkpoints: the converter (``convert``), ``inspect``, ``verify``, the FFN loader (``load``),
safetensors / GGUF I/O (``io``, ``gguf_q2``), the producers' configs (``layouts``) and a
generated example (``example``). Submodules import lazily; see ``metrale --help``."""

from __future__ import annotations

from typing import Any

_WHERE = {
    "ConvertOptions": "metrale.checkpoint.convert",
    "convert_checkpoint": "metrale.checkpoint.convert",
    "load_ffn_layer": "metrale.checkpoint.load",
    "make_example_checkpoint": "metrale.checkpoint.example",
    "scan": "metrale.checkpoint.inspect",
    "verify_path": "metrale.checkpoint.verify",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(name)
