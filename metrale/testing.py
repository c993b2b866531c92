"""Weights and layers for tests and the benchmark, built in one place.

Two kinds of weights: ``random_ffn`` draws raw codes and scales directly (uniform codes, scales
near 1; what the benchmark times), ``quantized_ffn`` quantizes float matrices by the format's
producer rule (what the layer tests and vectors use). ``LayerParts`` holds a layer's host
containers, one per ``DenseFfnLayer`` slot of the format descriptors (``FormatSpec.slot``),
and builds the layer on any backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from metrale.reference.backend import Backend
from metrale.reference.context import FfnConfig
from metrale.reference.elements import BF16, E4M3
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, W8a8Weight
from metrale.reference.formats.spec import FORMATS
from metrale.reference.layer import DenseFfnLayer, FfnActivation, FfnLora, FfnWeights
from metrale.reference.w8a8_arm import W8a8Ffn

F32 = np.float32
#: Names of the three projections, as ``FfnWeights`` orders them.
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def _row_scales(rng: np.random.Generator, n: int, lo: float, hi: float) -> np.ndarray:
    return np.exp2(rng.uniform(lo, hi, n)).astype(F32)


def random_weight(
    stem: str, rng: np.random.Generator, n: int, k: int, name: str, input_scale: np.float32 | None = None
) -> Any:
    """A weight [n, k] of format ``stem`` from random codes:

    * nvfp4: uniform nibbles, block scales around 1 (e4m3 codes 0x28..0x47), ``input_scale``
      as given (declares A4 when set);
    * w8a8: int8 codes in [-127, 127], per-row scales 2^-13 .. 2^-11;
    * fp8: every finite e4m3 code (the NaN codes 0x7F/0xFF become 0x7E/0xFE), row scales
      2^-10 .. 2^-8;
    * bf16: exponents 2^-8 .. 2^-1, random signs (blocks span < 2^15: plain 24-bit codes);
    * q2_0: uniform 2-bit codes, f16 scales d ~ N(0, 0.02).
    """
    if stem == "nvfp4":
        return Nvfp4Weight(
            weight=rng.integers(0, 256, (n, k // 2), dtype=np.uint8),
            weight_scale=rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8).view(E4M3),
            weight_scale_2=F32(1.0 / 2688.0),
            input_scale=input_scale,
            name=name,
        )
    if stem == "w8a8":
        q = rng.integers(-127, 128, (n, k), dtype=np.int8)
        return W8a8Weight(weight=q, weight_scale=_row_scales(rng, n, -13, -11), name=name)
    if stem == "fp8":
        c = rng.integers(0, 256, (n, k), dtype=np.uint8)
        c[(c & 0x7F) == 0x7F] -= 1
        return Fp8Weight(weight=c.view(E4M3), weight_scale=_row_scales(rng, n, -10, -8), name=name)
    if stem == "bf16":
        bits = rng.integers(0x3B80, 0x3F80, (n, k), dtype=np.uint16)
        bits |= (rng.integers(0, 2, (n, k), dtype=np.uint16) << 15).astype(np.uint16)
        return DenseWeight(weight=bits.view(BF16), name=name)
    if stem == "q2_0":
        blocks = rng.integers(0, 256, (n, k // 64, 18), dtype=np.uint8)
        d = (rng.standard_normal((n, k // 64)) * 0.02).astype(np.float16)
        blocks[..., :2] = d.view(np.uint8).reshape(n, k // 64, 2)
        return Q2_0Weight(blocks=blocks, name=name)
    raise ValueError(f"random_weight: unknown format {stem!r}")


def _ffn(stem: str, parts: list[Any]) -> FfnWeights[Any] | W8a8Ffn:
    return W8a8Ffn(*parts) if FORMATS[stem].slot == "w8a8" else FfnWeights(*parts)


def random_ffn(
    stem: str, rng: np.random.Generator, hidden: int, inter: int, input_scale: np.float32 | None = None
) -> FfnWeights[Any] | W8a8Ffn:
    """gate, up [inter, hidden] and down [hidden, inter] of ``random_weight``: FfnWeights, or
    W8a8Ffn for the W8A8 arm."""
    shapes = ((inter, hidden), (inter, hidden), (hidden, inter))
    names = ("gate", "up", "down")
    parts = [
        random_weight(stem, rng, n, k, nm, input_scale) for nm, (n, k) in zip(names, shapes, strict=True)
    ]
    return _ffn(stem, parts)


def quantized_ffn(
    stem: str, sources: list[np.ndarray], input_amax: float | None = None
) -> FfnWeights[Any] | W8a8Ffn:
    """Float sources gate, up, down quantized by the format's producer rule
    (``FormatSpec.quantize``; ``input_amax`` declares A4, NVFP4 only)."""
    spec = FORMATS[stem]
    pairs = zip(PROJECTIONS, sources, strict=True)
    return _ffn(stem, [spec.quantize(w, name=nm, input_amax=input_amax) for nm, w in pairs])


def ffn_bytes(ffn: FfnWeights[Any] | W8a8Ffn) -> int:
    """Bytes of the three projections' host tensors."""
    parts = ffn.all()
    return int(sum(p.nbytes for p in parts))


@dataclass
class LayerParts:
    """Everything a ``DenseFfnLayer`` is built from, as host containers (one per slot)."""

    config: FfnConfig
    activation: str = "silu"
    weights: FfnWeights[Nvfp4Weight] | None = None
    bf16_weights: FfnWeights[DenseWeight] | None = None
    fp8_weights: FfnWeights[Fp8Weight] | None = None
    q2_weights: FfnWeights[Q2_0Weight] | None = None
    lora: FfnLora | None = None
    w8a8: W8a8Ffn | None = None

    def put(self, stem: str, ffn: FfnWeights[Any] | W8a8Ffn) -> LayerParts:
        """Place ``ffn`` in the slot of format ``stem``; returns self."""
        setattr(self, FORMATS[stem].slot, ffn)
        return self

    def layer(self, backend: Backend) -> DenseFfnLayer:
        """Build the layer on ``backend`` (W8A8 weights through ``set_w8a8_decode_weights``)."""
        layer = DenseFfnLayer(
            self.config,
            weights=self.weights,
            bf16_weights=self.bf16_weights,
            fp8_weights=self.fp8_weights,
            q2_weights=self.q2_weights,
            lora=self.lora,
            activation=FfnActivation(self.activation),
            backend=backend,
        )
        if self.w8a8 is not None:
            h, i = self.config.hidden_size, self.config.intermediate_size
            layer.set_w8a8_decode_weights(self.w8a8, h, i)
        return layer

    def tp_layer(self, rank: int, size: int, **kwargs: Any) -> DenseFfnLayer:
        """This rank's tensor-parallel layer of these parts (``metrale.distributed.tp_layer``;
        ``kwargs``: group, split, backend)."""
        from metrale.distributed import tp_layer

        return tp_layer(
            self.config,
            rank,
            size,
            weights=self.weights,
            bf16_weights=self.bf16_weights,
            fp8_weights=self.fp8_weights,
            q2_weights=self.q2_weights,
            w8a8=self.w8a8,
            lora=self.lora,
            activation=self.activation,
            **kwargs,
        )
