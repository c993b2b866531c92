"""Tiny transformers models of architectures metrale refuses (no downloads); the supported
families' tiny models are metrale.checkpoint.example.tiny_model."""

from __future__ import annotations

import torch


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
