"""The ``w4a4-all`` weight-quantization tier (arithmetic.md § tier): a layer declaring A4 runs
every row count A4, prefill included, so row r of an m-row call has the one-row call's bits on
both sides of the 64-row edge; the seed engine's tiers ``w4a4`` and ``w4a4-batch`` do not (they
switch arithmetic at the edge), ``w4a16`` does. Routing by the launch log; the tier is a
layer's own (``DenseFfnLayer(weight_quant=)``, ``MetraleFfn``'s default) or process-wide."""

from __future__ import annotations

import layer_cases as lc
import numpy as np
import pytest

from metrale.errors import MetraleError
from metrale.reference.activations import quantize_a4
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.layer import DenseFfnLayer
from metrale.reference.projection import project
from metrale.reference.tables import act_mul

ALL = "w4a4-all"
ROW_COUNTS = (1, 2, 63, 64, 65, 70, 130)
A4_FFN = lc.A4_FFN
A16_PREFILL = ["w4a16_gemm_dual", "act_mul_silu", "w4a16_gemm"]


def _layer(kind: str, weight_quant: str | None = ALL, seed: int = 3) -> DenseFfnLayer:
    h, i = lc.default_shape(kind)
    layer = lc.make_parts(kind, h, i, seed).layer(lc.backend_for("reference"))
    layer.set_weight_quant(weight_quant)
    return layer


def _x(layer: DenseFfnLayer, m: int, seed: int, nonfinite: bool = True) -> np.ndarray:
    h = layer.config.hidden_size
    pool = (lc.x_pool if nonfinite else lc.finite_pool)(seed, 64, h)
    return pool[lc.row_indices(seed, 64, m)]


def _one_row_each(layer: DenseFfnLayer, x: np.ndarray) -> np.ndarray:
    """Each row of x through ``forward`` alone (the decode step), output bits [m, hidden]."""
    outs = []
    for r in range(x.shape[0]):
        ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=1)
        lc.run_entry(layer, "forward", x[r : r + 1], ctx)
        outs.append(lc.bits(ctx.backend.to_numpy(ctx.buffers.output())))
    return np.concatenate(outs)


def _entries(m: int) -> list[str]:
    fixed = {1: ["forward"], 2: ["forward_k2"], 3: ["forward_k3"]}.get(m, [])
    return [*fixed, "forward_km", "forward_prefill", "__call__"]


def _call(layer: DenseFfnLayer, entry: str, x: np.ndarray) -> np.ndarray:
    if entry == "__call__":
        return lc.bits(layer(x))
    return lc.run_guarded(layer, entry, x)


@pytest.mark.parametrize("kind", ["nvfp4_a4", "nvfp4_a4_lora"])
@pytest.mark.parametrize("m", ROW_COUNTS)
def test_every_row_count_has_the_one_row_bits(kind: str, m: int) -> None:
    """Under w4a4-all every entry point's row r equals the one-row call on row r, bit for bit
    (NaN/Inf edge rows included), and every call ran A4 (no A16 kernel launched)."""
    layer = _layer(kind)
    x = _x(layer, m, seed=m)
    with np.errstate(all="ignore"):
        want = _one_row_each(layer, x)
        for entry in _entries(m):
            layer.backend.launches.clear()
            got = _call(layer, entry, x)
            ran = set(layer.backend.launches)
            assert "w4a4_gemv_small_m" in ran and not any(k.startswith("w4a16") for k in ran), (entry, ran)
            bad = np.argwhere(got != want)
            assert not bad.size, f"{kind} {entry} m={m}: row {bad[0][0]} differs from its one-row call"


def test_one_row_call_is_the_a4_ffn() -> None:
    """The one-row reference above is the A4 FFN of § projection: h = act_mul(gate(x), up(x))
    on one A4 quantization of x, y = down(A4 of h)."""
    layer = _layer("nvfp4_a4")
    w = layer.weights
    assert w is not None
    x = _x(layer, 9, seed=9, nonfinite=False)
    codes = quantize_a4(x, w.gate_proj.input_scale)
    hid = act_mul(
        project(None, w.gate_proj, "A4", codes=codes), project(None, w.up_proj, "A4", codes=codes), "silu"
    )
    want = project(hid, w.down_proj, "A4")
    assert (_one_row_each(layer, x) == lc.bits(want)).all()
    assert (lc.bits(project(hid, w.down_proj, "A16")) != lc.bits(want)).any(), "A4 and A16 agree here"


@pytest.mark.parametrize(
    ("tier", "invariant"),
    [("w4a4", False), ("w4a4-batch", False), ("w4a16", True), (ALL, True)],
)
def test_which_tiers_are_invariant_across_the_64_row_edge(tier: str, invariant: bool) -> None:
    """Rows 0..63 of a 64-row call against the same rows of a 65-row call (one past the edge):
    equal only under w4a16 and w4a4-all (w4a4 and w4a4-batch run 64 rows A4, 65 rows A16),
    and under those two every row also has its one-row bits."""
    layer = _layer("nvfp4_a4", tier)
    x = _x(layer, 65, seed=11, nonfinite=False)
    with np.errstate(all="ignore"):
        y64, y65 = lc.bits(layer(x[:64])), lc.bits(layer(x))
        assert bool((y64 == y65[:64]).all()) is invariant, tier
        if invariant:
            assert (y65 == _one_row_each(layer, x)).all(), tier


@pytest.mark.parametrize("m", [65, 130])
def test_prefill_routes_a4_under_the_all_rows_tier(m: int) -> None:
    layer = _layer("nvfp4_a4")
    x = _x(layer, m, seed=1, nonfinite=False)
    assert layer.route(m)[0] == "forward_prefill"
    layer.backend.launches.clear()
    layer(x)
    assert layer.backend.launches == A4_FFN
    layer.set_weight_quant(None)  # the process-wide default, w4a4: prefill is A16
    layer.backend.launches.clear()
    layer(x)
    assert layer.backend.launches == A16_PREFILL


def test_prefill_a4_with_lora_and_forward_km_past_64() -> None:
    lora = _layer("nvfp4_a4_lora")
    x = _x(lora, 70, seed=2, nonfinite=False)
    lora.backend.launches.clear()
    lc.run_guarded(lora, "forward_prefill", x)
    adapters = ["lora_shrink", "lora_expand"]
    assert lora.backend.launches == [*A4_FFN[:3], *adapters, *adapters, *A4_FFN[3:], *adapters]
    plain = _layer("nvfp4_a4")
    plain.backend.launches.clear()
    lc.run_guarded(plain, "forward_km", x)
    assert plain.backend.launches == A4_FFN


@pytest.mark.parametrize(("kind", "want"), [("nvfp4", A16_PREFILL), ("nvfp4_bf16", None)])
def test_layers_without_a4_keep_their_prefill(kind: str, want: list[str] | None) -> None:
    """The tier changes only layers declaring A4: plain NVFP4 prefill stays on w4a16_gemm_dual and
    w4a16_gemm, an overlay on its own GEMM."""
    layer = _layer(kind)
    x = _x(layer, 65, seed=4, nonfinite=False)
    layer.backend.launches.clear()
    layer(x)
    if want is None:
        want = ["dense_gemm", "dense_gemm", "act_mul_silu", "dense_gemm"]
    assert layer.backend.launches == want


def test_seed_w4a4_refuses_forward_km_past_64() -> None:
    layer = _layer("nvfp4_a4", None)
    x = _x(layer, 65, seed=5, nonfinite=False)
    with pytest.raises(MetraleError, match=r"W4A4 serves up to 64 rows \(m=65\)"):
        lc.run_guarded(layer, "forward_km", x)


def test_a_layers_tier_leaves_the_process_wide_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", "w4a16")
    lc.weight_quantization.cache_clear()
    h, i = lc.default_shape("nvfp4_a4")
    parts = lc.make_parts("nvfp4_a4", h, i, 6)
    own = DenseFfnLayer(FfnConfig(h, i), weights=parts.weights, backend="reference", weight_quant=ALL)
    env = DenseFfnLayer(FfnConfig(h, i), weights=parts.weights, backend="reference")
    assert own.weight_quant().mode == ALL and env.weight_quant().mode == "w4a16"
    assert lc.weight_quantization().mode == "w4a16"
    x = _x(own, 3, seed=6, nonfinite=False)
    own(x)
    env(x)
    assert own.backend.launches[0] == "w4a4_quantize"
    assert env.backend.launches[0] == "w4a16_gemv_dual_batch3"


def test_the_all_rows_tier_process_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """METRALE_WEIGHT_QUANT=w4a4-all: layers without their own tier run it, and ``project``
    infers A4 past 64 rows."""
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", ALL)
    lc.weight_quantization.cache_clear()
    layer = _layer("nvfp4_a4", None)
    x = _x(layer, 65, seed=7, nonfinite=False)
    layer(x)
    assert layer.backend.launches == A4_FFN
    w = layer.weights
    assert w is not None
    assert (lc.bits(project(x, w.gate_proj)) == lc.bits(project(x, w.gate_proj, "A4"))).all()


@pytest.mark.parametrize("bad", ["w4a8", "", 4])
def test_bad_layer_tier(bad: object) -> None:
    h, i = lc.default_shape("nvfp4_a4")
    parts = lc.make_parts("nvfp4_a4", h, i, 6)
    with pytest.raises(MetraleError, match=r"^weight_quant=.* want one of w4a4, w4a4-batch, w4a16, w4a4-all"):
        DenseFfnLayer(FfnConfig(h, i), weights=parts.weights, backend="reference", weight_quant=bad)  # type: ignore[arg-type]
