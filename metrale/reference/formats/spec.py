"""One descriptor per weight format: everything the converter, loader, verify, inspect, the
dispatch, the bench and the tests need to know about it, in one table (``FORMATS``).

The arithmetic of each format (quantizer, dequantizer, codes) is its class's; the descriptor
names it and adds the facts around it: the tensors on disk, who produces the layout, the
verify bound, the kernels of the GEMV/GEMM dispatch and the ``DenseFfnLayer`` slot.
Adding a format: its class in a module beside this one, its entry here, its projection in
``projection.py`` (and kernels on the backends that serve it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrale.errors import MetraleError
from metrale.reference.formats.bf16 import DenseWeight
from metrale.reference.formats.fp8 import Fp8Weight
from metrale.reference.formats.nvfp4 import Nvfp4Weight
from metrale.reference.formats.q2_0 import BLOCK_BYTES, QK, Q2_0Weight
from metrale.reference.formats.w8a8 import W8a8Weight

Shape = Callable[[int, int], tuple[int, ...]]


@dataclass(frozen=True)
class TensorSpec:
    """One on-disk tensor of a quantized module ``<module>.<suffix>``: its safetensors dtype
    code and its shape for a weight [N, K]; ``optional`` ones appear only when declared
    (NVFP4 ``input_scale`` declares A4)."""

    suffix: str
    dtype: str
    shape: Shape
    optional: bool = False


@dataclass(frozen=True)
class FormatSpec:
    """A weight format: stem (``--format`` value, file and kernel stem), class, K block of the
    quantizer, on-disk tensors, producer, verify bound, kernels and layer slot."""

    stem: str
    label: str
    weight_type: type
    block: int
    tensors: tuple[TensorSpec, ...]
    producer: str
    #: ‖ŵ − w‖ / ‖w‖ above which ``metrale verify`` fails a tensor. NVFP4, FP8 and int8 bounds
    #: sit well above what the quantizers give on Gaussian weights (≈ 0.10, 0.03, 0.007);
    #: Q2_0's ternary levels give ≈ 0.73, and no Q2_0 error can exceed 1 (every element rounds
    #: to 0 or within |x| of x).
    max_rel_error: float
    #: Kernels of the generic dispatch (``quant_gemv`` / ``quant_gemm``); None where the layer
    #: routes the format through its own arm (W8A8, packed Q2).
    gemv: str | None
    gemm: str | None
    #: ``DenseFfnLayer`` keyword that takes FfnWeights of this format ("w8a8": the W8A8 arm).
    slot: str
    #: Activation modes the projection pairs it with (the first is the default).
    modes: tuple[str, ...]
    #: The folder layout that carries it: "modelopt", "compressed-tensors", "gguf" or "hf".
    layout: str = "hf"
    #: compressed-tensors' quantization ``format`` and ``type`` of its weights (its layout only).
    ct_format: tuple[str, str] | None = None
    #: ``metrale convert`` writes it (BF16 is a source/overlay format only).
    convertible: bool = True

    def quantize(
        self,
        w: np.ndarray,
        *,
        name: str = "weight",
        input_amax: float | None = None,
        weight_amax: float | None = None,
    ) -> Any:
        """The producer's quantization of a float weight [N, K] (``input_amax`` and the fused
        siblings' shared ``weight_amax``: NVFP4 only)."""
        if input_amax is not None or weight_amax is not None:
            if self.weight_type is not Nvfp4Weight:
                what = "an input amax" if input_amax is not None else "a shared weight amax"
                raise MetraleError(f"{name}: {what} applies to NVFP4 only, not {self.stem}")
            return Nvfp4Weight.quantize(w, input_amax=input_amax, weight_amax=weight_amax, name=name)
        return self.weight_type.quantize(w, name=name)

    def from_tensors(self, t: Mapping[str, np.ndarray], *, name: str) -> Any:
        """The weight from a module's on-disk tensors, by suffix."""
        return self.weight_type.from_tensors(dict(t), name=name)

    def entries(self, n: int, k: int, *, declares_a4: bool = False) -> list[tuple[str, str, tuple[int, ...]]]:
        """(suffix, dtype, shape) of the tensors a [N, K] weight becomes on disk."""
        return [(t.suffix, t.dtype, t.shape(n, k)) for t in self.tensors if not t.optional or declares_a4]


def _nk(n: int, k: int) -> tuple[int, ...]:
    return (n, k)


def _scalar(n: int, k: int) -> tuple[int, ...]:
    return ()


def _rows(n: int, k: int) -> tuple[int, ...]:
    return (n, 1)


FORMATS: dict[str, FormatSpec] = {
    f.stem: f
    for f in (
        FormatSpec(
            stem="nvfp4",
            layout="modelopt",
            label="NVFP4",
            weight_type=Nvfp4Weight,
            block=16,
            tensors=(
                TensorSpec("weight", "U8", lambda n, k: (n, k // 2)),
                TensorSpec("weight_scale", "F8_E4M3", lambda n, k: (n, k // 16)),
                TensorSpec("weight_scale_2", "F32", _scalar),
                TensorSpec("input_scale", "F32", _scalar, optional=True),
            ),
            producer="NVIDIA ModelOpt NVFP4 (quant_algo NVFP4)",
            max_rel_error=0.2,
            gemv="w4a16_gemv",
            gemm="w4a16_gemm",
            slot="weights",
            modes=("A16", "A4"),
        ),
        FormatSpec(
            stem="fp8",
            layout="compressed-tensors",
            ct_format=("float-quantized", "float"),
            label="FP8",
            weight_type=Fp8Weight,
            block=16,
            tensors=(TensorSpec("weight", "F8_E4M3", _nk), TensorSpec("weight_scale", "F32", _rows)),
            producer="compressed-tensors float-quantized, channel strategy",
            max_rel_error=0.06,
            gemv="w8a16_gemv",
            gemm="w8a16_gemm",
            slot="fp8_weights",
            modes=("A16",),
        ),
        FormatSpec(
            stem="w8a8",
            layout="compressed-tensors",
            ct_format=("int-quantized", "int"),
            label="W8A8",
            weight_type=W8a8Weight,
            block=16,
            tensors=(TensorSpec("weight", "I8", _nk), TensorSpec("weight_scale", "F32", _rows)),
            producer="compressed-tensors int-quantized, channel strategy, symmetric",
            max_rel_error=0.02,
            gemv=None,
            gemm=None,
            slot="w8a8",
            modes=("A8",),
        ),
        FormatSpec(
            stem="q2_0",
            layout="gguf",
            label="Q2_0",
            weight_type=Q2_0Weight,
            block=QK,
            tensors=(TensorSpec("weight", "U8", lambda n, k: (n, k // QK * BLOCK_BYTES)),),
            producer="ggml GGML_TYPE_Q2_0 (type 42) in GGUF",
            max_rel_error=1.0,
            gemv=None,
            gemm=None,
            slot="q2_weights",
            modes=("A16",),
        ),
        FormatSpec(
            stem="bf16",
            label="BF16",
            weight_type=DenseWeight,
            block=16,
            tensors=(TensorSpec("weight", "BF16", _nk),),
            producer="Hugging Face transformers (the source weights)",
            max_rel_error=0.0,
            gemv="dense_gemv",
            gemm="dense_gemm",
            slot="bf16_weights",
            modes=("A16",),
            convertible=False,
        ),
    )
}

#: The formats ``metrale convert`` writes, in ``--format`` order.
CONVERT_FORMATS: tuple[str, ...] = tuple(s for s, f in FORMATS.items() if f.convertible)

#: Weight dtype (numpy name) on disk → format; float weights are the BF16 (dense) format.
_BY_WEIGHT_DTYPE = {
    "uint8": "nvfp4",
    "float8_e4m3fn": "fp8",
    "int8": "w8a8",
    "bfloat16": "bf16",
    "float16": "bf16",
    "float32": "bf16",
}


def spec_of(weight: object) -> FormatSpec:
    """The descriptor of a weight (host container or device weight: both carry ``format``)."""
    stem = getattr(weight, "format", None)
    spec = FORMATS.get(stem) if isinstance(stem, str) else None
    if spec is None:
        raise MetraleError(f"{getattr(weight, 'name', type(weight).__name__)}: not a metrale weight format")
    return spec


def spec_of_tensors(t: Mapping[str, np.ndarray], name: str) -> FormatSpec:
    """The format of a safetensors module by its ``weight`` dtype (uint8 needs a
    ``weight_scale``: NVFP4; Q2_0 lives in GGUF files, not here)."""
    w = t.get("weight")
    if w is None:
        raise MetraleError(f"{name}: no {name}.weight tensor")
    stem = _BY_WEIGHT_DTYPE.get(str(w.dtype))
    if stem is None or (stem == "nvfp4" and "weight_scale" not in t):
        raise MetraleError(f"{name}.weight: dtype {w.dtype} is not a format metrale loads")
    return FORMATS[stem]


@dataclass(frozen=True)
class FormatName:
    """A name a user gives for a format, the same in every command and API (``metrale convert``,
    ``generate``, ``bench``, ``replace_mlps``, ``FORMAT_NAMES``): the weight format ``stem`` and
    whether its NVFP4 weights declare an ``input_scale`` (``a4``: FP4 activations)."""

    name: str
    stem: str
    label: str
    a4: bool = False


#: The vocabulary of formats, stated once; each command serves a subset (``pick_format``).
FORMAT_NAMES: dict[str, FormatName] = {
    f.name: f
    for f in (
        FormatName("nvfp4", "nvfp4", "NVFP4 W4A16"),
        FormatName("w4a4", "nvfp4", "NVFP4 W4A4", a4=True),
        FormatName("w8a8", "w8a8", "W8A8"),
        FormatName("q2_0", "q2_0", "Q2_0"),
        FormatName("fp8", "fp8", "FP8 W8A16"),
        FormatName("bf16", "bf16", "BF16"),
    )
}
#: Older spellings kept for compatibility: the benchmark's stored runs (docs/bench/*.json)
#: and their command lines name NVFP4's two modes so.
FORMAT_ALIASES: dict[str, str] = {"nvfp4-w4a16": "nvfp4", "nvfp4-w4a4": "w4a4"}


def pick_format(name: object, serves: Mapping[str, str | None], what: str) -> str:
    """``name`` (any case, or an alias) resolved in ``FORMAT_NAMES``, for a command that serves
    the names of ``serves`` (name → None) and refuses the others (name → the reason, one line).
    ``what`` names the option (``--format``). MetraleError when unknown or not served."""
    if not isinstance(name, str):
        raise MetraleError(
            f"{what}: want a format name ({', '.join(FORMAT_NAMES)}), got {type(name).__name__}"
        )
    key = name.strip().lower()
    key = FORMAT_ALIASES.get(key, key)
    if key not in FORMAT_NAMES:
        served = ", ".join(n for n, why in serves.items() if why is None)
        raise MetraleError(f"{what} {name!r}: unknown format (want one of {served})")
    if serves.get(key, "not served here") is not None:
        raise MetraleError(f"{what} {key}: {serves.get(key) or 'not served here'}")
    return key


#: What ``metrale convert`` serves of the vocabulary, and why it refuses the rest.
CONVERT_SERVES: dict[str, str | None] = {
    **{n: None for n in CONVERT_FORMATS},
    "w4a4": "W4A4 is NVFP4 with an input_scale: use --format nvfp4 with --calibrate TEXTFILE "
    "or --calibration AMAX.safetensors",
    "bf16": "BF16 is the source format; convert writes nvfp4, fp8, w8a8 or q2_0",
}
