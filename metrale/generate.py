"""Greedy generation with a transformers model whose decoder MLPs are metrale FFNs.

Everything but the FFNs runs in transformers (bf16); tokens/s is timed over the whole greedy
loop; the FFN's share of the step time comes from a second pass with synchronising hooks
around each MLP (so it does not slow the first).
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from metrale.errors import MetraleError

#: config.json keys that fix a model's shapes: a checkpoint of the model has the same.
SHAPE_KEYS = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
)
#: config.json keys that give the context length, in the order transformers' models use them.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


@dataclass
class GenerateResult:
    """The generated text and ids, tokens/s, the FFN's share of the decode step time, and
    (with ``compare``) the original MLPs' ids and the first step where they diverge."""

    text: str
    ids: list[int]
    device: str
    tokens_per_s: float
    ffn_share: float
    reference_ids: list[int] | None = None
    first_divergence: int | None = None
    notes: list[str] = field(default_factory=list)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@functools.cache
def _cache_keyword(forward: Any) -> str:
    """The forward's keyword for the KV cache: ``cache`` (transformers >= 5.24, where
    ``past_key_values`` warns) or ``past_key_values`` (before)."""
    try:
        params = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def greedy(model: Any, ids: torch.Tensor, n: int) -> list[int]:
    """``n`` greedy tokens after ``ids`` [1, T] (prefill, then one token a step with a cache)."""
    from transformers import DynamicCache

    kw = {_cache_keyword(type(model).forward): DynamicCache(), "use_cache": True}
    out: list[int] = []
    with torch.no_grad():
        logits = model(ids, **kw).logits
        for _ in range(n):
            tok = int(logits[0, -1].float().argmax())
            out.append(tok)
            if len(out) == n:
                break
            step = torch.tensor([[tok]], device=ids.device)
            logits = model(step, **kw).logits
    return out


def parse_device(device: str | None) -> torch.device:
    """``--device`` as a torch device: ``cpu``, ``cuda`` or ``cuda:N`` of a device this torch
    sees (None: CUDA where available, else the CPU); anything else is a MetraleError."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise MetraleError(f"--device {device!r}: metrale runs on cpu or cuda[:N] (want cpu or cuda)")
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            cu = torch.version.cuda
            build = "a CPU-only build" if cu is None else f"built for CUDA {cu}"
            raise MetraleError(f"--device {device!r}: no CUDA device (torch {torch.__version__}, {build})")
        if dev.index is not None and dev.index >= count:
            raise MetraleError(f"--device {device!r}: this machine has {count} CUDA device(s)")
    return dev


def _read_config(path: Path, what: str) -> dict[str, Any]:
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MetraleError(f"{path}: {what} config.json cannot be read ({e})") from None
    if not isinstance(cfg, dict):
        raise MetraleError(f"{path}: {what} config.json is not a JSON object")
    return cfg


def converted_layout(folder: Path, cfg: dict[str, Any]) -> str | None:
    """What marks ``folder`` as a converted (quantized) checkpoint, or None for a plain model."""
    from metrale.checkpoint.layouts import HF_QUANT_CONFIG

    q = cfg.get("quantization_config") or cfg.get("compression_config")
    if isinstance(q, dict):
        return f"quantization_config {q.get('quant_method', '?')}"
    if (folder / HF_QUANT_CONFIG).is_file():
        return HF_QUANT_CONFIG
    if any(folder.glob("*.gguf")):
        return "a GGUF file"
    return None


def context_length(cfg: dict[str, Any]) -> tuple[str, int] | None:
    """(key, value) of the model's context length from its config.json, None where it gives none."""
    for c in (cfg, cfg.get("text_config")):
        if isinstance(c, dict):
            for k in CONTEXT_KEYS:
                v = c.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    return k, v
    return None


def check_same_model(checkpoint: Path, cfg: dict[str, Any], model: Any) -> None:
    """Refuse a ``--checkpoint`` converted from another model: its config.json's shapes
    (``SHAPE_KEYS``) must equal the model's, and (cheap, and different between any two trained
    models) the 1-D tensors it copied unchanged (norms, biases; safetensors
    folders), rounded to the model's dtype, must equal the model's bit for bit."""
    folder = checkpoint if checkpoint.is_dir() else checkpoint.parent
    cpath = folder / "config.json"
    if cpath.is_file():
        theirs = _read_config(cpath, "the --checkpoint's")
        for k in SHAPE_KEYS:
            if k in theirs and k in cfg and theirs[k] != cfg[k]:
                raise MetraleError(
                    f"--checkpoint {checkpoint}: {k} {theirs[k]} but the model's is {cfg[k]}; "
                    "it was converted from another model"
                )
    if not checkpoint.is_dir() or not any(checkpoint.glob("*.safetensors")):
        return
    from metrale.checkpoint.io import HfFolder

    own = model.state_dict()
    with HfFolder(checkpoint, need_config=False) as f:
        for n in f.names():
            mine = own.get(n)
            a = f.tensor(n)
            if mine is None or a.ndim != 1 or not (a.dtype.kind == "f" or str(a.dtype) == "bfloat16"):
                continue
            b = mine.detach().cpu()
            if tuple(a.shape) != tuple(b.shape):
                raise MetraleError(
                    f"--checkpoint {checkpoint}: {n} has shape {list(a.shape)}, the model's "
                    f"{list(b.shape)}; it was converted from another model"
                )
            theirs = torch.from_numpy(a.astype(np.float32)).to(b.dtype)
            if not torch.equal(theirs.view(torch.uint8), b.contiguous().view(torch.uint8)):
                raise MetraleError(
                    f"--checkpoint {checkpoint}: {n} differs from the model's; "
                    "it was converted from another model"
                )


def ffn_share(model: Any, ids: torch.Tensor, n: int) -> float:
    """The MLPs' fraction of the greedy loop's time, from synchronising timers around each MLP."""
    from metrale.hf import decoder_layers

    dev = ids.device
    spent = [0.0]
    t0: list[float] = []

    def pre(mod: Any, args: Any) -> None:
        _sync(dev)
        t0.append(time.perf_counter())

    def post(mod: Any, args: Any, out: Any) -> None:
        _sync(dev)
        spent[0] += time.perf_counter() - t0.pop()

    mlps = [layer.mlp for layer in decoder_layers(model)]
    hooks = [m.register_forward_pre_hook(pre) for m in mlps] + [m.register_forward_hook(post) for m in mlps]
    try:
        _sync(dev)
        start = time.perf_counter()
        greedy(model, ids, n)
        _sync(dev)
        total = time.perf_counter() - start
    finally:
        for h in hooks:
            h.remove()
    return spent[0] / total if total > 0 else 0.0


def generate(
    model_dir: str | Path,
    fmt: str,
    prompt: str,
    max_new_tokens: int,
    *,
    compare: bool = False,
    checkpoint: str | Path | None = None,
    device: str | None = None,
) -> GenerateResult:
    """Load ``model_dir`` (bf16) with its tokenizer, replace its MLPs (``fmt`` on the fly, or
    ``checkpoint``) and generate greedily on ``device`` (CUDA where available, else CPU).

    Refused with a MetraleError, before the model loads where possible: a ``device`` other
    than cpu / cuda[:N] of this torch, a converted checkpoint as ``model_dir`` (it belongs in
    ``checkpoint``), a ``checkpoint`` of another model (``check_same_model``), and a prompt
    plus ``max_new_tokens`` beyond the config's context length (``max_position_embeddings``)."""
    try:
        import transformers
    except ImportError:
        raise MetraleError("metrale generate needs transformers: pip install 'metrale[hf]'") from None
    from metrale.hf import SERVES, replace_mlps
    from metrale.reference.formats.spec import pick_format

    fmt = pick_format(fmt, SERVES, "--format")
    if max_new_tokens < 1:
        raise MetraleError(f"--max-new-tokens {max_new_tokens}: want >= 1")
    p = Path(model_dir)
    if not (p / "config.json").is_file():
        raise MetraleError(f"{p}: no config.json (want a Hugging Face model folder)")
    cfg = _read_config(p / "config.json", "MODEL_DIR's")
    marked = converted_layout(p, cfg)
    if marked is not None:
        raise MetraleError(
            f"{p}: a converted checkpoint ({marked}); pass the bf16 model it came from as MODEL_DIR "
            f"and this folder as --checkpoint {p}"
        )
    ctx = context_length(cfg)
    if ctx is not None and max_new_tokens >= ctx[1]:
        raise MetraleError(
            f"--max-new-tokens {max_new_tokens}: beyond the model's context ({ctx[0]} {ctx[1]})"
        )
    ck = None if checkpoint is None else Path(checkpoint)
    if ck is not None and not ck.exists():
        raise MetraleError(f"--checkpoint {ck}: no such file or folder")
    dev = parse_device(device)
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # one line on stderr, as the other commands
    try:
        tok = transformers.AutoTokenizer.from_pretrained(p)
        model = transformers.AutoModelForCausalLM.from_pretrained(p, dtype=torch.bfloat16).to(dev).eval()
    except (OSError, ValueError) as e:
        raise MetraleError(f"{p}: cannot load the model or tokenizer ({str(e).splitlines()[0]})") from None
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    ids = tok(prompt, return_tensors="pt").input_ids.to(dev)
    if ids.shape[1] == 0:
        raise MetraleError("--prompt: the tokenizer gives no tokens for it")
    if ctx is not None and ids.shape[1] + max_new_tokens > ctx[1]:
        raise MetraleError(
            f"--max-new-tokens {max_new_tokens}: the prompt's {ids.shape[1]} tokens + {max_new_tokens} "
            f"exceed the model's context ({ctx[0]} {ctx[1]})"
        )
    if ck is not None:
        check_same_model(ck, cfg, model)
    ref_ids = greedy(model, ids, max_new_tokens) if compare else None
    replace_mlps(model, ck if ck is not None else fmt, calibration=ids)
    greedy(model, ids, 1)  # build the layers (and compile the kernels) outside the timing
    _sync(dev)
    t = time.perf_counter()
    out = greedy(model, ids, max_new_tokens)
    _sync(dev)
    secs = time.perf_counter() - t
    share = ffn_share(model, ids, max_new_tokens)
    res = GenerateResult(
        text=tok.decode(out, skip_special_tokens=True),
        ids=out,
        device=str(dev),
        tokens_per_s=len(out) / secs if secs > 0 else float("inf"),
        ffn_share=share,
        reference_ids=ref_ids,
    )
    if ref_ids is not None:
        res.first_divergence = next(
            (i for i, (a, b) in enumerate(zip(out, ref_ids, strict=True)) if a != b), None
        )
    return res
