"""replace_mlps refuses what it cannot run with one-line MetraleErrors: a module
that is not a transformers model, a source that is neither a format nor a path, a model on
the meta device, architectures without gated decoder MLPs, and bad W4A4 calibration ids."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from metrale.checkpoint.example import tiny_model
from metrale.errors import MetraleError
from metrale.hf import replace_mlps
from tests.torch_models import unsupported_model

SUPPORTED = r"supported: Llama, Mistral, Qwen2, Qwen3 \(SiLU\) and Gemma"


def _one_line(f, pattern: str) -> None:
    with pytest.raises(MetraleError, match=pattern) as e:
        f()
    assert len(str(e.value).splitlines()) == 1, str(e.value)


def test_not_a_model_bad_sources_and_meta() -> None:
    _one_line(
        lambda: replace_mlps(nn.Linear(4, 4), "nvfp4"), "a Linear is not a transformers model.*" + SUPPORTED
    )
    model = tiny_model("llama")
    for bad in (123, None):
        _one_line(lambda bad=bad: replace_mlps(model, bad), f"source {bad!r} is an? .*want a format")
    meta = tiny_model("llama").to("meta")
    _one_line(lambda: replace_mlps(meta, "nvfp4"), r"model\.layers\.0\.mlp is on the meta device")


@pytest.mark.parametrize(("family", "arch"), [("gpt2", "GPT2LMHeadModel"), ("bert", "BertForMaskedLM")])
def test_unsupported_architectures_are_named(family: str, arch: str) -> None:
    model = unsupported_model(family)
    _one_line(lambda: replace_mlps(model, "nvfp4"), rf"^{arch} \(model_type '{family}'\): .*" + SUPPORTED)


def test_bad_calibration_ids() -> None:
    model = tiny_model("qwen3")
    cases = [
        (torch.zeros(1, 0, dtype=torch.long), r"shape \[1, 0\], want non-empty \[batch, seq\]"),
        (torch.tensor([[1, 2, 96]]), r"ids span 1\.\.96, outside the vocabulary 0\.\.95"),
        (torch.tensor([[-1, 2]]), r"ids span -1\.\.2, outside the vocabulary"),
        (torch.tensor([[1.0, 2.0]]), r"dtype torch\.float32, want integer token ids"),
        ([[1, 2, 3]], r"a list, want a torch integer tensor"),
    ]
    for ids, pattern in cases:
        _one_line(lambda ids=ids: replace_mlps(model, "w4a4", calibration=ids), pattern)
    assert all(not hasattr(layer.mlp, "format") for layer in model.model.layers)  # left as it was


def test_tiny_model_refuses_an_unknown_family() -> None:
    with pytest.raises(
        MetraleError, match=r"tiny model family 'gpt2': want one of llama, qwen3, gemma, mistral, qwen2"
    ):
        tiny_model("gpt2")
