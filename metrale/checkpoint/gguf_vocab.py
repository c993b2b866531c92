"""The tokenizer of a GGUF file, from the source folder's tokenizer files, as llama.cpp's
``convert_hf_to_gguf.py`` writes it (``tokenizer.ggml.*`` keys).

* Byte-level BPE (``tokenizer.json`` with a BPE model without byte fallback: GPT-2, Llama 3,
  Qwen2/Qwen3, Mistral's tekken): model ``gpt2``, the pre-tokenizer named from its split
  pattern (``llama-bpe``, ``qwen2``, ``tekken``, ``gpt-2``), the token list in id order padded
  with ``[PADi]`` (UNUSED) to the config's ``vocab_size``, token types (added tokens CONTROL
  when special, else USER_DEFINED; the rest NORMAL), and the merges.
* SentencePiece / llama-style (``tokenizer.model``, or a ``tokenizer.json`` BPE with byte
  fallback as Llama 2 and Mistral 7B ship): model ``llama`` through ``gguf.SentencePieceVocab``
  (needs ``sentencepiece``) or ``gguf.LlamaHfVocab`` (needs ``transformers``), with scores.

Special token ids, ``add_bos``/``add_eos`` and the chat template come from
``gguf.SpecialVocab`` (tokenizer.json, tokenizer_config.json, config.json) in both cases.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf

from metrale.errors import MetraleError

#: Split patterns of tokenizer.json -> llama.cpp's ``tokenizer.ggml.pre`` (the names its
#: ``llama-vocab.cpp`` maps to these same regular expressions).
PRE_TOKENIZERS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
    r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "tekken",
}


def looks_special(token: str) -> bool:
    """Added tokens llama.cpp's converter treats as control tokens even when not marked special."""
    return (
        token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (token.startswith("<|") and token.endswith("|>"))
        or (token.startswith("<｜") and token.endswith("｜>"))
        or (token.startswith("<unused") and token.endswith(">"))
    )


def _pre_tokenizers(node: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [p for sub in node.get("pretokenizers", []) for p in _pre_tokenizers(sub)]
    return [node]


def pre_tokenizer_name(tok: Mapping[str, Any], where: Path) -> str:
    """llama.cpp's pre-tokenizer name for a byte-level BPE tokenizer.json."""
    pres = _pre_tokenizers(tok.get("pre_tokenizer"))
    splits = [p for p in pres if p.get("type") == "Split"]
    if not splits:
        if any(p.get("type") == "ByteLevel" and p.get("use_regex", True) for p in pres):
            return "gpt-2"
        raise MetraleError(f"{where}: byte-level BPE without a split pattern llama.cpp knows")
    pattern = splits[0].get("pattern", {})
    regex = pattern.get("Regex") or pattern.get("String")
    name = PRE_TOKENIZERS.get(str(regex))
    if name is None or len(splits) > 1:
        raise MetraleError(
            f"{where}: pre-tokenizer pattern {regex!r} is not one llama.cpp names "
            f"({', '.join(sorted(set(PRE_TOKENIZERS.values())))}, gpt-2); the GGUF would tokenize differently"
        )
    return name


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MetraleError(f"{path}: not readable JSON ({e})") from None


def bpe_tokens(tok: Mapping[str, Any], vocab_size: int, where: Path) -> tuple[list[str], list[int]]:
    """Token strings in id order and their ``gguf.TokenType``; ids below ``vocab_size`` absent
    from the tokenizer become ``[PADi]`` (UNUSED)."""
    by_id: dict[int, str] = {int(i): t for t, i in tok["model"]["vocab"].items()}
    added = {int(a["id"]): a for a in tok.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    if by_id and max(by_id) >= vocab_size:
        raise MetraleError(
            f"{where}: token id {max(by_id)} is not below config.json's vocab_size {vocab_size}"
        )
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = by_id[i]
        if i in added:
            if added[i].get("special") or looks_special(t):
                types.append(gguf.TokenType.CONTROL)
            else:
                t = t.replace("\u2581", " ")  # user-defined tokens pre-normalized, as llama.cpp wants
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(t)
    return tokens, types


def add_vocab(writer: gguf.GGUFWriter, src: Path, config: Mapping[str, Any]) -> str | None:
    """Write the tokenizer of folder ``src`` into ``writer``; returns the ``tokenizer.ggml.model``
    written, or None when ``src`` has no tokenizer.json / tokenizer.model."""
    tj, sp = src / "tokenizer.json", src / "tokenizer.model"
    tok = _read_json(tj) if tj.is_file() else None
    model = (tok or {}).get("model", {})
    byte_level = tok is not None and model.get("type") == "BPE" and not model.get("byte_fallback", False)
    if byte_level:
        assert tok is not None
        n_vocab = int(
            config.get("vocab_size")
            or (1 + max([*model["vocab"].values(), *(a["id"] for a in tok.get("added_tokens", []))]))
        )
        tokens, types = bpe_tokens(tok, n_vocab, tj)
        pre = pre_tokenizer_name(tok, tj)
        tc = src / "tokenizer_config.json"
        if tc.is_file() and (asp := _read_json(tc).get("add_prefix_space")) is not None:
            writer.add_add_space_prefix(bool(asp))
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        special = gguf.SpecialVocab(src, load_merges=True)
        if not special.merges:
            raise MetraleError(f"{tj}: BPE tokenizer without merges")
        special.add_to_gguf(writer, quiet=True)
        return "gpt2"
    if sp.is_file() or tok is not None:
        vocab: Any
        try:
            if sp.is_file():
                vocab = gguf.SentencePieceVocab(src)
            elif model.get("type") == "BPE":
                vocab = gguf.LlamaHfVocab(src)
            else:
                raise MetraleError(
                    f"{tj}: tokenizer model {model.get('type')!r} is neither byte-level BPE nor "
                    "SentencePiece-style BPE; metrale writes no other GGUF tokenizer"
                )
        except (RuntimeError, ImportError) as e:
            raise MetraleError(f"{src}: the GGUF tokenizer needs a package: {e}") from None
        except (FileNotFoundError, TypeError, ValueError) as e:
            raise MetraleError(f"{src}: tokenizer not convertible to GGUF ({e})") from None
        tokens_b: list[bytes] = []
        scores: list[float] = []
        types_b: list[int] = []
        for text, score, ttype in vocab.all_tokens():
            tokens_b.append(text)
            scores.append(score)
            types_b.append(ttype)
        n_vocab = int(config.get("vocab_size") or len(tokens_b))
        if len(tokens_b) > n_vocab:
            raise MetraleError(
                f"{src}: tokenizer has {len(tokens_b)} tokens, more than config.json's vocab_size {n_vocab}"
            )
        for i in range(len(tokens_b), n_vocab):
            tokens_b.append(f"[PAD{i}]".encode())
            scores.append(-1000.0)
            types_b.append(gguf.TokenType.UNUSED)
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens_b)
        writer.add_token_scores(scores)
        writer.add_token_types(types_b)
        gguf.SpecialVocab(src, n_vocab=len(tokens_b)).add_to_gguf(writer, quiet=True)
        return "llama"
    return None
