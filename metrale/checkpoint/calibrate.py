"""``convert --calibrate TEXTFILE``: activation amax of each quantized Linear from sample text.

The source model runs with transformers on the CPU in its own dtype (``dtype="auto"``), one
sample at a time: the non-empty lines of TEXTFILE, the first ``samples`` of them, each cut to
``SEQ_LEN`` tokens (with the tokenizer's special tokens). A forward pre-hook on every chosen
Linear keeps max |x| over all calls, as ModelOpt's per-tensor input quantizer calibrates its
``_amax``; convert then writes ``input_scale = amax / (6·448)`` (W4A4 NVFP4). Gate/up and
q/k/v read the same input, so fused siblings get equal amax by construction.

transformers (and torch) are needed only here: the ``hf`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from metrale.errors import MetraleError

SEQ_LEN = 512


def read_samples(path: Path, samples: int) -> list[str]:
    """The first ``samples`` non-empty lines of text file ``path`` (stripped of the newline)."""
    if samples < 1:
        raise MetraleError(f"--calibration-samples {samples}: want at least 1")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MetraleError(f"--calibrate {path}: cannot read it as UTF-8 text ({e})") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise MetraleError(f"--calibrate {path}: no non-empty line of text")
    return lines[:samples]


def collect_amax(src: Path, text: Path, modules: Sequence[str], samples: int) -> dict[str, float]:
    """max |input| of each Linear in ``modules`` (HF module names) over the samples of ``text``."""
    lines = read_samples(text, samples)
    try:
        import torch
        import transformers
    except ImportError as e:
        raise MetraleError(
            f"--calibrate needs transformers and torch (pip install 'metrale[hf]'): {e}"
        ) from None
    try:
        tok = transformers.AutoTokenizer.from_pretrained(src)
        model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype="auto").eval()
    except (OSError, ValueError, KeyError) as e:
        raise MetraleError(f"--calibrate: transformers cannot load {src} ({e})") from None
    found = dict(model.named_modules())
    amax: dict[str, float] = {}
    hooks = []
    for m in modules:
        mod = found.get(m)
        if not isinstance(mod, torch.nn.Linear):
            for h in hooks:
                h.remove()
            raise MetraleError(f"--calibrate: {src} has no Linear module {m!r} in its transformers model")

        def hook(_mod: torch.nn.Module, args: tuple[torch.Tensor, ...], name: str = m) -> None:
            v = float(args[0].detach().abs().amax().float())
            amax[name] = max(amax.get(name, 0.0), v)

        hooks.append(mod.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            for line in lines:
                ids = tok(line, return_tensors="pt", truncation=True, max_length=SEQ_LEN)["input_ids"]
                model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    for m in modules:
        v = amax.get(m)
        if v is None or not (v > 0 and v < float("inf")):
            raise MetraleError(
                f"--calibrate: module {m!r} saw input amax {v} over {len(lines)} samples "
                "(want a finite positive amax)"
            )
    return amax
