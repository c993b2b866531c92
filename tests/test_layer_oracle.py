"""The whole FFN layer against ``tests/oracle.py``'s independent derivation (arithmetic.md
§ layer, § lora): gate and up from x, their LoRA deltas (shrink, r padded to 16, expand
rounding once), h = bf16(silu(gate) · up), down and its LoRA delta, for every route (prefill
through the overlays, the fixed-row and batch-m NVFP4 routes in A16 and A4, the W8A8 arm).
A gate/up swap, a skipped delta or a rounding moved inside LoRA's expand changes these bits."""

from __future__ import annotations

from typing import Any

import numpy as np
import oracle
import pytest
from edge_inputs import edge_rows
from helpers import BF16, F32, bits
from hypothesis import given, settings
from hypothesis import strategies as st
from layer_cases import ffn_sources, lora_adapters

from metrale.reference.context import FfnConfig
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, W8a8Weight
from metrale.reference.layer import DenseFfnLayer, FfnLora, FfnWeights
from metrale.reference.lora import LoraAdapter, lora_expand, lora_shrink
from metrale.reference.w8a8_arm import W8a8Ffn

HIDDEN, INTER = 64, 96


def rows(seed: int, m: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, HIDDEN)) * np.exp2(rng.uniform(-2, 2, (m, 1)))).astype(F32).astype(BF16)


def odd_rank_lora(seed: int) -> FfnLora:
    """Adapters of rank 5 (padded to 16) whose scale·p is rarely bf16-exact."""
    return lora_adapters(np.random.default_rng(seed), HIDDEN, INTER, 5)


def weights(kind: str, seed: int) -> FfnWeights[Any]:
    src = ffn_sources(np.random.default_rng(seed), HIDDEN, INTER)
    if kind == "bf16":
        return FfnWeights(*(DenseWeight.quantize(w) for w in src))
    if kind == "fp8":
        return FfnWeights(*(Fp8Weight.quantize(w) for w in src))
    if kind == "nvfp4_a4":
        return FfnWeights(
            *(Nvfp4Weight.quantize(w, input_amax=a) for w, a in zip(src, (3.0, 3.0, 0.5), strict=True))
        )
    return FfnWeights(*(Nvfp4Weight.quantize(w) for w in src))


def check(layer: DenseFfnLayer, ws: FfnWeights[Any], lora: FfnLora | None, m: int, mode: str) -> None:
    x = rows(m, m)
    got = layer(x)
    with np.errstate(all="ignore"):
        want = oracle.ffn(x, ws.gate_proj, ws.up_proj, ws.down_proj, lora, mode)
    assert np.array_equal(bits(got), bits(want)), f"m={m}: {np.count_nonzero(bits(got) != bits(want))} differ"


@pytest.mark.parametrize("overlay", ["bf16", "fp8"])
@pytest.mark.parametrize("m", [1, 3, 40])
def test_prefill_overlay_with_lora(overlay: str, m: int) -> None:
    """A BF16 / FP8 overlay sends every m to forward_prefill."""
    ws, lora = weights(overlay, 1), odd_rank_lora(2)
    kw = {"bf16_weights": ws} if overlay == "bf16" else {"fp8_weights": ws}
    layer = DenseFfnLayer(FfnConfig(HIDDEN, INTER), lora=lora, backend="reference", **kw)
    check(layer, ws, lora, m, "A16")


@pytest.mark.parametrize("m", [1, 2, 3, 8, 40])
def test_nvfp4_routes_with_lora(m: int) -> None:
    """forward (1), forward_k2/k3, forward_km (8) and forward_prefill (40) in A16."""
    ws, lora = weights("nvfp4", 3), odd_rank_lora(4)
    layer = DenseFfnLayer(FfnConfig(HIDDEN, INTER), weights=ws, lora=lora, backend="reference")
    check(layer, ws, lora, m, "A16")


@pytest.mark.parametrize("m", [1, 4, 64])
def test_nvfp4_a4_routes(m: int) -> None:
    """A weight declaring input_scale runs A4 for 1..64 rows (gate and up share x's codes)."""
    ws = weights("nvfp4_a4", 5)
    layer = DenseFfnLayer(FfnConfig(HIDDEN, INTER), weights=ws, backend="reference")
    check(layer, ws, None, m, "A4")


@pytest.mark.parametrize("m", [1, 3, 17])
def test_w8a8_arm(m: int) -> None:
    src = ffn_sources(np.random.default_rng(6), HIDDEN, INTER)
    ws = FfnWeights(*(W8a8Weight.quantize(w) for w in src))
    layer = DenseFfnLayer(FfnConfig(HIDDEN, INTER), backend="reference")
    layer.set_w8a8_decode_weights(W8a8Ffn(*ws.all()), HIDDEN, INTER)
    check(layer, ws, None, m, "A8")


def test_lora_expand_rounds_once() -> None:
    """One projection: out + scale·p is rounded to bf16 once; rounding scale·p to bf16 first
    gives different bits for these rows (so the comparison can fail)."""
    rng = np.random.default_rng(7)
    x = rows(8, 6)
    a = (rng.standard_normal((5, HIDDEN)) * 0.25).astype(F32).astype(BF16)
    b = (rng.standard_normal((INTER, 5)) * 0.25).astype(F32).astype(BF16)
    base = rng.standard_normal((6, INTER)).astype(F32).astype(BF16)
    ad = LoraAdapter(a=a, b=b, scale=F32(0.3))
    got = lora_expand(lora_shrink(x, ad), ad, base)
    want = oracle.lora_delta(x, base, a, b, 0.3)
    assert np.array_equal(bits(got), bits(want))
    zero = np.zeros_like(base)
    delta = oracle.lora_delta(x, zero, a, b, 0.3)  # bf16(scale·p)
    twice = oracle.to_bf16(oracle.add(base.astype(F32), delta.astype(F32)))
    assert (bits(twice) != bits(want)).any()


_LAYERS: dict[str, tuple[DenseFfnLayer, FfnWeights[Any], FfnLora | None]] = {}


def _layer(kind: str) -> tuple[DenseFfnLayer, FfnWeights[Any], FfnLora | None]:
    """The property test's layers, built once: NVFP4 with LoRA, NVFP4 declaring A4, BF16 overlay."""
    if kind not in _LAYERS:
        cfg = FfnConfig(HIDDEN, INTER)
        if kind == "nvfp4_lora":
            ws, lora = weights("nvfp4", 9), odd_rank_lora(10)
            layer = DenseFfnLayer(cfg, weights=ws, lora=lora, backend="reference")
        elif kind == "nvfp4_a4":
            ws, lora = weights("nvfp4_a4", 11), None
            layer = DenseFfnLayer(cfg, weights=ws, backend="reference")
        else:
            ws, lora = weights("bf16", 12), odd_rank_lora(13)
            layer = DenseFfnLayer(cfg, bf16_weights=ws, lora=lora, backend="reference")
        _LAYERS[kind] = (layer, ws, lora)
    return _LAYERS[kind]


@settings(max_examples=20, deadline=None, print_blob=True)
@given(kind=st.sampled_from(["nvfp4_lora", "nvfp4_a4", "bf16"]), x=edge_rows(HIDDEN))
def test_layer_matches_oracle_property(kind: str, x: np.ndarray) -> None:
    """Rows with NaN, ±Inf, ±0, subnormals, ties, saturation and tiny blocks; m in 1..70, so
    the A4 layer crosses its 64-row edge (A4 up to 64 rows, A16 prefill beyond)."""
    layer, ws, lora = _layer(kind)
    mode = "A4" if kind == "nvfp4_a4" and x.shape[0] <= 64 else "A16"
    with np.errstate(all="ignore"):
        got = layer(x)
        want = oracle.ffn(x, ws.gate_proj, ws.up_proj, ws.down_proj, lora, mode)
    assert np.array_equal(bits(got), bits(want)), f"m={x.shape[0]}"
