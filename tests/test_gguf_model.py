"""GGUF files llama.cpp can load as models: hyper-parameters, RoPE and the tokenizer, checked
against transformers' own reading of the same source (tiny local models, no downloads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import (
    make_example_checkpoint,
    make_hf_model,
    tiny_model,
    write_example_tokenizer,
)
from metrale.checkpoint.gguf_q2 import GGUF_NAME
from metrale.errors import MetraleError

transformers = pytest.importorskip("transformers")
T = gguf.TokenType


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("gguf-models")
    out = {}
    for family in ("llama", "qwen3"):
        src = make_hf_model(root / family, family)
        dst = root / f"{family}-q2"
        convert_checkpoint(src, dst, ConvertOptions("q2_0"))
        out[family] = (src, dst)
    return out


def fields(path: Path) -> dict[str, object]:
    r = gguf.GGUFReader(path / GGUF_NAME)
    return {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}


def test_qwen3_hyper_parameters(models: dict[str, tuple[Path, Path]]) -> None:
    src, dst = models["qwen3"]
    cfg = transformers.AutoConfig.from_pretrained(src)
    assert "rope_theta" not in json.loads((src / "config.json").read_text())  # transformers 5 layout
    f = fields(dst)
    assert f["general.architecture"] == "qwen3"
    assert f["general.file_type"] == 41  # llama.h LLAMA_FTYPE_MOSTLY_Q2_0
    assert cfg.head_dim * cfg.num_attention_heads != cfg.hidden_size
    assert f["qwen3.attention.key_length"] == f["qwen3.attention.value_length"] == cfg.head_dim == 128
    assert f["qwen3.rope.freq_base"] == cfg.rope_parameters["rope_theta"] == 1e6
    assert f["qwen3.attention.head_count"] == cfg.num_attention_heads
    assert f["qwen3.attention.head_count_kv"] == cfg.num_key_value_heads
    assert f["qwen3.embedding_length"] == cfg.hidden_size
    assert f["qwen3.feed_forward_length"] == cfg.intermediate_size
    assert f["qwen3.block_count"] == cfg.num_hidden_layers
    assert f["qwen3.context_length"] == cfg.max_position_embeddings
    assert np.float32(f["qwen3.attention.layer_norm_rms_epsilon"]) == np.float32(cfg.rms_norm_eps)
    names = {t.name for t in gguf.GGUFReader(dst / GGUF_NAME).tensors}
    assert "blk.1.attn_q_norm.weight" in names and "output.weight" not in names  # tied embeddings


def test_llama3_rope_factors_equal_transformers(models: dict[str, tuple[Path, Path]]) -> None:
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    src, dst = models["llama"]
    cfg = transformers.AutoConfig.from_pretrained(src)
    f = fields(dst)
    assert f["llama.rope.freq_base"] == 500000.0 and f["llama.rope.dimension_count"] == 32
    assert "llama.rope.scaling.type" not in f  # llama3 scaling is the rope_freqs tensor
    by = {t.name: t for t in gguf.GGUFReader(dst / GGUF_NAME).tensors}
    got = np.asarray(by["rope_freqs.weight"].data, dtype=np.float32)
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    base = 1.0 / (500000.0 ** (torch.arange(0, 32, 2, dtype=torch.int64).float() / 32))
    want = (base / scaled).numpy()
    # both sides are float32 chains of at most 4 roundings (pow, divide, the factor, the cast),
    # each within 2^-24 relative: the two differ by at most 8 * 2^-24 relative
    np.testing.assert_allclose(got, want, rtol=8 * 2.0**-24, atol=0)
    assert got[0] == 1.0 and got[-1] == 8.0  # the high- and low-frequency ends: 1 and the factor


@pytest.mark.parametrize("family,pre", [("llama", "llama-bpe"), ("qwen3", "qwen2")])
def test_tokenizer_equals_the_hf_tokenizer(
    models: dict[str, tuple[Path, Path]], family: str, pre: str
) -> None:
    src, dst = models[family]
    tok = transformers.AutoTokenizer.from_pretrained(src)
    f = fields(dst)
    n = len(tok)
    assert f["tokenizer.ggml.model"] == "gpt2" and f["tokenizer.ggml.pre"] == pre
    tokens, types = f["tokenizer.ggml.tokens"], f["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == 320 > n
    assert tokens[:n] == tok.convert_ids_to_tokens(list(range(n)))
    assert tokens[n:] == [f"[PAD{i}]" for i in range(n, 320)]
    special = set(tok.all_special_ids) | {tok.convert_tokens_to_ids(t) for t in tok.get_added_vocab()}
    assert types == [T.CONTROL if i in special else T.NORMAL if i < n else T.UNUSED for i in range(320)]
    merges = json.loads((src / "tokenizer.json").read_text())["model"]["merges"]
    assert f["tokenizer.ggml.merges"] == [" ".join(m) for m in merges] and len(merges) == n - 256 - len(
        special
    )
    assert f["tokenizer.ggml.eos_token_id"] == tok.eos_token_id == 2
    assert f["tokenizer.ggml.padding_token_id"] == tok.pad_token_id == 0
    if tok.bos_token_id is None:
        assert "tokenizer.ggml.bos_token_id" not in f
    else:
        assert f["tokenizer.ggml.bos_token_id"] == tok.bos_token_id == 3
    tc = json.loads((src / "tokenizer_config.json").read_text())
    assert f["tokenizer.ggml.add_bos_token"] is tc["add_bos_token"] is (family == "llama")
    assert f["tokenizer.chat_template"] == tok.chat_template


def test_no_tokenizer_files_no_tokenizer_keys(tmp_path: Path) -> None:
    src = make_example_checkpoint(tmp_path / "s", hidden=64, intermediate=128, layers=1)
    convert_checkpoint(src, tmp_path / "q", ConvertOptions("q2_0"))
    f = fields(tmp_path / "q")
    assert not any(k.startswith("tokenizer.") for k in f)
    assert f["llama.attention.key_length"] == 16 and f["llama.rope.freq_base"] == 10000.0


def test_unknown_pre_tokenizer_or_vocab_overflow_refused_without_litter(tmp_path: Path) -> None:
    src = make_example_checkpoint(tmp_path / "s", hidden=64, intermediate=128, layers=1, vocab=256)
    write_example_tokenizer(src, style="qwen2", vocab_size=256 + 3 + 8)
    with pytest.raises(
        MetraleError, match=r"tokenizer\.json: token id 266 is not below config\.json's vocab_size 256"
    ):
        convert_checkpoint(src, tmp_path / "q", ConvertOptions("q2_0"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
    src = make_example_checkpoint(tmp_path / "s2", hidden=64, intermediate=128, layers=1, vocab=320)
    write_example_tokenizer(src, style="qwen2", vocab_size=256 + 3 + 8)
    tj = json.loads((src / "tokenizer.json").read_text())
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+"
    (src / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(
        MetraleError, match=r"tokenizer\.json: pre-tokenizer pattern '\\\\p\{L\}\+\|\\\\s\+' is not"
    ):
        convert_checkpoint(src, tmp_path / "q", ConvertOptions("q2_0"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s", "s2"]


def test_rope_parameters_and_scaling_keys(tmp_path: Path) -> None:
    src = make_example_checkpoint(tmp_path / "s", hidden=64, intermediate=128, layers=1)
    cfg = json.loads((src / "config.json").read_text())
    del cfg["rope_theta"]
    cfg["rope_parameters"] = {
        "rope_type": "yarn",
        "rope_theta": 250000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 512,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
    }
    (src / "config.json").write_text(json.dumps(cfg))
    convert_checkpoint(src, tmp_path / "q", ConvertOptions("q2_0"))
    f = fields(tmp_path / "q")
    assert f["llama.rope.freq_base"] == 250000.0
    assert f["llama.rope.scaling.type"] == "yarn" and f["llama.rope.scaling.factor"] == 4.0
    assert f["llama.rope.scaling.original_context_length"] == 512
    assert f["llama.rope.scaling.yarn_beta_fast"] == 32.0 and f["llama.rope.scaling.yarn_beta_slow"] == 1.0
    cfg["rope_parameters"] = {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}
    (src / "config.json").write_text(json.dumps(cfg))
    convert_checkpoint(src, tmp_path / "l", ConvertOptions("q2_0"))
    f = fields(tmp_path / "l")
    assert f["llama.rope.scaling.type"] == "linear" and f["llama.rope.scaling.factor"] == 2.0
    cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 1e4}
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        MetraleError, match=r"config\.json: rope_type 'longrope': metrale writes no GGUF RoPE scaling for it$"
    ):
        convert_checkpoint(src, tmp_path / "r", ConvertOptions("q2_0"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l", "q", "s"]


def test_llama_style_sentencepiece_tokenizer_json(tmp_path: Path) -> None:
    """A Llama-2 / Mistral-7B style tokenizer.json (BPE with byte fallback, ▁ for spaces) goes
    through gguf.LlamaHfVocab: model llama, byte tokens BYTE, specials CONTROL, scores."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    from metrale.checkpoint.example import EXAMPLE_TEXT

    src = make_example_checkpoint(tmp_path / "s", hidden=64, intermediate=128, layers=1, vocab=400)
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.train_from_iterator(
        [EXAMPLE_TEXT] * 4,
        trainers.BpeTrainer(vocab_size=380, special_tokens=specials + byte_tokens, show_progress=False),
    )
    tj = json.loads(tok.to_str())
    for a in tj["added_tokens"]:  # byte tokens are plain vocabulary entries in Llama 2's file
        a["special"] = a["content"] in specials
    tj["added_tokens"] = [a for a in tj["added_tokens"] if a["content"] in specials]
    (src / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    (src / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "LlamaTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": True,
                "add_eos_token": False,
            }
        ),
        encoding="utf-8",
    )
    hf = transformers.AutoTokenizer.from_pretrained(src)
    convert_checkpoint(src, tmp_path / "q", ConvertOptions("q2_0"))
    f = fields(tmp_path / "q")
    n = len(hf)
    assert f["tokenizer.ggml.model"] == "llama" and f["tokenizer.ggml.pre"] == "default"
    assert f["tokenizer.ggml.tokens"][:n] == hf.convert_ids_to_tokens(list(range(n)))
    assert f["tokenizer.ggml.tokens"][n:] == [f"[PAD{i}]" for i in range(n, 400)]
    types = f["tokenizer.ggml.token_type"]
    assert [types[i] for i in range(3)] == [T.CONTROL] * 3
    assert all(types[3 + b] == T.BYTE for b in range(256))
    assert all(t == T.NORMAL for t in types[259:n]) and all(t == T.UNUSED for t in types[n:])
    assert all(s == -1000.0 for s in f["tokenizer.ggml.scores"])  # exact in f32
    assert (f["tokenizer.ggml.bos_token_id"], f["tokenizer.ggml.eos_token_id"]) == (
        hf.bos_token_id,
        hf.eos_token_id,
    )
    assert f["tokenizer.ggml.unknown_token_id"] == hf.unk_token_id == 0
    assert f["tokenizer.ggml.add_bos_token"] is True


def test_gguf_package_lacks_q2_0_and_inspect_reads_it(models: dict[str, tuple[Path, Path]]) -> None:
    """gguf 0.19 alone cannot read type 42 (why metrale registers it); metrale inspect can."""
    _, dst = models["qwen3"]
    r = subprocess.run(
        [sys.executable, "-c", f"import gguf; gguf.GGUFReader({str(dst / GGUF_NAME)!r})"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode != 0 and "42" in r.stderr, r.stderr[-500:]
    r = subprocess.run(
        [sys.executable, "-m", "metrale.cli", "inspect", str(dst), "--json"],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "PATH": ""},
    )
    assert r.returncode == 0, r.stderr
    rows = {t["tensor"]: t for t in json.loads(r.stdout)["tensors"]}
    assert (
        rows["blk.0.ffn_gate.weight"]["format"] == "q2_0" and rows["blk.0.attn_q.weight"]["format"] == "q2_0"
    )
    assert rows["blk.0.ffn_gate.weight"]["bytes"] == 128 * 64 // 64 * 18


@pytest.mark.parametrize("family", ["mistral", "qwen2"])
def test_mistral_and_qwen2_families(tmp_path: Path, family: str) -> None:
    """Mistral is written as llama.cpp's llama architecture (q/k rows permuted, as
    convert_hf_to_gguf.py registers MistralForCausalLM); Qwen2 keeps its q/k/v biases (F32)."""
    sizes = dict(vocab_size=320, num_hidden_layers=1, max_position_embeddings=256, rope_theta=1e6)
    if family == "mistral":
        model = tiny_model("mistral", sliding_window=None, **sizes)
    else:
        model = tiny_model("qwen2", tie_word_embeddings=True, **sizes)
    src = tmp_path / family
    model.save_pretrained(src)
    write_example_tokenizer(src, style="qwen2", vocab_size=300)
    convert_checkpoint(src, tmp_path / "q", ConvertOptions("q2_0"))
    f = fields(tmp_path / "q")
    arch = {"mistral": "llama", "qwen2": "qwen2"}[family]
    assert f["general.architecture"] == arch and f[f"{arch}.rope.freq_base"] == 1e6
    assert f[f"{arch}.attention.head_count_kv"] == 2 and f["tokenizer.ggml.pre"] == "qwen2"
    by = {t.name: t for t in gguf.GGUFReader(tmp_path / "q" / GGUF_NAME).tensors}
    assert by["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType(42)
    if family == "qwen2":
        sd = model.state_dict()
        for p in ("q", "k", "v"):
            b = by[f"blk.0.attn_{p}.bias"]
            assert b.tensor_type == gguf.GGMLQuantizationType.F32
            want = sd[f"model.layers.0.self_attn.{p}_proj.bias"].float().numpy()
            assert np.array_equal(np.asarray(b.data), want)
