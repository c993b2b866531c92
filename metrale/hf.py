"""Hugging Face models with metrale FFNs: ``replace_mlps(model, source)``.

Swaps each decoder layer's gated MLP (Llama, Mistral, Qwen2, Qwen3: SiLU; Gemma 1/2/3: GELU in
its tanh form) for a ``MetraleFfn``, from a converted checkpoint folder or ``.gguf`` (anything
``load_ffn_layer`` reads) or by quantizing the model's own weights to a format on the fly; with
``tp_group``, for each rank's ``TpMetraleFfn`` (tensor-parallel MLPs, the same bits).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from metrale.checkpoint.fusion import abs_max
from metrale.checkpoint.load import load_ffn_layer
from metrale.errors import MetraleError, a_kind
from metrale.reference.context import FfnConfig
from metrale.reference.elements import BF16
from metrale.reference.formats.spec import FORMAT_NAMES, pick_format
from metrale.reference.formats.spec import FORMATS as SPECS
from metrale.reference.layer import FfnActivation
from metrale.torch import PROJS, MetraleFfn

#: On-the-fly formats: every name of the vocabulary (w4a4: NVFP4 with a calibrated input_scale).
FORMATS: tuple[str, ...] = tuple(FORMAT_NAMES)
SERVES: dict[str, str | None] = dict.fromkeys(FORMATS)
_ACTIVATIONS = {
    "silu": FfnActivation.SiLU,
    "swish": FfnActivation.SiLU,
    "gelu_pytorch_tanh": FfnActivation.GELU,
    "gelu_new": FfnActivation.GELU,
}


#: The architectures replace_mlps runs (decoder layers at model.model.layers with gated MLPs).
SUPPORTED = (
    "Llama, Mistral, Qwen2, Qwen3 (SiLU) and Gemma (GELU-tanh): decoder layers at model.model.layers "
    "with gated MLPs (gate_proj, up_proj, down_proj, no bias)"
)


def architecture(model: Any) -> str:
    """``model``'s class and transformers ``model_type``, for messages; MetraleError if
    ``model`` is not a transformers model (an nn.Module with a ``config``)."""
    if not isinstance(model, nn.Module) or getattr(model, "config", None) is None:
        raise MetraleError(
            f"replace_mlps: a {type(model).__name__} is not a transformers model (no .config); "
            f"supported: {SUPPORTED}"
        )
    return f"{type(model).__name__} (model_type {getattr(model.config, 'model_type', None)!r})"


def model_activation(config: Any) -> FfnActivation:
    """The MLP activation of a transformers config (Gemma's ``hidden_activation`` first)."""
    name = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
    act = _ACTIVATIONS.get(str(name).lower())
    if act is None:
        raise MetraleError(
            f"model config: activation {name!r} is not supported "
            f"(want one of {', '.join(sorted(_ACTIVATIONS))}; metrale's GELU is the tanh form)"
        )
    return act


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers: ``model.model.layers`` (or ``.language_model.layers``)."""
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None and hasattr(base, "language_model"):
        layers = getattr(base.language_model, "layers", None)
    if layers is None:
        raise MetraleError(f"{type(model).__name__}: no decoder layers found (want model.model.layers)")
    return layers


def decoder_mlps(model: nn.Module) -> list[nn.Module]:
    """The ``mlp`` of every decoder layer, checked to be a gated MLP without bias."""
    mlps = []
    for i, layer in enumerate(decoder_layers(model)):
        mlp = getattr(layer, "mlp", None)
        if mlp is None:
            raise MetraleError(f"{type(model).__name__}: decoder layer {i} has no .mlp")
        if isinstance(mlp, MetraleFfn):
            raise MetraleError(f"decoder layer {i}: the MLP is already a MetraleFfn")
        for p in PROJS:
            if not isinstance(getattr(mlp, p, None), nn.Linear):
                raise MetraleError(
                    f"decoder layer {i}: {type(mlp).__name__} has no Linear {p} "
                    "(want a gated MLP: gate_proj, up_proj, down_proj)"
                )
            if getattr(mlp, p).bias is not None:
                raise MetraleError(f"decoder layer {i}: {p} has a bias, which metrale's FFN does not add")
        mlps.append(mlp)
    return mlps


def rewind_static_cache(cache: Any, pos: torch.Tensor) -> None:
    """Set a transformers StaticCache's write position to ``pos`` (a 1-element tensor on the
    cache's device), in place, so a CUDA graph of a decode step can be replayed: caches that
    keep a ``cumulative_length`` counter advance it inside the step; caches that take the
    position from ``cache_position`` have none and need nothing."""
    for layer in getattr(cache, "layers", []):
        n = getattr(layer, "cumulative_length", None)
        if isinstance(n, torch.Tensor):
            n.copy_(pos.reshape(n.shape).to(n.dtype))


def _host_bf16(w: torch.Tensor, name: str) -> np.ndarray:
    if w.dtype != torch.bfloat16:
        raise MetraleError(f"{name}: dtype {w.dtype}, want torch.bfloat16 (load the model in bf16)")
    return w.detach().cpu().contiguous().view(torch.int16).numpy().view(BF16)


def check_calibration(model: nn.Module, input_ids: Any) -> None:
    """``input_ids``: a non-empty integer tensor [batch, seq] of ids below the model's vocabulary
    size, else MetraleError."""
    where = "replace_mlps(calibration=)"
    if not isinstance(input_ids, torch.Tensor):
        raise MetraleError(f"{where}: a {type(input_ids).__name__}, want a torch integer tensor of token ids")
    if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise MetraleError(f"{where}: dtype {input_ids.dtype}, want integer token ids (torch.long)")
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise MetraleError(f"{where}: shape {list(input_ids.shape)}, want non-empty [batch, seq]")
    vocab = getattr(model.config, "vocab_size", None)
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or (isinstance(vocab, int) and hi >= vocab):
        raise MetraleError(f"{where}: ids span {lo}..{hi}, outside the vocabulary 0..{vocab - 1}")


def calibrate(model: nn.Module, input_ids: torch.Tensor) -> list[tuple[float, float]]:
    """Per decoder layer: (amax of the MLP input, amax of down_proj's input) over one forward."""
    check_calibration(model, input_ids)
    mlps = decoder_mlps(model)
    amax = [[0.0, 0.0] for _ in mlps]
    hooks = []
    for i, mlp in enumerate(mlps):

        def pre(mod: nn.Module, args: tuple[Any, ...], i: int = i, slot: int = 0) -> None:
            amax[i][slot] = max(amax[i][slot], float(args[0].detach().abs().float().max()))

        hooks.append(mlp.register_forward_pre_hook(pre))
        hooks.append(mlp.down_proj.register_forward_pre_hook(lambda m, a, i=i: pre(m, a, i, 1)))
    try:
        with torch.no_grad():
            model(input_ids=input_ids.to(next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
    return [(a, b) for a, b in amax]


def quantized_mlp(
    mlp: nn.Module,
    fmt: str,
    activation: FfnActivation,
    where: str,
    amax: tuple[float, float] | None = None,
) -> MetraleFfn:
    """A MetraleFfn of ``mlp``'s bf16 weights quantized to ``fmt`` (``amax`` for w4a4)."""
    fmt = pick_format(fmt, SERVES, "format")
    inter, hidden = mlp.gate_proj.weight.shape
    srcs = [_host_bf16(getattr(mlp, p).weight, f"{where}.{p}.weight") for p in PROJS]
    # NVFP4 gate and up are fused siblings: one shared weight amax, as ModelOpt and the converter
    # give them (arithmetic.md § fused-siblings), so on-the-fly equals a converted checkpoint.
    shared = max(abs_max(srcs[0]), abs_max(srcs[1]))
    ws = []
    for j, (p, w) in enumerate(zip(PROJS, srcs, strict=True)):
        name = f"{where}.{p}"
        wamax = shared if j < 2 else None
        if fmt == "w4a4":
            if amax is None:
                raise MetraleError(f"{where}: format w4a4 needs the calibrated input amax")
            ws.append(
                SPECS["nvfp4"].quantize(w, name=name, input_amax=amax[0 if j < 2 else 1], weight_amax=wamax)
            )
        elif fmt == "nvfp4":
            ws.append(SPECS[fmt].quantize(w, name=name, weight_amax=wamax))
        else:
            ws.append(SPECS[fmt].quantize(w, name=name))
    return MetraleFfn.from_weights(FfnConfig(int(hidden), int(inter)), ws, activation)


def _group_max(amaxes: list[tuple[float, float]], group: Any) -> list[tuple[float, float]]:
    """The element-wise max of every rank's calibration amaxes (an all-reduce on the group's
    device: CUDA for NCCL)."""
    import torch.distributed as dist

    from metrale.distributed.agree import process_group

    group = process_group(group)
    dev = "cpu" if "gloo" in dist.get_backend(group) else f"cuda:{torch.cuda.current_device()}"
    t = torch.tensor(amaxes, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [(float(a), float(b)) for a, b in t.cpu().tolist()]


def replace_mlps(
    model: nn.Module,
    source: str | os.PathLike[str],
    *,
    calibration: torch.Tensor | None = None,
    tp_group: Any = None,
    tp_split: str = "n",
) -> nn.Module:
    """Replace every decoder MLP of ``model`` by a MetraleFfn, in place; returns ``model``.

    ``source``: a format name (``nvfp4``, ``w4a4``, ``w8a8``, ``q2_0``, ``fp8``, ``bf16``) to
    quantize the model's own bf16 weights, or a checkpoint path of the same model (a metrale /
    ModelOpt / compressed-tensors folder or a GGUF file). ``calibration``: input ids whose
    activation amax sets the W4A4 input scales. The new modules sit on the old MLPs' device.

    ``tp_group``: a ``torch.distributed`` process group (or 1-D ``DeviceMesh``;
    ``torch.distributed.group.WORLD`` for the default one) to run the MLPs tensor parallel:
    call it on every rank of the group with the same model and arguments; each MLP becomes the
    rank's ``TpMetraleFfn`` (split ``tp_split``, arithmetic.md § tp) with the single-device
    bits. A checkpoint ``source`` is read slice by slice (safetensors folders; GGUF is
    refused); a format quantizes the whole MLP and keeps the rank's slices. The W4A4
    calibration amaxes are reduced (max) over the group, so every rank quantizes alike.
    """
    arch = architecture(model)
    try:
        layers = decoder_layers(model)
        mlps = decoder_mlps(model)
        act = model_activation(model.config)
    except MetraleError as e:
        why = str(e).removeprefix(f"{type(model).__name__}: ")
        raise MetraleError(f"{arch}: {why}; supported: {SUPPORTED}") from None
    for i, mlp in enumerate(mlps):
        if mlp.gate_proj.weight.device.type == "meta":
            raise MetraleError(
                f"{arch}: model.layers.{i}.mlp is on the meta device (no weights to quantize or to "
                "check against; load the weights first)"
            )
    if not isinstance(source, (str, os.PathLike)):
        raise MetraleError(
            f"replace_mlps: source {source!r} is {a_kind(source)}, want a format "
            f"({', '.join(FORMATS)}) or a checkpoint path"
        )
    is_format = isinstance(source, str) and source in FORMATS
    if not is_format:
        p = Path(source)
        if not p.exists():
            raise MetraleError(f"{p}: not a format ({', '.join(FORMATS)}) and no such checkpoint")
    amaxes: list[Any] = [None] * len(mlps)
    if is_format and source == "w4a4":
        if calibration is None:
            raise MetraleError("format w4a4 needs calibration inputs (replace_mlps(..., calibration=ids))")
        amaxes = calibrate(model, calibration)
        if tp_group is not None:
            amaxes = _group_max(amaxes, tp_group)
    new = []
    for i, mlp in enumerate(mlps):
        where = f"model.layers.{i}.mlp"
        if is_format:
            ffn = quantized_mlp(mlp, str(source), act, where, amaxes[i])
            if tp_group is not None:
                ffn = ffn.tensor_parallel(tp_group, tp_split)
        else:
            if tp_group is not None:
                from metrale.distributed.module import TpMetraleFfn

                ffn = TpMetraleFfn.from_checkpoint(source, i, tp_group, tp_split)
            else:
                ffn = MetraleFfn.from_layer(load_ffn_layer(source, layer=i, backend="reference"))
            inter, hidden = mlp.gate_proj.weight.shape
            got = (ffn.config.hidden_size, ffn.config.intermediate_size)
            if got != (hidden, inter):
                raise MetraleError(
                    f"{source}: layer {i} FFN is hidden={got[0]}, intermediate={got[1]}; "
                    f"the model's is hidden={hidden}, intermediate={inter}"
                )
            if ffn.activation != act:
                raise MetraleError(
                    f"{source}: layer {i} activation {ffn.activation.value}, the model's is {act.value}"
                )
        new.append(ffn.to(mlp.gate_proj.weight.device))
    for layer, ffn in zip(layers, new, strict=True):
        layer.mlp = ffn
    return model
