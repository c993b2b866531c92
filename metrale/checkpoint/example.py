"""A small Llama-style Hugging Face checkpoint, generated (no downloads).

Used by the tests, the README's demo and the converter benchmark. Tensors are written one at
a time (streaming), so a large example costs no more memory than its largest tensor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from metrale.checkpoint.io import DTYPES, INDEX_NAME, SINGLE_NAME, SafetensorsWriter, write_index
from metrale.errors import MetraleError


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
