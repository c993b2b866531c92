"""A small Llama-style Hugging Face checkpoint, generated (no downloads), and the tiny seeded
transformers models the tests build (``tiny_model``, ``make_hf_model``).

Used by the tests, the README's demo and the converter benchmark. Tensors are written one at
a time (streaming), so a large example costs no more memory than its largest tensor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from metrale.checkpoint.io import DTYPES, INDEX_NAME, SINGLE_NAME, SafetensorsWriter, write_index
from metrale.errors import MetraleError

if TYPE_CHECKING:
    import torch


def example_config(
    *,
    hidden: int = 64,
    intermediate: int = 128,
    layers: int = 2,
    vocab: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    hidden_act: str = "silu",
    dtype: str = "bf16",
) -> dict[str, Any]:
    """A LlamaForCausalLM ``config.json``."""
    torch_dtype = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "hidden_act": hidden_act,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def example_tensors(config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor of a Llama checkpoint, in HF order."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hd = config["head_dim"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (v, h))]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (i, h)),
            (p + "mlp.up_proj.weight", (i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
        ]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return out


def _values(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if len(shape) == 1:  # RMSNorm gains near 1
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    return (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)


def make_example_checkpoint(
    path: str | os.PathLike[str],
    *,
    hidden: int = 64,
    intermediate: int = 128,
    layers: int = 2,
    vocab: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    hidden_act: str = "silu",
    dtype: str = "bf16",
    shards: int = 1,
    seed: int = 0,
) -> Path:
    """Write a Llama-style HF folder at ``path`` (created; must not exist or be empty).

    ``dtype`` bf16 | f16 | f32; ``shards`` > 1 splits the tensors over
    ``model-0000i-of-0000n.safetensors`` with ``model.safetensors.index.json``. Weights are
    seeded Gaussians scaled by 1/sqrt(fan_in); norms are 1 + 0.1·N(0, 1).
    """
    codes = {"bf16": "BF16", "f16": "F16", "f32": "F32"}
    if dtype not in codes:
        raise MetraleError(f"example dtype {dtype!r}: want bf16, f16 or f32")
    out = Path(path)
    if out.exists() and any(out.iterdir()):
        raise MetraleError(f"{out}: exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    cfg = example_config(
        hidden=hidden,
        intermediate=intermediate,
        layers=layers,
        vocab=vocab,
        heads=heads,
        kv_heads=kv_heads,
        hidden_act=hidden_act,
        dtype=dtype,
    )
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, indent=2) + "\n",
        encoding="utf-8",
    )
    tensors = example_tensors(cfg)
    shards = max(1, min(shards, len(tensors)))
    groups = [list(g) for g in np.array_split(np.arange(len(tensors)), shards)]
    rng = np.random.default_rng(seed)
    code = codes[dtype]
    weight_map: dict[str, str] = {}
    total = 0
    for s, idx in enumerate(groups):
        fname = SINGLE_NAME if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        entries = [(tensors[j][0], code, tensors[j][1]) for j in idx]
        w = SafetensorsWriter(out / fname, entries, metadata={"format": "pt"})
        try:
            for name, _, shape in entries:
                a = _values(name, shape, rng).astype(DTYPES[code])
                w.write(name, a)
                weight_map[name] = fname
                total += a.nbytes
        finally:
            w.close()
    if shards > 1:
        write_index(out / INDEX_NAME, weight_map, total)
    return out


#: Split patterns of the byte-level BPE families (as their tokenizer.json files carry them).
SPLIT_PATTERNS = {
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
}
EXAMPLE_TEXT = (
    "The quick brown fox jumps over the lazy dog. Hello world! It's 2026; we've 12345 tokens.\n"
    "Quantized feed-forward layers run in two bits, four bits and eight bits.\n"
    "Les modèles de langue découpent le texte en morceaux: über, naïve, café.\n"
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_example_tokenizer(
    path: str | os.PathLike[str], *, style: str = "qwen2", vocab_size: int = 320
) -> Path:
    """Train a byte-level BPE tokenizer on ``EXAMPLE_TEXT`` with the ``tokenizers`` library (no
    downloads) and write ``tokenizer.json`` + ``tokenizer_config.json`` into folder ``path``.

    ``style`` ``qwen2`` | ``llama3`` picks the split pattern (``SPLIT_PATTERNS``); llama3 also sets
    ``ignore_merges`` and prepends ``<|begin_of_text|>``. Specials ``<|endoftext|>`` (id 0),
    ``<|im_start|>``, ``<|im_end|>`` (and ``<|begin_of_text|>``) come first; the vocabulary has
    at most ``vocab_size`` entries (256 bytes + specials + merges)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if style not in SPLIT_PATTERNS:
        raise MetraleError(f"tokenizer style {style!r}: want one of {', '.join(SPLIT_PATTERNS)}")
    out = Path(path)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    if style == "llama3":
        specials.append("<|begin_of_text|>")
    tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERNS[style]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([EXAMPLE_TEXT] * 4, trainer=trainer)
    bos = "<|begin_of_text|>" if style == "llama3" else None
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": bos is not None,
        "add_eos_token": False,
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 2048,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    return out


#: The sizes of ``tiny_model``'s transformers models: 2 layers, 4 heads of 16 (2 KV), vocab 96.
TINY: dict[str, int] = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=64,
)

#: family: transformers' config class, model class and activation option for ``tiny_model``.
TINY_FAMILIES: dict[str, tuple[str, str, dict[str, str]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"hidden_act": "silu"}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"hidden_act": "silu"}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"hidden_activation": "gelu_pytorch_tanh"}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
}


def seeded_model(
    model_cls: Any, config: Any, *, seed: int, std: float, norm_std: float | None = None
) -> torch.nn.Module:
    """``model_cls(config)`` in bf16 eval mode with seeded random weights: after
    ``torch.manual_seed(seed)``, every parameter in ``named_parameters`` order drawn N(0, std) in
    place, or 1 + norm_std N(0, 1) for the norm weights where ``norm_std`` is given."""
    import torch

    torch.manual_seed(seed)
    model = model_cls(config).to(torch.bfloat16).eval()
    with torch.no_grad():  # weights large enough that the FFN's quantization steps matter
        for name, p in model.named_parameters():
            if norm_std is not None and name.endswith("norm.weight"):
                p.copy_(1.0 + norm_std * torch.randn_like(p))
            else:
                p.normal_(0.0, std)
    return model


def tiny_model(family: str, seed: int = 0, **options: Any) -> torch.nn.Module:
    """A tiny bf16 eval-mode transformers model of ``family`` (TINY_FAMILIES) with SDPA attention
    and every weight N(0, 0.08), seeded (``seeded_model``); ``options`` override TINY's sizes or
    set other config fields. Needs torch and transformers (no downloads)."""
    import transformers as tf

    if family not in TINY_FAMILIES:
        raise MetraleError(f"tiny model family {family!r}: want one of {', '.join(TINY_FAMILIES)}")
    config_name, model_name, act = TINY_FAMILIES[family]
    config = getattr(tf, config_name)(**(TINY | options), **act, attn_implementation="sdpa")
    return seeded_model(getattr(tf, model_name), config, seed=seed, std=0.08)


def make_hf_model(
    path: str | os.PathLike[str], family: str = "qwen3", *, seed: int = 0, std: float = 0.08
) -> Path:
    """A tiny random transformers model saved (bf16 safetensors + config.json) with a trained
    tokenizer (``write_example_tokenizer``), for the GGUF tests and ``tools/llamacpp_check.py``.
    Needs torch, transformers and tokenizers.

    ``family`` ``llama``: hidden 128, 4 heads of 32 (2 KV), Llama-3 tokenizer, RoPE theta 5e5 with
    ``llama3`` scaling; ``qwen3``: hidden 64, 2 heads of 128 (head_dim != hidden/heads, 1 KV),
    q/k norms, RoPE theta 1e6, tied embeddings, Qwen2 tokenizer. Both: 2 layers, intermediate 2 x
    hidden, vocab 320 (the tokenizer has 304 tokens: ids 304..319 are padding)."""
    import transformers as tf

    vocab = 320
    common: dict[str, Any] = dict(
        vocab_size=vocab,
        num_hidden_layers=2,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        eos_token_id=2,
        pad_token_id=0,
    )
    if family == "llama":
        cfg: Any = tf.LlamaConfig(
            hidden_size=128,
            intermediate_size=256,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=131072,
            bos_token_id=3,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            **common,
        )
        model_cls, style = tf.LlamaForCausalLM, "llama3"
    elif family == "qwen3":
        cfg = tf.Qwen3Config(
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=128,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            **common,
        )
        model_cls, style = tf.Qwen3ForCausalLM, "qwen2"
    else:
        raise MetraleError(f"example family {family!r}: want llama or qwen3")
    model = seeded_model(model_cls, cfg, seed=seed, std=std, norm_std=0.1)
    out = Path(path)
    model.save_pretrained(out)
    write_example_tokenizer(out, style=style, vocab_size=vocab - 16)
    return out
