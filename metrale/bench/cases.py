"""What the benchmark runs: the FFN shapes, the formats and modes (each a weight format of the
descriptor table plus how its weights declare activations), row counts, and the seeded weights
and activation rows of every (shape, format).

Weights come from ``metrale.testing.random_ffn`` (random codes, no quantization of float
matrices); the same arguments give the same bits in the reference workers and on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from metrale.reference.backend import Backend
from metrale.reference.context import FfnConfig
from metrale.reference.elements import BF16
from metrale.reference.formats.spec import FORMAT_ALIASES, FORMAT_NAMES
from metrale.reference.layer import DenseFfnLayer, FfnWeights
from metrale.reference.w8a8_arm import W8a8Ffn
from metrale.testing import LayerParts, random_ffn

F32 = np.float32
SHAPES: dict[str, tuple[int, int]] = {"qwen3-8b": (4096, 12288), "llama3-8b": (4096, 14336)}
#: The dry run's shape (reference backend on the CPU).
DRY_SHAPE = ("tiny", (128, 256))
DECODE_M = (1, 2, 3, 4, 8, 16, 32, 64)
PREFILL_M = (128, 256, 512, 1024, 2048, 4096, 8192)
DEFAULT_M = DECODE_M + PREFILL_M


@dataclass(frozen=True)
class BenchFormat:
    """A benchmarked format and mode: the weight format ``stem`` and the ``input_scale`` its
    NVFP4 weights declare (None: A16 activations; set: FP4 activations under the W4A4 tier)."""

    key: str
    label: str
    stem: str
    input_scale: float | None = None


#: The ``input_scale`` the benchmark's W4A4 weights declare.
A4_INPUT_SCALE = 1.0 / 1024.0
#: Every name of the format vocabulary (``FORMAT_NAMES``), benchmarked.
FORMATS: dict[str, BenchFormat] = {
    n.name: BenchFormat(n.name, n.label, n.stem, A4_INPUT_SCALE if n.a4 else None)
    for n in FORMAT_NAMES.values()
}

#: The weights' seed keys keep the names the stored runs (docs/bench) were measured with.
_SEED_KEYS = {name: alias for alias, name in FORMAT_ALIASES.items()}


def rng_for(seed: int, *key: str) -> np.random.Generator:
    """A generator seeded by ``seed`` and the strings of ``key`` (shape, format, ...)."""
    return np.random.default_rng([seed, *(sum(ord(c) << (i % 24) for i, c in enumerate(k)) for k in key)])


def build_host(fmt: str, hidden: int, inter: int, seed: int, shape: str) -> FfnWeights[Any] | W8a8Ffn:
    """The host weights of bench format ``fmt``: FfnWeights, or W8a8Ffn for ``w8a8``."""
    f = FORMATS[fmt]
    scale = None if f.input_scale is None else F32(f.input_scale)
    return random_ffn(f.stem, rng_for(seed, shape, _SEED_KEYS.get(fmt, fmt)), hidden, inter, scale)


def make_layer(fmt: str, ffn: Any, cfg: FfnConfig, backend: Backend) -> DenseFfnLayer:
    """A DenseFfnLayer serving ``fmt`` with ``ffn`` in its format's slot (host weights are
    uploaded; device weights pass through)."""
    return LayerParts(cfg).put(FORMATS[fmt].stem, ffn).layer(backend)


def device_copy(layer: DenseFfnLayer, fmt: str) -> Any:
    """The layer's weights as a fresh set of device arrays (distinct addresses), in the
    container ``make_layer`` takes."""
    from metrale.cuda.weights import DeviceWeight

    def dup(w: Any) -> Any:
        return DeviceWeight(host=w.host, arrays={k: v.copy() for k, v in w.arrays.items()})

    if FORMATS[fmt].stem == "w8a8":
        w = layer.w8a8
        assert w is not None
        return W8a8Ffn(*(dup(p) for p in w.all()))
    slot = {"q2_0": layer.q2_weights, "fp8": layer.fp8_weights, "bf16": layer.bf16_weights}
    ws = slot.get(FORMATS[fmt].stem, layer.weights)
    assert ws is not None
    return FfnWeights(*(dup(p) for p in ws.all()))


def x_rows(hidden: int, seed: int, shape: str, rows: int) -> np.ndarray:
    """Activation rows ~ N(0, 0.5²) as bf16 [rows, hidden]; row r is the same for any ``rows``
    above r (so an m-row call's rows are the first m of the pool)."""
    rng = rng_for(seed, shape, "x")
    return (rng.standard_normal((rows, hidden)) * 0.5).astype(F32).astype(BF16)
