"""GGUF with ggml's type 42 (``Q2_0``), through the ``gguf`` package.

The released ``gguf`` predates type 42. ``register_q2_0()`` — run once at import of this
module, the one place metrale touches the package — adds ``GGMLQuantizationType.Q2_0 = 42``,
its ``GGML_QUANT_SIZES`` entry (64 elements in 18 bytes) and a ``gguf.quants`` trait whose
(de)quantizers are metrale's reference ones. After that, ``GGUFWriter`` and ``GGUFReader``
handle the type like any other, and a ``gguf`` release that knows type 42 is left untouched.

Tensor names are llama.cpp's (``blk.N.ffn_gate.weight`` ...), mapped by ``gguf.TensorNameMap``;
llama's q/k projections are row-permuted as ``convert_hf_to_gguf.py`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf
import gguf.constants as gconst
import gguf.quants as gquants
import numpy as np

from metrale.checkpoint.checks import require_none, weight_problems
from metrale.errors import MetraleError
from metrale.reference.formats.q2_0 import BLOCK_BYTES, GGML_TYPE_Q2_0, QK, Q2_0Weight

GGUF_NAME = "model.gguf"
HIDDEN_ACT_KEY = "metrale.hidden_act"


def register_q2_0() -> gguf.GGMLQuantizationType:
    """Make ``gguf`` know type 42 (idempotent); return the enum member."""
    T = gguf.GGMLQuantizationType
    member = T._value2member_map_.get(GGML_TYPE_Q2_0)
    if member is None:
        member = int.__new__(T, GGML_TYPE_Q2_0)
        member._name_ = "Q2_0"
        member._value_ = GGML_TYPE_Q2_0
        member.__objclass__ = T  # type: ignore[attr-defined]
        if hasattr(member, "_sort_order_"):
            member._sort_order_ = len(T._member_names_)  # type: ignore[attr-defined]
        add = getattr(T, "_add_member_", None)
        if add is not None:  # Python >= 3.13
            add("Q2_0", member)
        else:
            T._member_names_.append("Q2_0")  # type: ignore[attr-defined]
            T._member_map_["Q2_0"] = member
            type.__setattr__(T, "Q2_0", member)
        T._value2member_map_[GGML_TYPE_Q2_0] = member
    elif member.name != "Q2_0":
        raise MetraleError(f"gguf already defines type {GGML_TYPE_Q2_0} as {member.name}, not Q2_0")
    gconst.GGML_QUANT_SIZES.setdefault(member, (QK, BLOCK_BYTES))
    if gconst.GGML_QUANT_SIZES[member] != (QK, BLOCK_BYTES):
        raise MetraleError(
            f"gguf's Q2_0 block is {gconst.GGML_QUANT_SIZES[member]}, want ({QK}, {BLOCK_BYTES})"
        )
    traits = gquants._type_traits
    if member not in traits:
        base: Any = gquants.__dict__["__Quant"]

        class _Q2_0(base, qtype=member):  # type: ignore[misc, valid-type]
            """ggml's block_q2_0 through metrale's reference quantizer."""

            @classmethod
            def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
                return Q2_0Weight.quantize(blocks.reshape(-1, QK), name="gguf Q2_0 blocks").blocks.reshape(
                    -1, BLOCK_BYTES
                )

            @classmethod
            def dequantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
                w = Q2_0Weight(
                    blocks=np.ascontiguousarray(blocks).reshape(-1, 1, BLOCK_BYTES), name="gguf Q2_0 blocks"
                )
                return w.dequantize().reshape(-1, QK)

    return member


Q2_0_TYPE = register_q2_0()


def arch_for(config: Mapping[str, Any]) -> gguf.MODEL_ARCH:
    """The llama.cpp architecture for a config's ``model_type`` (llama unless gguf knows it)."""
    mt = str(config.get("model_type", "llama")).lower()
    for arch, name in gguf.MODEL_ARCH_NAMES.items():
        if name == mt:
            return arch
    return gguf.MODEL_ARCH.LLAMA


class NameMapper:
    """HF tensor name -> llama.cpp GGUF name (``gguf.TensorNameMap``)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.arch = arch_for(config)
        self.n_layers = int(config.get("num_hidden_layers", 0))
        self._map = gguf.get_tensor_name_map(self.arch, self.n_layers)

    def __call__(self, name: str) -> str:
        out = self._map.get_name(name, try_suffixes=(".weight", ".bias"))
        if out is None:
            raise MetraleError(
                f"tensor {name!r} has no llama.cpp name for architecture "
                f"{gguf.MODEL_ARCH_NAMES[self.arch]!r} (GGUF output needs one)"
            )
        return out


def rope_heads(name: str, config: Mapping[str, Any]) -> int | None:
    """Heads of llama's q_proj / k_proj, whose rows llama.cpp permutes (``LlamaModel.permute``);
    None for every other tensor."""
    if arch_for(config) != gguf.MODEL_ARCH.LLAMA:
        return None
    n_head = int(config.get("num_attention_heads", 0))
    n_kv = int(config.get("num_key_value_heads", n_head) or n_head)
    if name.endswith("self_attn.q_proj.weight"):
        heads = n_head
    elif name.endswith("self_attn.k_proj.weight"):
        heads = n_kv
    else:
        return None
    return heads


def permute_rows(w: np.ndarray, heads: int, name: str) -> np.ndarray:
    """llama.cpp's q/k permutation: rows (head, 2, d/2) -> (head, d/2, 2)."""
    n = w.shape[0]
    if heads <= 0 or n % (2 * heads):
        raise MetraleError(f"{name}: {n} rows do not split into {heads} rotary heads")
    return w.reshape(heads, 2, n // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


#: llama.h's ``LLAMA_FTYPE_MOSTLY_Q2_0`` (``general.file_type``); gguf 0.19's LlamaFileType lacks it.
LLAMA_FTYPE_MOSTLY_Q2_0 = 41


def rope_parameters(config: Mapping[str, Any]) -> dict[str, Any]:
    """RoPE settings as ``convert_hf_to_gguf.py`` reads them: transformers-5 ``rope_parameters``
    (its ``full_attention`` entry where split), else ``rope_scaling``, with a top-level
    ``rope_theta`` filled in; ``rope_type`` also from the older ``type``."""
    rp = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    rp = dict(rp.get("full_attention", rp))
    if "rope_theta" not in rp and config.get("rope_theta") is not None:
        rp["rope_theta"] = config["rope_theta"]
    if "rope_type" not in rp and rp.get("type") is not None:
        rp["rope_type"] = rp["type"]
    return rp


def head_dim(config: Mapping[str, Any]) -> int:
    """``head_dim`` where the config gives it (Qwen3: 128 whatever hidden/heads), else hidden/heads."""
    return int(config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"]))


def llama3_rope_factors(config: Mapping[str, Any]) -> np.ndarray | None:
    """The ``rope_freqs`` tensor (f32 [head_dim/2]) llama.cpp needs for ``rope_type: llama3``
    (Llama 3.1+), computed as ``convert_hf_to_gguf.py`` does; None for other RoPE types."""
    rp = rope_parameters(config)
    if str(rp.get("rope_type", "")).lower() != "llama3":
        return None
    base = float(rp.get("rope_theta", 10000.0))
    dim = head_dim(config)
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor = float(rp.get("factor", 8.0))
    low, high = float(rp.get("low_freq_factor", 1.0)), float(rp.get("high_freq_factor", 4.0))
    old_ctx = float(rp.get("original_max_position_embeddings", 8192))
    out = []
    for f in freqs.astype(np.float64):
        wavelen = 2 * np.pi / f
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def add_metadata(writer: gguf.GGUFWriter, config: Mapping[str, Any], name: str) -> None:
    """llama.cpp's hyper-parameter keys from a HF config (the ones ``convert_hf_to_gguf.py``
    writes for Llama/Mistral, Qwen2 and Qwen3), plus ``metrale.hidden_act``."""
    c = config
    writer.add_name(name)
    writer.add_quantization_version(gconst.GGML_QUANT_VERSION)
    writer.add_file_type(LLAMA_FTYPE_MOSTLY_Q2_0)
    hidden = int(c["hidden_size"])
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(int(c["intermediate_size"]))
    writer.add_block_count(int(c.get("num_hidden_layers", 0)))
    if "max_position_embeddings" in c:
        writer.add_context_length(int(c["max_position_embeddings"]))
    if "num_attention_heads" in c:
        nh = int(c["num_attention_heads"])
        writer.add_head_count(nh)
        writer.add_head_count_kv(int(c.get("num_key_value_heads") or nh))
        writer.add_rope_dimension_count(head_dim(c))
    if c.get("head_dim") is not None:
        writer.add_key_length(int(c["head_dim"]))
        writer.add_value_length(int(c["head_dim"]))
    rp = rope_parameters(c)
    rope_type, factor = rp.get("rope_type"), rp.get("factor")
    if rope_type == "linear" and factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(factor))
    elif rope_type == "yarn" and factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(factor))
        writer.add_rope_scaling_orig_ctx_len(int(rp["original_max_position_embeddings"]))
        for key, add in (
            ("extrapolation_factor", writer.add_rope_scaling_yarn_ext_factor),
            ("attention_factor", writer.add_rope_scaling_yarn_attn_factor),
            ("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
            ("beta_slow", writer.add_rope_scaling_yarn_beta_slow),
        ):
            if rp.get(key) is not None:
                add(float(rp[key]))
    elif rope_type not in (None, "default", "llama3"):
        raise MetraleError(f"rope_type {rope_type!r}: metrale writes no GGUF RoPE scaling for it")
    if rp.get("rope_theta") is not None:
        writer.add_rope_freq_base(float(rp["rope_theta"]))
    if "rms_norm_eps" in c:
        writer.add_layer_norm_rms_eps(float(c["rms_norm_eps"]))
    if "vocab_size" in c:
        writer.add_vocab_size(int(c["vocab_size"]))
    writer.add_string(HIDDEN_ACT_KEY, str(c.get("hidden_act", "silu")))


def field_value(reader: gguf.GGUFReader, key: str) -> Any:
    """A metadata value of a GGUF file, or None."""
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def find_gguf(path: str | Path) -> Path | None:
    """``path`` itself if it is a .gguf file, else the one .gguf in folder ``path`` (None if none)."""
    p = Path(path)
    if p.is_file() and p.suffix == ".gguf":
        return p
    if p.is_dir():
        found = sorted(p.glob("*.gguf"))
        if len(found) > 1:
            raise MetraleError(
                f"{p}: holds several .gguf files ({', '.join(f.name for f in found)}); name one"
            )
        return found[0] if found else None
    return None


def open_gguf(path: Path) -> gguf.GGUFReader:
    """``gguf.GGUFReader`` with errors naming the file."""
    try:
        return gguf.GGUFReader(path)
    except (ValueError, OSError, KeyError, IndexError) as e:
        raise MetraleError(f"{path}: not a readable GGUF file ({e})") from None


def q2_weight(t: Any, name: str) -> Q2_0Weight:
    """A ``Q2_0Weight`` from a GGUF reader tensor of type 42."""
    if int(t.tensor_type) != GGML_TYPE_Q2_0:
        raise MetraleError(f"{name}: GGUF type {t.tensor_type!r}, want Q2_0 (42)")
    n = int(t.shape[1]) if len(t.shape) > 1 else 1
    k = int(t.shape[0])
    if k % QK:
        raise MetraleError(f"{name}: row of {k} elements is not a multiple of {QK}")
    data = np.asarray(t.data, dtype=np.uint8)
    if data.size != n * (k // QK) * BLOCK_BYTES:
        raise MetraleError(f"{name}: {data.size} bytes, want {n * (k // QK) * BLOCK_BYTES} for [{n}, {k}]")
    w = Q2_0Weight.from_gguf_rows(data.reshape(n, -1), name=name)
    require_none(weight_problems("q2_0", w, name))
    return w


def float_tensor(t: Any, name: str) -> np.ndarray:
    """A float GGUF tensor (F32, F16, BF16) as a numpy array of its logical shape."""
    import ml_dtypes

    T = gguf.GGMLQuantizationType
    shape = tuple(int(s) for s in reversed(list(t.shape)))
    if t.tensor_type == T.F32:
        return np.asarray(t.data, dtype=np.float32).reshape(shape)
    if t.tensor_type == T.F16:
        return np.asarray(t.data, dtype=np.float16).reshape(shape)
    if t.tensor_type == T.BF16:
        return np.asarray(t.data).view(np.uint8).view(ml_dtypes.bfloat16).reshape(shape)
    raise MetraleError(f"{name}: GGUF type {t.tensor_type.name} is not a float type metrale loads")
