"""Routing of ``DenseFfnLayer`` (arithmetic.md § routes), asserted by the backend's launch log.

Expected kernel sequences are written out from the seed engine's routing (its dense FFN decode,
W8A8 arm and quantized dispatch), not computed by the layer. Reference backend only:
the launch log is the routing, whatever backend runs it.
"""

from __future__ import annotations

import layer_cases as lc
import numpy as np
import pytest
from helpers import assert_bits_equal

from metrale.errors import MetraleError
from metrale.reference.backend import Backend
from metrale.reference.context import ForwardContext
from metrale.reference.dispatch import quant_gemm, quant_gemm_pair, quant_gemv
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, W8a8Weight
from metrale.reference.kernels import ReferenceBackend
from metrale.reference.layer import DenseFfnLayer, FfnLora
from metrale.reference.tiers import WEIGHT_QUANT_CHOICES, W4a16BatchmTiers, WeightQuantTier

HID, INTER = 48, 80


def set_mode(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", mode)
    lc.weight_quantization.cache_clear()


def make_layer(kind: str, backend: Backend | None = None, **overrides: object) -> DenseFfnLayer:
    h, i = lc.default_shape(kind)
    parts = lc.make_parts(kind, h, i, seed=11)
    for k, v in overrides.items():
        setattr(parts, k, v)
    return parts.layer(backend or ReferenceBackend())


def launches(layer: DenseFfnLayer, entry: str, m: int) -> list[str]:
    """The kernels ``entry`` launches for m seeded rows (in order)."""
    x = lc.random_rows(np.random.default_rng(m), m, layer.config.hidden_size)
    ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=max(m, 64))
    layer.backend.launches.clear()
    lc.run_entry(layer, entry, x, ctx)
    return list(layer.backend.launches)


def ffn(proj: str, act: str = "act_mul_silu", gate_up: list[str] | None = None) -> list[str]:
    """gate, up, act_mul, down, each projection through ``proj``."""
    return [*(gate_up or [proj, proj]), act, proj]


A4_FFN = lc.A4_FFN
#: NVFP4 × A16 prefill: gate and up in one ``w4a16_gemm_dual`` launch, then act_mul and down.
PREFILL = ffn("w4a16_gemm", gate_up=["w4a16_gemm_dual"])
#: The W8A8 arm: gate, up and h's A8 codes in one kernel, then down; the seed engine's form
#: (the SiLU step beside down) where the backend lacks the first.
W8A8_ARM = ["w8a8_quantize", "w8a8_gemv_dual_silu_quant", "w8a8_gemv"]
W8A8_SEED_ARM = ["w8a8_quantize", "w8a8_gemv_dual", "w8a8_silu_quant_gemv"]


# ---- forward (1 row) ------------------------------------------------------------------------


def test_forward_nvfp4_a16() -> None:
    assert launches(make_layer("nvfp4"), "forward", 1) == ffn("w4a16_gemv")


@pytest.mark.parametrize(
    ("mode", "want"),
    [("w4a4", A4_FFN), ("w4a4-batch", ffn("w4a16_gemv")), ("w4a16", ffn("w4a16_gemv"))],
)
def test_forward_declaring_a4_follows_the_tier(
    mode: str, want: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """w4a4: forward -> forward_km, one w4a4_quantize shared by gate and up, another for down."""
    set_mode(monkeypatch, mode)
    assert launches(make_layer("nvfp4_a4"), "forward", 1) == want


def test_forward_gelu() -> None:
    assert launches(make_layer("nvfp4_gelu"), "forward", 1) == ffn("w4a16_gemv", "act_mul_gelu")


# ---- forward_k2 / forward_k3 -----------------------------------------------------------------


@pytest.mark.parametrize("m", [2, 3])
def test_fixed_rows_nvfp4(m: int) -> None:
    want = [f"w4a16_gemv_dual_batch{m}", "act_mul_silu", f"w4a16_gemv_batch{m}"]
    assert launches(make_layer("nvfp4"), f"forward_k{m}", m) == want


@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("mode", ["w4a4", "w4a4-batch", "w4a16"])
def test_fixed_rows_declaring_a4(m: int, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """small_batch_w4a4 and can_forward_km(m) -> forward_km (A4); else the dual kernels."""
    set_mode(monkeypatch, mode)
    layer = make_layer("nvfp4_a4")
    dual = [f"w4a16_gemv_dual_batch{m}", "act_mul_silu", f"w4a16_gemv_batch{m}"]
    assert layer.small_batch_w4a4() is (mode != "w4a16")
    assert launches(layer, f"forward_k{m}", m) == (dual if mode == "w4a16" else A4_FFN)


@pytest.mark.parametrize("m", [2, 3])
def test_fixed_rows_without_batch4_tier_use_dual_kernels(m: int) -> None:
    """can_forward_km(m) is false when the batch4 tier is missing: the W4A16 dual kernels run."""
    layer = make_layer("nvfp4_a4", ReferenceBackend().without(["w4a16_gemv_batch4"]))
    assert layer.small_batch_w4a4() and not layer.can_forward_km(m)
    assert launches(layer, f"forward_k{m}", m)[0] == f"w4a16_gemv_dual_batch{m}"


@pytest.mark.parametrize("missing", ["w4a4_quantize", "w4a4_gemv_small_m"])
def test_missing_w4a4_kernels_undeclare_a4(missing: str) -> None:
    layer = make_layer("nvfp4_a4", ReferenceBackend().without([missing]))
    assert not layer.declares_a4() and not layer.small_batch_w4a4() and not layer.single_row_w4a4()
    assert not W4a16BatchmTiers(layer.backend).declares_a4(layer.weights.gate_proj)
    assert launches(layer, "forward", 1) == ffn("w4a16_gemv")
    assert launches(layer, "forward_k2", 2)[0] == "w4a16_gemv_dual_batch2"
    assert layer.narrow_rows() == 32


def test_up_with_its_own_input_scale_quantizes_again() -> None:
    """Gate and up share one quantization only when their input_scale agrees."""
    parts = lc.make_parts("nvfp4_a4", HID, INTER, seed=3)
    up = parts.weights.up_proj
    parts.weights = lc.FfnWeights(
        parts.weights.gate_proj,
        Nvfp4Weight(up.weight, up.weight_scale, up.weight_scale_2, np.float32(up.input_scale * 2), "up_proj"),
        parts.weights.down_proj,
    )
    got = launches(parts.layer(ReferenceBackend()), "forward", 1)
    assert got == ["w4a4_quantize", "w4a4_gemv_small_m", "w4a4_quantize", "w4a4_gemv_small_m", *A4_FFN[3:]]


# ---- forward_km tiers ------------------------------------------------------------------------

TIERS = {1: 4, 2: 4, 3: 4, 4: 4, 5: 8, 8: 8, 9: 16, 16: 16, 17: 32, 32: 32}


@pytest.mark.parametrize(("m", "tier"), TIERS.items())
def test_forward_km_tiers(m: int, tier: int) -> None:
    layer = make_layer("nvfp4")
    assert layer.batchm_kernel(m) == f"w4a16_gemv_batch{tier}"
    assert launches(layer, "forward_km", m) == ffn(f"w4a16_gemv_batch{tier}")


@pytest.mark.parametrize("m", [33, 40, 64])
def test_forward_km_a4_rows_past_32(m: int) -> None:
    layer = make_layer("nvfp4_a4")
    assert layer.batchm_kernel(m) == "w4a16_gemv_batch32" and layer.can_forward_km(m)
    assert launches(layer, "forward_km", m) == A4_FFN


@pytest.mark.parametrize(("kind", "mode"), [("nvfp4", "w4a4"), ("nvfp4_a4", "w4a16")])
def test_forward_km_33_without_a4_hits_the_cap(kind: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    set_mode(monkeypatch, mode)
    layer = make_layer(kind)
    with pytest.raises(MetraleError) as e:
        launches(layer, "forward_km", 33)
    assert str(e.value) == "w4a16_gemv_batchm caps at M=32 (batch32; m=33)"
    assert layer.backend.launches == []


def test_forward_km_a4_single_row_under_w4a4_batch_is_a16(monkeypatch: pytest.MonkeyPatch) -> None:
    set_mode(monkeypatch, "w4a4-batch")
    assert launches(make_layer("nvfp4_a4"), "forward_km", 1) == ffn("w4a16_gemv_batch4")
    assert launches(make_layer("nvfp4_a4"), "forward_km", 2) == A4_FFN


def test_forward_km_on_q2_layer_has_no_arm() -> None:
    layer = make_layer("q2")
    assert not layer.can_forward_km(2)
    with pytest.raises(MetraleError, match="forward_km: the layer has no NVFP4 weights"):
        launches(layer, "forward_km", 2)


# ---- packed Q2 -------------------------------------------------------------------------------


def test_q2_routes() -> None:
    layer = make_layer("q2")
    assert launches(layer, "forward", 1) == ffn("q2_0_gemv_vec")
    assert launches(layer, "forward_k2", 2) == ffn("q2_0_gemv_vec_batchm")
    assert launches(layer, "forward_k3", 3) == ffn("q2_0_gemv_vec_batchm")
    assert launches(layer, "forward_prefill", 5) == ffn("q2_0_gemm", gate_up=["q2_0_gemm_dual"])
    assert launches(layer, "forward_km_q2", 4) == ffn("q2_0_gemv_vec_batchm")
    lean = make_layer("q2", ReferenceBackend().without(["q2_0_gemm_dual"]))
    assert launches(lean, "forward_prefill", 5) == ffn("q2_0_gemm")


# ---- overlays --------------------------------------------------------------------------------

ENTRIES = [("forward", 1), ("forward_k2", 2), ("forward_k3", 3), ("forward_km", 4), ("forward_km", 33)]
ENTRIES += [("forward_prefill", 1), ("forward_prefill", 64), ("forward_prefill", 100)]


@pytest.mark.parametrize(("entry", "m"), ENTRIES)
@pytest.mark.parametrize(
    ("kind", "gemm"), [("fp8", "w8a16_gemm"), ("bf16", "dense_gemm"), ("nvfp4_bf16", "dense_gemm")]
)
def test_overlays_go_to_prefill(kind: str, gemm: str, entry: str, m: int) -> None:
    assert launches(make_layer(kind), entry, m) == ffn(gemm)


def test_can_forward_km_by_weights() -> None:
    assert make_layer("fp8").can_forward_km(32) and not make_layer("fp8").can_forward_km(33)
    assert not make_layer("bf16").can_forward_km(4)
    assert make_layer("nvfp4").can_forward_km(1) and not make_layer("nvfp4").can_forward_km(33)
    assert make_layer("nvfp4_a4").can_forward_km(64) and not make_layer("nvfp4_a4").can_forward_km(65)


# ---- W8A8 arm --------------------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "m"), [*ENTRIES[:5], ("forward_prefill", 1), ("forward_prefill", 64)])
@pytest.mark.parametrize("kind", ["w8a8", "w8a8_only"])
def test_w8a8_arm_first_from_every_entry(kind: str, entry: str, m: int) -> None:
    assert launches(make_layer(kind), entry, m) == W8A8_ARM


def _arm_refused(layer: DenseFfnLayer, m: int) -> None:
    ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=max(m, 1))
    x = layer.backend.rows(lc.random_rows(np.random.default_rng(0), m, HID), HID)
    layer.backend.launches.clear()
    assert layer.forward_w8a8(x, m, ctx) is False
    assert layer.backend.launches == []


def test_w8a8_arm_refuses_without_weights() -> None:
    _arm_refused(make_layer("nvfp4"), 1)


def test_w8a8_arm_refuses_with_lora() -> None:
    layer = make_layer("w8a8", lora=lc.lora_adapters(np.random.default_rng(0), HID, INTER, rank=4))
    _arm_refused(layer, 2)
    assert launches(layer, "forward_k2", 2)[:2] == ["w4a16_gemv_dual_batch2", "lora_shrink"]


@pytest.mark.parametrize("m", [65, 100])
def test_w8a8_arm_refuses_rows_past_64(m: int) -> None:
    layer = make_layer("w8a8")
    _arm_refused(layer, m)
    assert launches(layer, "forward_prefill", m) == PREFILL


def test_w8a8_only_prefill_past_64_runs_the_arm_in_prefill_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the arm's 64-row cap the arm's kernels run over W8A8_PREFILL_ROWS-row chunks."""
    import metrale.reference.layer as layer_mod

    assert layer_mod.W8A8_PREFILL_ROWS >= 4096
    assert launches(make_layer("w8a8_only"), "forward_prefill", 130) == W8A8_ARM
    monkeypatch.setattr(layer_mod, "W8A8_PREFILL_ROWS", 64)
    assert launches(make_layer("w8a8_only"), "forward_prefill", 130) == W8A8_ARM * 3


@pytest.mark.parametrize(
    "missing",
    [
        ["w8a8_quantize"],
        ["w8a8_gemv_dual_silu_quant", "w8a8_gemv_dual"],
        ["w8a8_gemv_dual_silu_quant", "w8a8_silu_quant_gemv"],
        ["w8a8_gemv", "w8a8_gemv_dual"],
        ["w8a8_gemv", "w8a8_silu_quant_gemv"],
    ],
)
def test_w8a8_arm_refuses_when_a_kernel_is_missing(missing: list[str]) -> None:
    """The arm refuses where neither of its forms is whole."""
    layer = make_layer("w8a8", ReferenceBackend().without(missing))
    _arm_refused(layer, 1)
    assert launches(layer, "forward", 1) == ffn("w4a16_gemv")


@pytest.mark.parametrize(
    ("missing", "arm"), [("w8a8_gemv_dual_silu_quant", W8A8_SEED_ARM), ("w8a8_gemv_dual", W8A8_ARM)]
)
@pytest.mark.parametrize("kind", ["w8a8", "w8a8_only"])
def test_w8a8_arm_runs_the_form_the_backend_has(kind: str, missing: str, arm: list[str]) -> None:
    layer = make_layer(kind, ReferenceBackend().without([missing]))
    assert launches(layer, "forward", 1) == arm
    assert launches(layer, "forward_prefill", 64) == arm


@pytest.mark.parametrize("m", [1, 5, 64])
def test_w8a8_arm_forms_give_the_same_bits(m: int) -> None:
    """The fused form (h's codes beside gate and up) and the seed engine's (beside down): the
    same output, h in gate_out and up in up_out, bit for bit."""
    x = lc.random_rows(np.random.default_rng(m), m, HID)
    got = {}
    for missing in ("w8a8_gemv_dual", "w8a8_gemv_dual_silu_quant"):
        layer = make_layer("w8a8", ReferenceBackend().without([missing]))
        ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=m)
        assert layer.forward_w8a8(layer.backend.rows(x, HID), m, ctx)
        bufs = ctx.buffers
        got[missing] = [np.asarray(b)[:m].copy() for b in (bufs.output(), bufs.gate_out(), bufs.up_out())]
    for name, a, b in zip(("output", "gate_out", "up_out"), *got.values(), strict=True):
        assert_bits_equal(a, b, f"m={m}: {name}")


# ---- LoRA --------------------------------------------------------------------------------------

LORA = ["lora_shrink", "lora_expand"]


def test_lora_per_adapter() -> None:
    layer = make_layer("nvfp4_lora")
    gv = "w4a16_gemv"
    assert launches(layer, "forward", 1) == [gv, gv, *LORA, *LORA, "act_mul_silu", gv, *LORA]
    d2, b2 = "w4a16_gemv_dual_batch2", "w4a16_gemv_batch2"
    assert launches(layer, "forward_k2", 2) == [d2, *LORA, *LORA, "act_mul_silu", b2, *LORA]
    t8 = "w4a16_gemv_batch8"
    assert launches(layer, "forward_km", 5) == [t8, t8, *LORA, *LORA, "act_mul_silu", t8, *LORA]
    gm, gd = "w4a16_gemm", "w4a16_gemm_dual"
    assert launches(layer, "forward_prefill", 40) == [gd, *LORA, *LORA, "act_mul_silu", gm, *LORA]


def test_lora_only_on_adapted_projections() -> None:
    full = lc.lora_adapters(np.random.default_rng(0), HID, INTER, rank=3)
    layer = make_layer("nvfp4", lora=FfnLora(up_proj=full.up_proj))
    assert launches(layer, "forward", 1) == ["w4a16_gemv", "w4a16_gemv", *LORA, "act_mul_silu", "w4a16_gemv"]


def test_lora_a4() -> None:
    assert launches(make_layer("nvfp4_a4_lora"), "forward_k3", 3) == A4_FFN[:3] + LORA * 2 + A4_FFN[3:] + LORA


# ---- tiers -------------------------------------------------------------------------------------


def test_kernel_for_table() -> None:
    plain = make_layer("nvfp4").weights.gate_proj
    a4 = make_layer("nvfp4_a4").weights.gate_proj
    tiers = W4a16BatchmTiers(ReferenceBackend())
    for m in range(1, 66):
        want = next((f"w4a16_gemv_batch{t}" for t in (4, 8, 16, 32) if m <= t), None)
        assert tiers.kernel_for(m, plain) == want
        assert tiers.kernel_for(m, a4) == (want or ("w4a16_gemv_batch32" if m <= 64 else None))
    assert tiers.kernel_for(0, plain) is None and tiers.kernel_for(0, a4) is None
    assert tiers.kernel_for(4, None) == "w4a16_gemv_batch4"


def test_kernel_for_missing_tier_kernel() -> None:
    tiers = W4a16BatchmTiers(ReferenceBackend().without(["w4a16_gemv_batch8"]))
    w = make_layer("nvfp4").weights.gate_proj
    assert tiers.kernel_for(4, w) == "w4a16_gemv_batch4"
    assert tiers.kernel_for(5, w) is None and tiers.kernel_for(8, w) is None
    assert tiers.kernel_for(9, w) == "w4a16_gemv_batch16"


def test_ffn_edge_and_declares_a4() -> None:
    b = ReferenceBackend()
    plain, a4 = make_layer("nvfp4").weights.gate_proj, make_layer("nvfp4_a4").weights.gate_proj
    tiers = W4a16BatchmTiers(b)
    assert tiers.ffn_edge(plain) == 32 and tiers.ffn_edge(a4) == 64
    assert not tiers.declares_a4(plain) and tiers.declares_a4(a4)
    fp8 = Fp8Weight.quantize(np.ones((16, 16), np.float32))
    assert not tiers.declares_a4(fp8) and tiers.ffn_edge(fp8) == 32
    for missing in ("w4a4_quantize", "w4a4_gemv_small_m"):
        t = W4a16BatchmTiers(b.without([missing]))
        assert not t.declares_a4(a4) and t.ffn_edge(a4) == 32 and t.kernel_for(33, a4) is None


def test_narrow_rows_and_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert make_layer("nvfp4").narrow_rows() == 32 and make_layer("nvfp4_a4").narrow_rows() == 64
    assert make_layer("q2").narrow_rows() == 32
    table = {
        "w4a4": (True, True, False),
        "w4a4-batch": (True, False, False),
        "w4a16": (False, False, False),
        "w4a4-all": (True, True, True),
    }
    for mode, switches in table.items():
        set_mode(monkeypatch, mode)
        a4, plain = make_layer("nvfp4_a4"), make_layer("nvfp4")
        assert (a4.small_batch_w4a4(), a4.single_row_w4a4(), a4.prefill_w4a4()) == switches
        assert (plain.small_batch_w4a4(), plain.single_row_w4a4(), plain.prefill_w4a4()) == (False,) * 3


# ---- WeightQuantTier -------------------------------------------------------------------------


def test_weight_quant_choices() -> None:
    assert WEIGHT_QUANT_CHOICES == ("w4a4", "w4a4-batch", "w4a16", "w4a4-all")
    want = {  # mode: (small batch, single row, prefill) for a declaring layer
        "w4a4": (True, True, False),
        "w4a4-batch": (True, False, False),
        "w4a16": (False, False, False),
        "w4a4-all": (True, True, True),
    }
    for mode, (small, single, prefill) in want.items():
        t = WeightQuantTier(mode)
        assert (t.ffn_small_batch_w4a4(True), t.ffn_single_row_w4a4(True)) == (small, single)
        assert (t.ffn_small_batch_w4a4(False), t.ffn_single_row_w4a4(False)) == (False, False)
        assert (t.ffn_prefill_w4a4(True), t.ffn_prefill_w4a4(False), t.all_rows) == (prefill, False, prefill)
        assert t.admits(1, True) is single and all(t.admits(m, True) is small for m in (2, 3, 33, 64))
        assert not any(t.admits(m, False) for m in (1, 2, 64, 65))


@pytest.mark.parametrize(
    ("env", "mode"), [(None, "w4a4"), ("w4a16", "w4a16"), (" W4A4-Batch ", "w4a4-batch")]
)
def test_weight_quant_from_env(env: str | None, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if env is not None:
        set_mode(monkeypatch, env)
    assert lc.weight_quantization() == WeightQuantTier(mode)


def test_weight_quant_is_cached_until_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lc.weight_quantization().mode == "w4a4"
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", "w4a16")
    assert lc.weight_quantization().mode == "w4a4"
    lc.weight_quantization.cache_clear()
    assert lc.weight_quantization().mode == "w4a16"


def test_bad_weight_quant_env(monkeypatch: pytest.MonkeyPatch) -> None:
    set_mode(monkeypatch, "w8a8")
    with pytest.raises(MetraleError) as e:
        lc.weight_quantization()
    assert str(e.value) == (
        "METRALE_WEIGHT_QUANT='w8a8' unknown: want one of w4a4, w4a4-batch, w4a16, w4a4-all"
    )


# ---- quant_gemv / quant_gemm -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "gemv", "gemm"),
    [
        (Nvfp4Weight, "w4a16_gemv", "w4a16_gemm"),
        (Fp8Weight, "w8a16_gemv", "w8a16_gemm"),
        (DenseWeight, "dense_gemv", "dense_gemm"),
    ],
)
def test_quant_dispatch_per_format(fmt: type, gemv: str, gemm: str) -> None:
    b = ReferenceBackend()
    w = fmt.quantize(lc.gaussian_weight(np.random.default_rng(0), 32, 48), name="w")
    x = lc.random_rows(np.random.default_rng(1), 3, 48)
    out = b.empty_bf16((3, 32))
    quant_gemv(b, x[:1], w, out[:1])
    quant_gemm(b, x, w, out)
    assert b.launches == [gemv, gemm]


def test_gate_and_up_pair_in_one_launch_where_it_can() -> None:
    """``quant_gemm_pair``: one ``w4a16_gemm_dual`` for two NVFP4 weights of one shape, with
    the bits of two ``w4a16_gemm``; two launches where the shapes differ, a weight is not NVFP4,
    or the backend lacks the dual kernel."""
    rng = np.random.default_rng(5)
    g, u = (Nvfp4Weight.quantize(lc.gaussian_weight(rng, 32, 48), name=n) for n in ("gate", "up"))
    wide = Nvfp4Weight.quantize(lc.gaussian_weight(rng, 40, 48), name="wide")
    fp8 = Fp8Weight.quantize(lc.gaussian_weight(rng, 32, 48), name="fp8")
    x = lc.random_rows(rng, 5, 48)
    b = ReferenceBackend()
    got_g, got_u, want_g, want_u = (b.empty_bf16((5, 32)) for _ in range(4))
    quant_gemm_pair(b, x, g, got_g, u, got_u)
    quant_gemm(b, x, g, want_g)
    quant_gemm(b, x, u, want_u)
    assert b.launches == ["w4a16_gemm_dual", "w4a16_gemm", "w4a16_gemm"]
    assert np.array_equal(got_g.view(np.uint16), want_g.view(np.uint16))
    assert np.array_equal(got_u.view(np.uint16), want_u.view(np.uint16))
    for gate, up in ((g, wide), (g, fp8)):
        b.launches.clear()
        quant_gemm_pair(b, x, gate, b.empty_bf16((5, gate.n)), up, b.empty_bf16((5, up.n)))
        assert b.launches == [_gemm_of(gate), _gemm_of(up)]
    lean = ReferenceBackend().without(["w4a16_gemm_dual"])
    quant_gemm_pair(lean, x, g, got_g, u, got_u)
    assert lean.launches == ["w4a16_gemm", "w4a16_gemm"]
    with pytest.raises(MetraleError, match="dual launch: gate and up must have the same shape"):
        b.launch("w4a16_gemm_dual", x, g, got_g, wide, b.empty_bf16((5, 40)))


def _gemm_of(w: object) -> str:
    return "w8a16_gemm" if isinstance(w, Fp8Weight) else "w4a16_gemm"


def test_quant_dispatch_refuses_w8a8() -> None:
    b = ReferenceBackend()
    w = W8a8Weight.quantize(np.ones((16, 16), np.float32))
    x, out = np.zeros((1, 16), lc.BF16), b.empty_bf16((1, 16))
    with pytest.raises(MetraleError, match="quant_gemv: unsupported weight type W8a8Weight"):
        quant_gemv(b, x, w, out)
    with pytest.raises(MetraleError, match="quant_gemm: unsupported weight type W8a8Weight"):
        quant_gemm(b, x, w, out)
    assert b.launches == []


# ---- __call__ -------------------------------------------------------------------------------------


def _call_launches(layer: DenseFfnLayer, m: int) -> list[str]:
    layer.backend.launches.clear()
    layer(lc.random_rows(np.random.default_rng(m), m, layer.config.hidden_size))
    return list(layer.backend.launches)


@pytest.mark.parametrize(
    ("kind", "mode", "m", "first"),
    [
        ("nvfp4", "w4a4", 1, "w4a16_gemv"),
        ("nvfp4", "w4a4", 2, "w4a16_gemv_dual_batch2"),
        ("nvfp4", "w4a4", 3, "w4a16_gemv_dual_batch3"),
        ("nvfp4", "w4a4", 17, "w4a16_gemv_batch32"),
        ("nvfp4", "w4a4", 33, "w4a16_gemm_dual"),
        ("nvfp4_a4", "w4a4", 40, "w4a4_quantize"),
        ("nvfp4_a4", "w4a4-batch", 64, "w4a4_quantize"),
        ("nvfp4_a4", "w4a16", 40, "w4a16_gemm_dual"),
        ("nvfp4_a4", "w4a4", 65, "w4a16_gemm_dual"),
        ("q2", "w4a4", 5, "q2_0_gemm_dual"),
        ("fp8", "w4a4", 5, "w8a16_gemm"),
        ("w8a8_only", "w4a4", 100, "w8a8_quantize"),
    ],
)
def test_call_picks_the_decoder_entry(
    kind: str, mode: str, m: int, first: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_mode(monkeypatch, mode)
    assert _call_launches(make_layer(kind), m)[0] == first
