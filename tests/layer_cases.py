"""Small dense-FFN layers, their weights and inputs, shared by the layer tests and
``tools/make_vectors.py``.

Everything here is seeded: the same arguments give the same bits. A layer is described by a
``LayerParts`` (config, activation and the weight containers of every format it carries); it
serialises to a flat dict of raw arrays (``parts_to_tensors``) and back
(``parts_from_tensors``), which is what a test vector stores. ``run_entry`` calls one named
entry point of ``DenseFfnLayer`` on any backend with sentinel-filled buffers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from metrale.backend import get_backend
from metrale.cuda import cuda_unavailable_reason
from metrale.reference.backend import Backend
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.elements import BF16, E4M3
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, W8a8Weight
from metrale.reference.layer import DenseFfnLayer, FfnLora, FfnWeights
from metrale.reference.lora import LoraAdapter
from metrale.reference.tiers import weight_quant_env as weight_quant_env  # re-exported for the tests
from metrale.reference.tiers import weight_quantization as weight_quantization  # re-exported
from metrale.reference.w8a8_arm import W8a8Ffn
from metrale.testing import PROJECTIONS, LayerParts, quantized_ffn

F32 = np.float32

# ---- backend parametrization ------------------------------------------------------------

_CUDA_REASON = cuda_unavailable_reason()
#: Skips a test where the CUDA backend cannot run (combine with the registered ``gpu`` marker).
GPU = pytest.mark.skipif(_CUDA_REASON is not None, reason=f"CUDA backend unavailable: {_CUDA_REASON}")
#: The ``backend_name`` parameters: the reference everywhere, CUDA where it can run.
BACKENDS = (
    pytest.param("reference", id="reference"),
    pytest.param("cuda", id="cuda", marks=(pytest.mark.gpu, GPU)),
)

# ---- weight-quantization tier -----------------------------------------------------------

WEIGHT_QUANT_MODES = ("w4a4", "w4a4-batch", "w4a16")


# ---- bf16 helpers -------------------------------------------------------------------------

#: A NaN pattern no kernel writes (outputs use the canonical 0x7FC0): guard-band filler.
SENTINEL_BITS = 0xFF81
#: Rows of guard band below the m rows a call may write.
GUARD_ROWS = 3


def bits(a: np.ndarray) -> np.ndarray:
    """Raw uint16 bits of a bf16 array."""
    return np.ascontiguousarray(a, dtype=BF16).view(np.uint16)


def from_bits(b: np.ndarray) -> np.ndarray:
    """bf16 array from raw uint16 bits."""
    return np.ascontiguousarray(b, dtype=np.uint16).view(BF16)


def fill_bits(buf: Any, value: int) -> None:
    """Fill a backend bf16 buffer with the raw pattern ``value`` (numpy and CuPy-like arrays,
    whose ``view`` takes a 2-byte numpy dtype)."""
    buf.view(np.uint16).fill(np.uint16(value))


# ---- inputs -------------------------------------------------------------------------------

#: Named edge rows of an activation pool (arithmetic.md § checks).
EDGE_ROWS = (
    "signed_zeros",
    "subnormals",
    "nan_block",
    "pos_inf",
    "neg_inf",
    "saturation",
    "exponent_spread",
    "ties",
    "constant",
    "tiny_normals",
)


def edge_row(name: str, k: int, rng: np.random.Generator) -> np.ndarray:
    """One bf16 row [k] of the named edge case."""
    sign = np.where(rng.random(k) < 0.5, 0x8000, 0).astype(np.uint16)
    normal = rng.standard_normal(k).astype(F32)
    if name == "signed_zeros":
        return from_bits(np.where(np.arange(k) % 2 == 1, 0x8000, 0).astype(np.uint16))
    if name == "subnormals":
        return from_bits(sign | rng.integers(1, 0x80, k).astype(np.uint16))
    if name == "nan_block":
        row = normal.astype(BF16)
        row[rng.integers(0, k)] = np.nan
        return row
    if name == "pos_inf":
        row = normal.astype(BF16)
        row[k - 1] = np.inf
        return row
    if name == "neg_inf":
        row = normal.astype(BF16)
        row[rng.integers(0, k)] = -np.inf
        return row
    if name == "saturation":  # bf16 max and its neighbours, both signs
        return from_bits(sign | rng.integers(0x7F70, 0x7F80, k).astype(np.uint16))
    if name == "exponent_spread":  # every block spans ~2^260
        e = rng.integers(-133, 127, k)
        return (np.ldexp(F32(1.0), e) * (1 + rng.integers(0, 128, k) / 128)).astype(F32).astype(
            BF16
        ) * np.where(sign != 0, -1, 1).astype(BF16)
    if name == "ties":  # block max 1.0; odd multiples of 2^-15 tie at the A16 code grid
        v = (2 * rng.integers(0, 64, k) + 1).astype(np.float64) * 2.0**-15
        v[::16] = 1.0
        return (v * np.where(sign != 0, -1, 1)).astype(F32).astype(BF16)
    if name == "constant":
        return np.full(k, 1.5, dtype=BF16)
    if name == "tiny_normals":  # smallest normal exponents
        return from_bits(sign | rng.integers(0x0080, 0x0200, k).astype(np.uint16))
    raise ValueError(f"unknown edge row {name!r}")


def random_rows(rng: np.random.Generator, m: int, k: int) -> np.ndarray:
    """Seeded bf16 rows: Gaussian with a random magnitude per row (2^-3 .. 2^3)."""
    mag = np.exp2(rng.uniform(-3, 3, (m, 1)))
    return (rng.standard_normal((m, k)) * mag).astype(F32).astype(BF16)


def x_pool(seed: int, rows: int, k: int) -> np.ndarray:
    """An activation pool [rows, k]: rows 0 .. len(EDGE_ROWS)-1 are the named edge rows (in
    EDGE_ROWS order), the rest seeded random rows."""
    rng = np.random.default_rng(seed)
    pool = random_rows(rng, rows, k)
    for slot, name in enumerate(EDGE_ROWS[:rows]):
        pool[slot] = edge_row(name, k, rng)
    return pool


def finite_pool(seed: int, rows: int, k: int) -> np.ndarray:
    """``x_pool`` with its NaN/Inf edge rows replaced by seeded random rows."""
    pool = x_pool(seed, rows, k)
    bad = [i for i, n in enumerate(EDGE_ROWS[:rows]) if n in ("nan_block", "pos_inf", "neg_inf")]
    pool[bad] = random_rows(np.random.default_rng(seed + 1), len(bad), k)
    return pool


def row_indices(seed: int, pool_rows: int, m: int) -> np.ndarray:
    """Which pool rows make up an m-row call: a seeded shuffle (repeating rows when m exceeds
    the pool) that holds at least one edge row when m > 1, and for m = 1 an edge row when
    ``seed`` is odd."""
    rng = np.random.default_rng(seed * 1000 + m)
    idx = rng.permutation(np.resize(np.arange(pool_rows), max(m, pool_rows)))[:m].astype(np.int32)
    if m > 1 or seed % 2:
        idx[rng.integers(m)] = rng.integers(min(len(EDGE_ROWS), pool_rows))
    return idx


# ---- weights ------------------------------------------------------------------------------


def gaussian_weight(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """A float32 source weight with a random magnitude per row."""
    return (rng.standard_normal((n, k)) * np.exp2(rng.uniform(-4, 0, (n, 1)))).astype(F32)


def ffn_sources(rng: np.random.Generator, hidden: int, inter: int) -> list[np.ndarray]:
    """Source weights gate, up [inter, hidden] and down [hidden, inter]."""
    return [
        gaussian_weight(rng, inter, hidden),
        gaussian_weight(rng, inter, hidden),
        gaussian_weight(rng, hidden, inter),
    ]


_NAMES = PROJECTIONS


def lora_adapters(rng: np.random.Generator, hidden: int, inter: int, rank: int) -> FfnLora:
    """Seeded adapters for gate, up (A [r, hidden], B [inter, r]) and down."""

    def adapter(n: int, k: int, scale: float) -> LoraAdapter:
        a = (rng.standard_normal((rank, k)) * 0.25).astype(F32).astype(BF16)
        b = (rng.standard_normal((n, rank)) * 0.25).astype(F32).astype(BF16)
        return LoraAdapter(a=a, b=b, scale=F32(scale))

    return FfnLora(
        gate_proj=adapter(inter, hidden, 0.5),
        up_proj=adapter(inter, hidden, 2.0),
        down_proj=adapter(hidden, inter, 0.75),
    )


#: Layer kinds: NVFP4 (A16 only / declaring A4, SiLU or GELU, with LoRA), Q2_0, FP8, BF16,
#: NVFP4 + BF16 overlay, NVFP4 + W8A8 arm, W8A8 only.
LAYER_KINDS = (
    "nvfp4",
    "nvfp4_a4",
    "nvfp4_gelu",
    "nvfp4_lora",
    "nvfp4_a4_lora",
    "q2",
    "fp8",
    "bf16",
    "nvfp4_bf16",
    "w8a8",
    "w8a8_only",
)
#: Kinds whose NVFP4 weights declare FP4 activations (their routing depends on the env mode).
A4_KINDS = ("nvfp4_a4", "nvfp4_a4_lora")
#: The kernels of one SiLU A4 FFN (gate and up share one quantization of x; down quantizes h).
A4_FFN = [
    "w4a4_quantize",
    "w4a4_gemv_small_m",
    "w4a4_gemv_small_m",
    "act_mul_silu",
    "w4a4_quantize",
    "w4a4_gemv_small_m",
]
#: The input amax the A4 kinds declare (input_scale = amax/(6·448)).
A4_INPUT_AMAX = 3.0


def default_shape(kind: str) -> tuple[int, int]:
    """(hidden, inter) of a kind's vectors: block counts 3 and 5 (Q2: 4 and 12)."""
    return (64, 192) if kind == "q2" else (48, 80)


def make_parts(kind: str, hidden: int, inter: int, seed: int) -> LayerParts:
    """A seeded layer of ``kind`` (see LAYER_KINDS) with producer-quantized weights."""
    if kind not in LAYER_KINDS:
        raise ValueError(f"unknown layer kind {kind!r}")
    rng = np.random.default_rng(seed)
    src = ffn_sources(rng, hidden, inter)
    parts = LayerParts(FfnConfig(hidden, inter))
    if kind.startswith("nvfp4") or kind == "w8a8":
        parts.put("nvfp4", quantized_ffn("nvfp4", src, A4_INPUT_AMAX if kind in A4_KINDS else None))
    if kind == "nvfp4_gelu":
        parts.activation = "gelu"
    if kind.endswith("_lora"):
        parts.lora = lora_adapters(rng, hidden, inter, rank=5)
    for stem, kinds in (("q2_0", ("q2",)), ("fp8", ("fp8",)), ("bf16", ("bf16", "nvfp4_bf16"))):
        if kind in kinds:
            parts.put(stem, quantized_ffn(stem, src))
    if kind in ("w8a8", "w8a8_only"):
        parts.put("w8a8", quantized_ffn("w8a8", ffn_sources(rng, hidden, inter)))
    return parts


# ---- serialisation (raw tensors, as a vector stores them) ---------------------------------

_RAW = {BF16: np.uint16, E4M3: np.uint8}
_CONTAINERS: dict[str, type] = {
    "weights": Nvfp4Weight,
    "bf16_weights": DenseWeight,
    "fp8_weights": Fp8Weight,
    "q2_weights": Q2_0Weight,
}


def _encode(prefix: str, obj: Any, out: dict[str, np.ndarray], dtypes: dict[str, str]) -> None:
    for f in fields(obj):
        if f.name == "name":
            continue
        v = getattr(obj, f.name)
        if v is None:
            continue
        key = f"{prefix}.{f.name}"
        out[key], dtypes[key] = encode_tensor(v)


def _decode(cls: type, prefix: str, name: str, t: dict[str, np.ndarray], dtypes: dict[str, str]) -> Any:
    kw: dict[str, Any] = {}
    for f in fields(cls):
        key = f"{prefix}.{f.name}"
        if f.name == "name" or key not in t:
            continue
        kw[f.name] = decode_tensor(t, dtypes, key)
    if "name" in {f.name for f in fields(cls)}:
        kw["name"] = name
    return cls(**kw)


def parts_to_tensors(parts: LayerParts) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(raw tensors, JSON-able meta) of a layer: e4m3 as uint8, bf16 as uint16, the rest as is."""
    t: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    for attr in _CONTAINERS:
        ws = getattr(parts, attr)
        if ws is not None:
            for nm, w in zip(_NAMES, ws.all(), strict=True):
                _encode(f"{attr}.{nm}", w, t, dtypes)
    if parts.lora is not None:
        for nm in _NAMES:
            ad = getattr(parts.lora, nm)
            if ad is not None:
                _encode(f"lora.{nm}", ad, t, dtypes)
    if parts.w8a8 is not None:
        for nm in ("gate", "up", "down"):
            _encode(f"w8a8.{nm}", getattr(parts.w8a8, nm), t, dtypes)
    meta = {
        "hidden_size": parts.config.hidden_size,
        "intermediate_size": parts.config.intermediate_size,
        "activation": parts.activation,
        "dtypes": dtypes,
    }
    return t, meta


def parts_from_tensors(t: dict[str, np.ndarray], meta: dict[str, Any]) -> LayerParts:
    """Inverse of ``parts_to_tensors``."""
    dtypes = meta["dtypes"]
    parts = LayerParts(FfnConfig(meta["hidden_size"], meta["intermediate_size"]), meta["activation"])
    for attr, cls in _CONTAINERS.items():
        if f"{attr}.gate_proj.{fields(cls)[0].name}" in t:
            setattr(parts, attr, FfnWeights(*(_decode(cls, f"{attr}.{nm}", nm, t, dtypes) for nm in _NAMES)))
    if any(k.startswith("lora.") for k in t):
        ads = {
            nm: _decode(LoraAdapter, f"lora.{nm}", nm, t, dtypes) if f"lora.{nm}.a" in t else None
            for nm in _NAMES
        }
        parts.lora = FfnLora(**ads)
    if "w8a8.gate.weight" in t:
        parts.w8a8 = W8a8Ffn(
            *(_decode(W8a8Weight, f"w8a8.{nm}", nm, t, dtypes) for nm in ("gate", "up", "down"))
        )
    return parts


def decode_tensor(t: dict[str, np.ndarray], dtypes: dict[str, str], key: str) -> Any:
    """One stored tensor in its element type (scalars as numpy scalars)."""
    a = t[key].view(np.dtype(getattr(ml_dtypes, dtypes[key], None) or dtypes[key]))
    return a[()] if a.ndim == 0 else a


def encode_tensor(a: Any) -> tuple[np.ndarray, str]:
    """(raw array, dtype name) of one tensor, as ``parts_to_tensors`` stores it."""
    a = np.asarray(a)
    raw = a.view(_RAW[a.dtype]) if a.dtype in _RAW else a
    return np.array(raw, copy=True, order="C"), a.dtype.name


def meta_json(meta: dict[str, Any]) -> str:
    """Canonical JSON (sorted keys) of a vector's meta."""
    return json.dumps(meta, sort_keys=True)


# ---- running entry points -----------------------------------------------------------------

ALL_M = (1, 2, 3, 4, 5, 8, 17, 32, 33, 64)
ENTRY_POINTS = (
    "forward",
    "forward_k2",
    "forward_k3",
    "forward_km",
    "forward_prefill",
    "forward_km_q2",
    "forward_w8a8",
)


def entry_ms(kind: str, mode: str) -> dict[str, tuple[int, ...]]:
    """The entry points that serve a layer of ``kind`` under ``METRALE_WEIGHT_QUANT=mode``,
    each with the row counts (from ALL_M) it serves."""
    out: dict[str, tuple[int, ...]] = {"forward": (1,), "forward_prefill": ALL_M}
    if kind == "q2":
        out.update(forward_k2=(2,), forward_k3=(3,), forward_km_q2=ALL_M)
        return out
    out.update(forward_k2=(2,), forward_k3=(3,))
    if kind in ("w8a8", "w8a8_only", "fp8", "bf16", "nvfp4_bf16"):
        out["forward_km"] = ALL_M  # W8A8 arm / handed to forward_prefill
    else:
        a4_rows = kind in A4_KINDS and mode in ("w4a4", "w4a4-batch")
        out["forward_km"] = tuple(m for m in ALL_M if m <= 32 or a4_rows)
    if kind in ("w8a8", "w8a8_only"):
        out["forward_w8a8"] = ALL_M
    return out


def run_entry(layer: DenseFfnLayer, entry: str, x: np.ndarray, ctx: ForwardContext) -> None:
    """Call ``entry`` of ``layer`` on the m rows of host bf16 ``x`` (moved to the backend)."""
    m = int(x.shape[0])
    xb = ctx.backend.rows(x, layer.config.hidden_size, name="x")
    calls: dict[str, Callable[[], Any]] = {
        "forward": lambda: layer.forward(xb, ctx),
        "forward_k2": lambda: layer.forward_k2(xb, ctx),
        "forward_k3": lambda: layer.forward_k3(xb, ctx),
        "forward_km": lambda: layer.forward_km(xb, m, ctx),
        "forward_prefill": lambda: layer.forward_prefill(xb, m, ctx),
        "forward_km_q2": lambda: layer.forward_km_q2(xb, ctx, m),
        "forward_w8a8": lambda: layer.forward_w8a8(xb, m, ctx),
    }
    result = calls[entry]()
    if entry == "forward_w8a8" and result is not True:
        raise AssertionError(f"forward_w8a8 returned {result!r} for m={m}")


def guarded_context(layer: DenseFfnLayer, m: int, guard: int = GUARD_ROWS) -> ForwardContext:
    """A context with ``guard`` rows more than m, every buffer filled with SENTINEL_BITS."""
    ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=m + guard)
    b = ctx.buffers
    for buf in (b.output(), b.gate_out(), b.up_out()):
        fill_bits(buf, SENTINEL_BITS)
    return ctx


def run_guarded(layer: DenseFfnLayer, entry: str, x: np.ndarray) -> np.ndarray:
    """Run ``entry`` on x with guard bands; check rows ≥ m of every buffer still hold the
    sentinel; return the bits of output[:m]."""
    m = int(x.shape[0])
    ctx = guarded_context(layer, m)
    run_entry(layer, entry, x, ctx)
    b = ctx.buffers
    for nm, buf in (
        ("output", b.output()),
        ("gate_out", b.gate_out()),
        ("up_out", b.up_out()),
    ):
        host = bits(ctx.backend.to_numpy(buf))
        bad = np.argwhere(host[m:] != SENTINEL_BITS)
        if bad.size:
            r, c = bad[0]
            raise AssertionError(f"{entry} m={m}: {nm}[{m + r}, {c}] overwritten beyond the m rows")
    return bits(ctx.backend.to_numpy(b.output()))[:m]


def backend_for(name: str) -> Backend:
    """A fresh backend by name (``reference`` or ``cuda``)."""
    return get_backend(name)


# ---- single projections: weights covering every code, and the kernels that serve them ------

#: Every e4m3 code but the two NaNs (0x7F, 0xFF).
E4M3_CODES = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)
#: (format, mode) pairs of a single projection.
PROJECTION_MODES = (
    ("nvfp4", "A16"),
    ("nvfp4", "A4"),
    ("q2_0", "A16"),
    ("fp8", "A16"),
    ("bf16", "A16"),
    ("w8a8", "A8"),
)
#: (N, K) of the projection vectors: N not a multiple of any tile, block counts 3, 5, 65
#: (Q2_0: K a multiple of 64, block counts 4, 12, 68).
PROJECTION_SHAPES = ((37, 48), (100, 80), (37, 1040))
Q2_PROJECTION_SHAPES = ((37, 64), (100, 192), (37, 1088))


def _every_code(rng: np.random.Generator, codes: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Random picks from ``codes`` in which every code appears (when the array is big enough)."""
    size = int(np.prod(shape))
    flat = rng.choice(codes, size)
    flat[: min(size, codes.size)] = codes[: min(size, codes.size)]
    return rng.permutation(flat).reshape(shape)


def projection_weight(fmt: str, n: int, k: int, seed: int) -> Any:
    """A raw-coded weight [n, k] of ``fmt``: every e2m1 nibble and e4m3 code (scales, FP8
    weights), every int8 code, Q2_0 scales with ±0, f16 subnormals and ±65504, BF16 weights with
    ±0, subnormals, bf16-max and blocks spanning many binades."""
    rng = np.random.default_rng(seed)
    if fmt == "nvfp4":
        nib = rng.integers(0, 16, (n, k)).astype(np.uint8)
        nib[0, :16] = np.arange(16)
        packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
        scale = _every_code(rng, E4M3_CODES, (n, k // 16)).view(E4M3)
        return Nvfp4Weight(
            weight=packed,
            weight_scale=scale,
            weight_scale_2=F32(1.37 * 2.0**-8),
            input_scale=F32(A4_INPUT_AMAX / (6 * 448)),
            name="proj",
        )
    if fmt == "fp8":
        w = _every_code(rng, E4M3_CODES, (n, k)).view(E4M3)
        s = np.exp2(rng.uniform(-12, 2, n)).astype(F32)
        s[0], s[1] = 0.0, -s[1]
        return Fp8Weight(weight=w, weight_scale=s, name="proj")
    if fmt == "w8a8":
        w = _every_code(rng, np.arange(-128, 128, dtype=np.int8), (n, k))
        s = np.exp2(rng.uniform(-12, 0, n)).astype(F32)
        s[0] = 0.0
        return W8a8Weight(weight=w, weight_scale=s, name="proj")
    if fmt == "bf16":
        v = rng.standard_normal((n, k)) * np.exp2(rng.integers(-24, 24, (n, k)))
        b = v.astype(F32).astype(BF16).view(np.uint16).copy()
        specials = np.array([0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80], dtype=np.uint16)
        pos = rng.choice(n * k, 4 * specials.size, replace=False)
        b.reshape(-1)[pos] = np.resize(specials, pos.size)
        return DenseWeight(weight=b.view(BF16), name="proj")
    if fmt == "q2_0":
        q = rng.integers(0, 4, (n, k)).astype(np.uint8)
        d = (rng.standard_normal((n, k // 64)) * np.exp2(rng.uniform(-16, 4, (n, k // 64)))).astype(
            np.float16
        )
        specials = np.array([0.0, -0.0, 2.0**-24, -(2.0**-20), 65504.0, -65504.0, 1.0], dtype=np.float16)
        d.reshape(-1)[: specials.size] = specials[: d.size]
        return Q2_0Weight.from_parts(q, d, name="proj")
    raise ValueError(f"unknown format {fmt!r}")


def projection_kernels(fmt: str, mode: str, m: int) -> tuple[str, ...]:
    """Every kernel (or two-launch path: ``w4a4``, ``w8a8``) that serves an m-row projection."""
    if (fmt, mode) == ("nvfp4", "A16"):
        ks = ["w4a16_gemm", "w4a16_gemm_dual"] + [f"w4a16_gemv_batch{t}" for t in (4, 8, 16, 32) if m <= t]
        ks += {
            1: ["w4a16_gemv"],
            2: ["w4a16_gemv_batch2", "w4a16_gemv_dual_batch2"],
            3: ["w4a16_gemv_batch3", "w4a16_gemv_dual_batch3"],
        }.get(m, [])
        return tuple(ks)
    if (fmt, mode) == ("nvfp4", "A4"):
        return ("w4a4",) if m <= 64 else ()
    single = {"q2_0": "q2_0_gemv_vec", "fp8": "w8a16_gemv", "bf16": "dense_gemv"}
    gemm = {"q2_0": "q2_0_gemm", "fp8": "w8a16_gemm", "bf16": "dense_gemm"}
    if fmt in gemm and mode == "A16":
        ks = [gemm[fmt]] + (["q2_0_gemm_dual", "q2_0_gemv_vec_batchm"] if fmt == "q2_0" else [])
        return tuple(ks + ([single[fmt]] if m == 1 else []))
    if (fmt, mode) == ("w8a8", "A8"):
        return ("w8a8",) if m <= 64 else ()
    raise ValueError(f"no projection for {fmt} × {mode}")


def _guarded_buffer(backend: Backend, m: int, n: int) -> Any:
    buf = backend.empty_bf16((m + GUARD_ROWS, n))
    fill_bits(buf, SENTINEL_BITS)
    return buf


def _check_guard(backend: Backend, buf: Any, m: int, what: str) -> np.ndarray:
    host = bits(backend.to_numpy(buf))
    bad = np.argwhere(host[m:] != SENTINEL_BITS)
    if bad.size:
        r, c = bad[0]
        raise AssertionError(f"{what}: row {m + r}, column {c} written beyond the m={m} rows")
    return host[:m]


def run_projection(backend: Backend, kernel: str, x: np.ndarray, weight: Any) -> list[np.ndarray]:
    """Run one projection kernel on host rows x [m, K] with guard-banded outputs, passing the
    arguments as the layer does; return the output bits (two outputs for the dual kernels)."""
    m = int(x.shape[0])
    b = backend
    w = b.upload(weight)
    xb = b.rows(x, weight.k, name="x")
    out = _guarded_buffer(b, m, weight.n)
    outs = [out]
    if kernel == "w4a4":
        b.launch("w4a4_gemv_small_m", b.launch("w4a4_quantize", xb, weight.input_scale), w, out[:m])
    elif kernel == "w8a8":
        b.launch("w8a8_gemv", b.launch("w8a8_quantize", xb), w, out[:m])
    elif kernel.startswith("w4a16_gemv_dual") or kernel in ("w4a16_gemm_dual", "q2_0_gemm_dual"):
        out1 = _guarded_buffer(b, m, weight.n)
        outs.append(out1)
        b.launch(kernel, xb, w, out[:m], w, out1[:m])
    elif kernel == "q2_0_gemv_vec_batchm" or kernel in {f"w4a16_gemv_batch{t}" for t in (4, 8, 16, 32)}:
        b.launch(kernel, xb, w, out, m)
    else:
        b.launch(kernel, xb, w, out[:m])
    return [_check_guard(b, o, m, f"{kernel} output {i}") for i, o in enumerate(outs)]


#: Rank of the LoRA vectors (padded to 16 and to 32).
LORA_RANKS = (5, 20)


def run_lora(
    backend: Backend, x: np.ndarray, adapter: LoraAdapter, base: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """lora_shrink on x [m, K], then lora_expand into a guard-banded copy of ``base`` [m, N];
    return (t bits [m, r_pad], out bits [m, N])."""
    m, n = base.shape
    b = backend
    ad = b.upload(adapter)
    t = b.launch("lora_shrink", b.rows(x, adapter.a.shape[1], name="x"), ad)
    host = np.concatenate([bits(base), np.full((GUARD_ROWS, n), SENTINEL_BITS, np.uint16)])
    out = b.rows(from_bits(host), n, name="lora out")
    b.launch("lora_expand", t, ad, out[:m])
    return bits(b.to_numpy(t)), _check_guard(b, out, m, "lora_expand")


def run_act_mul(
    backend: Backend, activation: str, gate: np.ndarray, up: np.ndarray, in_place: bool
) -> np.ndarray:
    """act_mul_{activation} on host gate/up [m, N]; the output is a guard-banded buffer or,
    with ``in_place``, gate itself (as the layer calls it). Returns the output bits."""
    m, n = gate.shape
    b = backend
    guard = np.full((GUARD_ROWS, n), SENTINEL_BITS, np.uint16)
    g = b.rows(from_bits(np.concatenate([bits(gate), guard])), n, name="gate")
    u = b.rows(up, n, name="up")
    out = g if in_place else _guarded_buffer(b, m, n)
    b.launch(f"act_mul_{activation}", g[:m], u, out[:m])
    return _check_guard(b, out, m, f"act_mul_{activation}")


def small_nvfp4_layer(seed: int = 0) -> DenseFfnLayer:
    """An NVFP4 FFN of hidden 64, intermediate 128 on the reference backend, from seeded normal
    f32 weights (quantized by Nvfp4Weight.quantize)."""
    rng = np.random.default_rng(seed)

    def w(n: int, k: int) -> Nvfp4Weight:
        return Nvfp4Weight.quantize(rng.standard_normal((n, k), dtype=np.float32))

    return DenseFfnLayer(
        FfnConfig(64, 128), weights=FfnWeights(w(128, 64), w(128, 64), w(64, 128)), backend="reference"
    )
