"""``metrale generate`` on a tiny local Llama with a word-level tokenizer (no downloads)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from typer.testing import CliRunner

from metrale.checkpoint.example import TINY, tiny_model
from metrale.cli import app

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


def _one_line_error(r, *needles: str) -> str:
    """The CLI failed with exit 1 and exactly one line on stderr holding every needle."""
    assert r.exit_code == 1, (r.exit_code, r.output[-2000:], repr(r.exception))
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-3000:]
    assert "Traceback" not in r.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return _model_dir(tmp_path_factory.mktemp("gen"))


@pytest.mark.parametrize(
    ("device", "needle"),
    [
        ("tpu", "--device 'tpu'"),
        ("meta", "--device 'meta'"),
        ("mps", "--device 'mps'"),
        ("cuda:x", "--device 'cuda:x'"),
    ],
)
def test_generate_bad_device_is_one_line(model_dir, device: str, needle: str) -> None:
    r = CliRunner().invoke(app, ["generate", str(model_dir), "-n", "2", "--device", device])
    _one_line_error(r, needle, "want cpu or cuda")


def test_generate_cuda_without_cuda_torch_is_one_line(model_dir) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA and a GPU")
    r = CliRunner().invoke(app, ["generate", str(model_dir), "-n", "2", "--device", "cuda"])
    _one_line_error(r, "--device 'cuda'", "no CUDA device")


@pytest.mark.parametrize("n", ["99999999999999999999999", "200000", "62"])
def test_generate_beyond_the_context_is_one_line(model_dir, n: str) -> None:
    # TINY's max_position_embeddings is 64; "the capital of" is 3 tokens, 3 + 62 > 64
    r = CliRunner().invoke(app, ["generate", str(model_dir), "-p", "the capital of", "-n", n])
    _one_line_error(r, f"--max-new-tokens {n}", "max_position_embeddings 64")


def test_generate_up_to_the_context_runs(model_dir) -> None:
    r = CliRunner().invoke(
        app, ["generate", str(model_dir), "-f", "bf16", "-p", "the capital of", "-n", "61"]
    )
    assert r.exit_code == 0, (r.output[-2000:], repr(r.exception))
    assert "61 tokens on cpu" in " ".join(r.output.split())


def test_generate_converted_folder_as_model_dir_says_checkpoint(model_dir, tmp_path) -> None:
    from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint

    bare = tmp_path / "bare"  # GGUF writes no word-level tokenizer: the q2_0 source goes without
    tiny_model("llama").save_pretrained(bare)
    for fmt in ("nvfp4", "fp8", "q2_0"):
        conv = tmp_path / fmt
        convert_checkpoint(bare if fmt == "q2_0" else model_dir, conv, ConvertOptions(fmt, ffn_only=True))
        r = CliRunner().invoke(app, ["generate", str(conv), "-n", "2"])
        _one_line_error(r, str(conv), "converted checkpoint", "--checkpoint")


def test_generate_checkpoint_of_another_model_is_refused(model_dir, tmp_path) -> None:
    from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint

    other = tmp_path / "other"
    tiny_model("llama", seed=1).save_pretrained(other)  # same shapes, other weights
    convert_checkpoint(other, tmp_path / "other-fp8", ConvertOptions("fp8", ffn_only=True))
    r = CliRunner().invoke(
        app, ["generate", str(model_dir), "-n", "2", "--checkpoint", str(tmp_path / "other-fp8")]
    )
    _one_line_error(r, "--checkpoint", "layernorm.weight differs from the model's")
    wider = tmp_path / "wider"
    tiny_model("llama", intermediate_size=256).save_pretrained(wider)
    convert_checkpoint(wider, tmp_path / "wider-q2", ConvertOptions("q2_0", ffn_only=True))
    r = CliRunner().invoke(
        app, ["generate", str(model_dir), "-n", "2", "--checkpoint", str(tmp_path / "wider-q2/model.gguf")]
    )
    _one_line_error(r, "--checkpoint", "intermediate_size 256", "the model's is 128")
    # its own conversion is accepted
    convert_checkpoint(model_dir, tmp_path / "own", ConvertOptions("fp8", ffn_only=True))
    own = tmp_path / "own"
    r = CliRunner().invoke(app, ["generate", str(model_dir), "-n", "2", "--checkpoint", str(own)])
    assert r.exit_code == 0, (r.output[-2000:], repr(r.exception))


def test_generate_warns_nothing(model_dir) -> None:
    import warnings

    from metrale.generate import generate

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        r = generate(model_dir, "bf16", "the capital of", 2, device="cpu")
    assert len(r.ids) == 2
