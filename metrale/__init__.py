"""metrale: quantized LLM feed-forward layers whose every bit a numpy reference defines.

The names a user needs (see README.md): build a layer from weights or a checkpoint, run it on
the reference (numpy) or CUDA backend, or project rows through one weight.

Importing ``metrale`` plugs the layers above the reference into it: backend selection by name
(``metrale.backend``) and checkpoint loading (``load_ffn_layer``: ``metrale.checkpoint.load``,
or a tensor-parallel rank's slices through ``metrale.distributed.load``, imported when first
called).
"""

from __future__ import annotations

import os
from typing import Any

from metrale import backend as _backend  # installs get_backend as the reference's resolver
from metrale.errors import BackendUnavailable, KernelMissing, MetraleError
from metrale.reference.backend import Backend
from metrale.reference.context import FfnBuffers, FfnConfig, ForwardContext
from metrale.reference.elements import BF16
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, W8a8Weight
from metrale.reference.layer import (
    DenseFfnLayer,
    FfnActivation,
    FfnLora,
    FfnWeights,
    set_checkpoint_loader,
)
from metrale.reference.lora import LoraAdapter
from metrale.reference.projection import project
from metrale.reference.w8a8_arm import W8a8Ffn

get_backend = _backend.get_backend
__version__ = "0.1.0"


def load_ffn_layer(
    path: str | os.PathLike[str], layer: int = 0, backend: Backend | str | None = "auto", **tp: Any
) -> DenseFfnLayer:
    """The FFN of decoder layer ``layer`` of a checkpoint folder or .gguf file that metrale,
    ModelOpt, compressed-tensors or ggml wrote (``metrale.checkpoint.load``); with ``tp_rank=``,
    ``tp_size=`` (and ``tp_split=``, ``tp_group=``), a tensor-parallel rank's layer read slice
    by slice (``metrale.distributed.load.load_tp_layer``)."""
    if tp:
        from metrale.distributed.load import load_tp_layer  # the TP layer only when used

        return load_tp_layer(path, layer, backend, **tp)
    from metrale.checkpoint.load import load_ffn_layer as load  # torch/safetensors only when used

    return load(path, layer=layer, backend=backend)


set_checkpoint_loader(load_ffn_layer)

__all__ = [
    "BF16",
    "Backend",
    "BackendUnavailable",
    "DenseFfnLayer",
    "DenseWeight",
    "FfnActivation",
    "FfnBuffers",
    "FfnConfig",
    "FfnLora",
    "FfnWeights",
    "ForwardContext",
    "Fp8Weight",
    "KernelMissing",
    "LoraAdapter",
    "MetraleError",
    "Nvfp4Weight",
    "Q2_0Weight",
    "W8a8Ffn",
    "W8a8Weight",
    "__version__",
    "get_backend",
    "load_ffn_layer",
    "project",
]
