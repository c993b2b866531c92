"""Tiny random-weight transformers models built from configs (no downloads)."""

from __future__ import annotations

import torch

TINY = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=64,
)


def tiny_model(family: str, seed: int = 0, **sizes: int) -> torch.nn.Module:
    """A bf16 eval-mode Llama / Qwen3 / Gemma with seeded random weights (SDPA attention);
    ``sizes`` override TINY's."""
    import transformers as tf

    cls = {
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, {"hidden_act": "silu"}),
        "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM, {"hidden_act": "silu"}),
        "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM, {"hidden_activation": "gelu_pytorch_tanh"}),
    }[family]
    torch.manual_seed(seed)
    cfg = cls[0](**(TINY | sizes), **cls[2], attn_implementation="sdpa")
    model = cls[1](cfg).to(torch.bfloat16).eval()
    with torch.no_grad():  # weights large enough that the FFN's quantization steps matter
        for p in model.parameters():
            p.normal_(0.0, 0.08)
    return model


def unsupported_model(family: str) -> torch.nn.Module:
    """A tiny bf16 GPT-2 or BERT (architectures replace_mlps refuses), seeded, no downloads."""
    import transformers as tf

    torch.manual_seed(0)
    if family == "gpt2":
        model = tf.GPT2LMHeadModel(
            tf.GPT2Config(
                vocab_size=96, n_positions=32, n_embd=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
            )
        )
    else:
        cfg = tf.BertConfig(
            vocab_size=96, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
        model = tf.BertForMaskedLM(cfg)
    return model.to(torch.bfloat16).eval()
