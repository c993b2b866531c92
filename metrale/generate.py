"""Greedy generation with a transformers model whose decoder MLPs are metrale FFNs.

Everything but the FFNs runs in transformers (bf16); tokens/s is timed over the whole greedy
loop; the FFN's share of the step time comes from a second pass with synchronising hooks
around each MLP (so it does not slow the first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from metrale.errors import MetraleError


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


def greedy(model: Any, ids: torch.Tensor, n: int) -> list[int]:
    """``n`` greedy tokens after ``ids`` [1, T] (prefill, then one token a step with a cache)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    out: list[int] = []
    with torch.no_grad():
        logits = model(ids, past_key_values=cache, use_cache=True).logits
        for _ in range(n):
            tok = int(logits[0, -1].float().argmax())
            out.append(tok)
            if len(out) == n:
                break
            step = torch.tensor([[tok]], device=ids.device)
            logits = model(step, past_key_values=cache, use_cache=True).logits
    return out


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
    ``checkpoint``) and generate greedily on ``device`` (CUDA where available, else CPU)."""
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
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        tok = transformers.AutoTokenizer.from_pretrained(p)
        model = transformers.AutoModelForCausalLM.from_pretrained(p, dtype=torch.bfloat16).to(dev).eval()
    except (OSError, ValueError) as e:
        raise MetraleError(f"{p}: cannot load the model or tokenizer ({e})") from None
    ids = tok(prompt, return_tensors="pt").input_ids.to(dev)
    if ids.shape[1] == 0:
        raise MetraleError("--prompt: the tokenizer gives no tokens for it")
    ref_ids = greedy(model, ids, max_new_tokens) if compare else None
    replace_mlps(model, checkpoint if checkpoint is not None else fmt, calibration=ids)
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
