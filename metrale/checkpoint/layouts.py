"""The producers' configuration files for each written format.

* NVFP4, as NVIDIA ModelOpt's unified HF export writes it: ``hf_quant_config.json``
  ``{"producer": {"name": "modelopt", ...}, "quantization": {"quant_algo", "group_size": 16,
  "exclude_modules", "kv_cache_quant_algo": null}}`` and ``config.json``'s
  ``quantization_config`` (ModelOpt's ``convert_hf_quant_config_format``: ``config_groups``,
  ``ignore``, ``quant_algo``, ``producer``, ``quant_method: "modelopt"``). ``quant_algo`` is
  ``NVFP4`` when every quantized Linear carries an ``input_scale`` (FP4 activations, W4A4) and
  ``W4A16_NVFP4`` for a weight-only export, as ModelOpt names them.
* FP8 and W8A8, as compressed-tensors / llm-compressor write them: ``quantization_config`` with
  ``quant_method: "compressed-tensors"``, ``format`` ``float-quantized`` / ``int-quantized``,
  one config group of channel-wise symmetric static 8-bit weights and dynamic per-token 8-bit
  activations, ``ignore`` listing the Linear modules left unquantized.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from metrale.reference.formats import FORMATS

MODELOPT_GROUP_SIZE = 16
HF_QUANT_CONFIG = "hf_quant_config.json"
#: compressed-tensors ``format`` and ``type`` per metrale format, from the format descriptors.
CT_FORMATS = {s: f.ct_format for s, f in FORMATS.items() if f.ct_format is not None}


def metrale_version() -> str:
    try:
        return version("metrale")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


def producer() -> dict[str, str]:
    """ModelOpt's producer block; the version says which tool really wrote the folder."""
    return {"name": "modelopt", "version": f"0.0.0+metrale.{metrale_version()}"}


def modelopt_quant_algo(declares_a4: bool) -> str:
    """``NVFP4`` (weights and FP4 activations) or ``W4A16_NVFP4`` (weight-only)."""
    return "NVFP4" if declares_a4 else "W4A16_NVFP4"


def modelopt_hf_quant_config(exclude_modules: list[str], declares_a4: bool) -> dict[str, Any]:
    """The body of ``hf_quant_config.json``."""
    return {
        "producer": producer(),
        "quantization": {
            "quant_algo": modelopt_quant_algo(declares_a4),
            "kv_cache_quant_algo": None,
            "group_size": MODELOPT_GROUP_SIZE,
            "exclude_modules": list(exclude_modules),
        },
    }


def modelopt_quantization_config(exclude_modules: list[str], declares_a4: bool) -> dict[str, Any]:
    """``config.json``'s ``quantization_config`` for ModelOpt NVFP4 (``convert_hf_quant_config_format``)."""
    gs = MODELOPT_GROUP_SIZE
    group: dict[str, Any] = {
        "input_activations": (
            {"dynamic": False, "num_bits": 4, "type": "float", "group_size": gs} if declares_a4 else None
        ),
        "weights": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": gs},
        "targets": ["Linear"],
    }
    return {
        "config_groups": {"group_0": group},
        "ignore": list(exclude_modules),
        "quant_algo": modelopt_quant_algo(declares_a4),
        "group_size": gs,
        "producer": producer(),
        "quant_method": "modelopt",
    }


def compressed_tensors_config(fmt: str, ignore: list[str]) -> dict[str, Any]:
    """``quantization_config`` for ``fp8`` (float-quantized) or ``w8a8`` (int-quantized)."""
    ct_format, typ = CT_FORMATS[fmt]
    args_w = {
        "num_bits": 8,
        "type": typ,
        "symmetric": True,
        "group_size": None,
        "strategy": "channel",
        "block_structure": None,
        "dynamic": False,
        "actorder": None,
        "observer": "minmax",
        "observer_kwargs": {},
    }
    args_a = {
        "num_bits": 8,
        "type": typ,
        "symmetric": True,
        "group_size": None,
        "strategy": "token",
        "block_structure": None,
        "dynamic": True,
        "actorder": None,
        "observer": None,
        "observer_kwargs": {},
    }
    return {
        "quant_method": "compressed-tensors",
        "format": ct_format,
        "quantization_status": "compressed",
        "global_compression_ratio": None,
        "ignore": list(ignore),
        "kv_cache_scheme": None,
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": args_w,
                "input_activations": args_a,
                "output_activations": None,
                "format": ct_format,
            }
        },
        "sparsity_config": {},
    }


def detect(config: dict[str, Any], hf_quant: dict[str, Any] | None) -> str:
    """The layout a folder declares: ``modelopt``, ``compressed-tensors`` or ``none``."""
    if hf_quant is not None and (hf_quant.get("producer") or {}).get("name") == "modelopt":
        return "modelopt"
    q = config.get("quantization_config") or config.get("compression_config")
    if isinstance(q, dict):
        method = str(q.get("quant_method", "")).lower().replace("_", "-")
        if method.startswith("modelopt"):
            return "modelopt"
        if method == "compressed-tensors":
            return "compressed-tensors"
        return method or "unknown"
    return "none"
