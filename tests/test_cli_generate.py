"""``metrale generate`` on a tiny local Llama with a word-level tokenizer (no downloads)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from typer.testing import CliRunner

from metrale.cli import app
from tests.torch_models import TINY, tiny_model

WORDS = ["the", "capital", "of", "france", "is", "paris", "a", "city"]


def _model_dir(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[EOS]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    vocab.update({f"w{i}": i for i in range(len(vocab), TINY["vocab_size"])})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    d = tmp_path / "tiny-llama"
    tiny_model("llama").save_pretrained(d)
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="[EOS]").save_pretrained(d)
    return d


def test_generate_compare(tmp_path) -> None:
    d = _model_dir(tmp_path)
    r = CliRunner().invoke(
        app, ["generate", str(d), "--format", "w8a8", "--prompt", "the capital of", "-n", "4", "--compare"]
    )
    assert r.exit_code == 0, (r.output[-2000:], repr(r.exception))
    text = " ".join(r.output.split())  # rich wraps long lines at the console width
    assert "4 tokens on cpu, FFNs w8a8" in text and "tokens/s" in text
    assert (
        "--compare: the original MLPs give the same 4 tokens" in text
        or "--compare: tokens diverge at" in text
    )


def test_generate_errors(tmp_path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["generate", str(tmp_path / "none"), "--prompt", "x"])
    assert r.exit_code == 1 and "no config.json" in r.output and "Traceback" not in r.output
    d = _model_dir(tmp_path)
    r = runner.invoke(app, ["generate", str(d), "--format", "int3"])
    assert r.exit_code == 1 and "--format 'int3': unknown format" in r.output
    r = runner.invoke(app, ["generate", str(d), "-n", "0"])
    assert r.exit_code == 1 and "--max-new-tokens 0" in r.output
