"""The seeds' errors with their exact wording, missing kernels, bad inputs, and buffers the
layer must leave alone (arithmetic.md § routes, § checks)."""

from __future__ import annotations

import layer_cases as lc
import numpy as np
import pytest

from metrale.errors import KernelMissing, MetraleError
from metrale.reference.backend import KERNEL_NAMES
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.dispatch import quant_gemm, quant_gemv, w4a16_gemv_batchm
from metrale.reference.formats import FORMATS, Nvfp4Weight, W8a8Weight
from metrale.reference.kernels import ReferenceBackend
from metrale.reference.layer import DenseFfnLayer, FfnActivation, FfnWeights
from metrale.reference.w8a8_arm import W8a8Ffn

HID, INTER = 48, 80
Q2_MISSING = (
    "q2_0_gemv_vec_batchm kernel missing in this target build — packed-Q2 batched decode "
    "(METRALE_GGUF_NATIVE_Q2, C>=2) is unavailable"
)


def parts(kind: str) -> lc.LayerParts:
    h, i = lc.default_shape(kind)
    return lc.make_parts(kind, h, i, seed=5)


def rows(m: int, k: int = HID, seed: int = 0) -> np.ndarray:
    return lc.random_rows(np.random.default_rng(seed), m, k)


def call(layer: DenseFfnLayer, entry: str, x: np.ndarray, max_rows: int = 64) -> None:
    ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=max_rows)
    lc.run_entry(layer, entry, x, ctx)


# ---- the seeds' errors ---------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["forward_k2", "forward_k3"])
def test_q2_batchm_kernel_missing(entry: str) -> None:
    layer = parts("q2").layer(ReferenceBackend().without(["q2_0_gemv_vec_batchm"]))
    m = int(entry[-1])
    with pytest.raises(KernelMissing) as e:
        call(layer, entry, rows(m, 64))
    assert str(e.value) == Q2_MISSING
    assert layer.backend.launches == []


def test_q2_batched_decode_is_silu_only() -> None:
    p = parts("q2")
    p.activation = "gelu"
    layer = p.layer(ReferenceBackend())
    with pytest.raises(MetraleError) as e:
        call(layer, "forward_k2", rows(2, 64))
    assert str(e.value) == "packed-Q2 FFN batched decode supports SiLU only (got GELU)"
    assert layer.backend.launches == []


def test_q2_missing_kernel_is_reported_before_the_activation() -> None:
    p = parts("q2")
    p.activation = "gelu"
    layer = p.layer(ReferenceBackend().without(["q2_0_gemv_vec_batchm"]))
    with pytest.raises(KernelMissing, match="q2_0_gemv_vec_batchm kernel missing"):
        call(layer, "forward_k3", rows(3, 64))


def test_w8a8_arm_fuses_silu_only() -> None:
    p = parts("w8a8")
    layer = DenseFfnLayer(p.config, weights=p.weights, activation=FfnActivation.GELU, backend="reference")
    with pytest.raises(MetraleError) as e:
        layer.set_w8a8_decode_weights(p.w8a8, HID, INTER)
    assert str(e.value) == "W8A8 FFN arm fuses SiLU only"
    assert layer.w8a8 is None


def test_w8a8_shapes() -> None:
    p = parts("w8a8")
    w = p.w8a8
    layer = DenseFfnLayer(p.config, weights=p.weights, backend="reference")
    with pytest.raises(MetraleError) as e:
        layer.set_w8a8_decode_weights(W8a8Ffn(w.gate_proj, w.up_proj, w.gate_proj), HID, INTER)
    assert (
        str(e.value)
        == "W8A8 FFN shapes [(80, 48), (80, 48), (80, 48)], want gate/up [80, 48] and down [48, 80]"
    )
    with pytest.raises(MetraleError) as e:
        layer.set_w8a8_decode_weights(w, INTER, HID)
    assert (
        str(e.value)
        == "W8A8 FFN shapes [(80, 48), (80, 48), (48, 80)], want gate/up [48, 80] and down [80, 48]"
    )
    assert layer.w8a8 is None


def test_quant_dispatch_refuses_packed_q2() -> None:
    b = ReferenceBackend()
    w = parts("q2").q2_weights.gate_proj
    x, out = rows(2, 64), b.empty_bf16((2, w.n))
    with pytest.raises(MetraleError) as e:
        quant_gemv(b, x[:1], w, out[:1])
    assert str(e.value) == "quant_gemv: PackedQ2 not routed through the generic dispatcher; use q2_0_gemv_vec"
    with pytest.raises(MetraleError) as e:
        quant_gemm(b, x, w, out)
    assert str(e.value) == (
        "quant_gemm: PackedQ2 not routed through the generic dispatcher; "
        "use the layer's transient-dequant prefill path"
    )
    assert b.launches == []


@pytest.mark.parametrize("m", [33, 48, 64])
def test_batchm_caps_at_32(m: int) -> None:
    b = ReferenceBackend()
    w = parts("nvfp4_a4").weights.gate_proj
    out = b.empty_bf16((m, w.n))
    with pytest.raises(MetraleError) as e:
        w4a16_gemv_batchm(b, "w4a16_gemv_batch32", rows(m), w, out, m)
    assert str(e.value) == f"w4a16_gemv_batchm caps at M=32 (batch32; m={m})"
    assert b.launches == []


# ---- a missing kernel anywhere -> KernelMissing naming it ----------------------------------

#: kernel -> (layer kind, entry point, m) that launches it.
USES = {
    "w4a16_gemv": ("nvfp4", "forward", 1),
    "w4a16_gemv_batch2": ("nvfp4", "forward_k2", 2),
    "w4a16_gemv_batch3": ("nvfp4", "forward_k3", 3),
    "w4a16_gemv_dual_batch2": ("nvfp4", "forward_k2", 2),
    "w4a16_gemv_dual_batch3": ("nvfp4", "forward_k3", 3),
    "w4a16_gemv_batch4": ("nvfp4", "forward_km", 3),
    "w4a16_gemv_batch8": ("nvfp4", "forward_km", 5),
    "w4a16_gemv_batch16": ("nvfp4", "forward_km", 16),
    "w4a16_gemv_batch32": ("nvfp4", "forward_km", 17),
    "w4a16_gemm": ("nvfp4", "forward_prefill", 4),
    "w8a16_gemm": ("fp8", "forward", 1),
    "dense_gemm": ("bf16", "forward_k2", 2),
    "q2_0_gemv_vec": ("q2", "forward", 1),
    "q2_0_gemm": ("q2", "forward_prefill", 4),
    "act_mul_silu": ("nvfp4", "forward", 1),
    "act_mul_gelu": ("nvfp4_gelu", "forward_k2", 2),
    "lora_shrink": ("nvfp4_lora", "forward", 1),
    "lora_expand": ("nvfp4_lora", "forward_km", 4),
}
#: Kernels whose absence changes the route instead of failing (tested in test_layer_routing):
#: the W4A4 pair (the weight no longer declares A4), the W8A8 arm's kernels (it returns False,
#: or runs its other form) and the dual prefill GEMMs (gate and up then take one GEMM each:
#: test_layer_routing); the single-row FP8/BF16 GEMVs are launched by quant_gemv only; Q2
#: batchm has the seed's error.
ROUTE_CHANGERS = {
    "w4a16_gemm_dual",
    "q2_0_gemm_dual",
    "w4a4_quantize",
    "w4a4_gemv_small_m",
    "w8a8_quantize",
    "w8a8_gemv_dual",
    "w8a8_gemv_dual_silu_quant",
    "w8a8_gemv",
    "w8a8_silu_quant_gemv",
}


def test_every_kernel_is_covered() -> None:
    assert set(USES) | ROUTE_CHANGERS | {
        "w8a16_gemv",
        "dense_gemv",
        "q2_0_gemv_vec_batchm",
    } == set(KERNEL_NAMES)


@pytest.mark.parametrize("kernel", sorted(USES))
def test_missing_kernel_is_named(kernel: str) -> None:
    kind, entry, m = USES[kernel]
    p = parts(kind)
    layer = p.layer(ReferenceBackend().without([kernel]))
    with pytest.raises(KernelMissing) as e:
        call(layer, entry, rows(m, p.config.hidden_size))
    assert str(e.value).startswith(f"{kernel} kernel missing in this target build")
    assert kernel not in layer.backend.launches


@pytest.mark.parametrize(("fmt", "kernel"), [("fp8", "w8a16_gemv"), ("bf16", "dense_gemv")])
def test_missing_single_row_gemv(fmt: str, kernel: str) -> None:
    b = ReferenceBackend().without([kernel])
    w = FORMATS[fmt].quantize(lc.gaussian_weight(np.random.default_rng(0), 16, HID), name="w")
    with pytest.raises(KernelMissing) as e:
        quant_gemv(b, rows(1), w, b.empty_bf16((1, 16)))
    assert str(e.value) == f"{kernel} kernel missing in this target build"


@pytest.mark.parametrize(
    ("kernel", "also"),
    [
        ("w8a8_quantize", []),
        ("w8a8_gemv_dual", ["w8a8_gemv_dual_silu_quant"]),
        ("w8a8_silu_quant_gemv", ["w8a8_gemv_dual_silu_quant"]),
        ("w8a8_gemv_dual", ["w8a8_gemv"]),
    ],
)
def test_missing_w8a8_kernel_past_the_arm_cap(kernel: str, also: list[str]) -> None:
    """A W8A8-only layer's prefill past 64 rows runs the kernels itself: absent, it is named
    (``also``: the fused form made incomplete too, so the seed engine's form runs)."""
    layer = parts("w8a8_only").layer(ReferenceBackend().without([kernel, *also]))
    with pytest.raises(KernelMissing, match=f"^{kernel} kernel missing in this target build"):
        call(layer, "forward_prefill", rows(65), max_rows=65)


# ---- bad inputs --------------------------------------------------------------------------------


@pytest.fixture
def nvfp4_layer() -> DenseFfnLayer:
    return parts("nvfp4").layer(ReferenceBackend())


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (np.zeros((1, 40), lc.BF16), "K=40 is not a multiple of 16"),
        (np.zeros((1, 64), lc.BF16), "K=64, the weight wants K=48"),
        (np.zeros((1, HID), np.float32), "dtype float32, want bfloat16"),
        (np.zeros((1, HID), np.float16), "dtype float16, want bfloat16"),
        (np.zeros(HID, lc.BF16), r"shape \(48,\), want 2-D \[m, K\]"),
        (np.zeros((1, 1, HID), lc.BF16), r"shape \(1, 1, 48\), want 2-D"),
        ([[0.0] * HID], "expected a numpy bf16 array, got list"),
    ],
)
@pytest.mark.parametrize("entry", ["forward", "forward_km", "forward_prefill"])
def test_bad_input_rows(nvfp4_layer: DenseFfnLayer, entry: str, x: object, message: str) -> None:
    ctx = ForwardContext(nvfp4_layer.config, backend=nvfp4_layer.backend)
    with pytest.raises(MetraleError, match=message):
        if entry == "forward":
            nvfp4_layer.forward(x, ctx)
        elif entry == "forward_km":
            nvfp4_layer.forward_km(x, 1, ctx)
        else:
            nvfp4_layer.forward_prefill(x, 1, ctx)
    assert nvfp4_layer.backend.launches == []


@pytest.mark.parametrize(
    ("entry", "m", "given"),
    [
        ("forward", 1, 2),
        ("forward_k2", 2, 3),
        ("forward_k2", 2, 1),
        ("forward_k3", 3, 2),
        ("forward_km", 4, 5),
    ],
)
def test_wrong_row_count(nvfp4_layer: DenseFfnLayer, entry: str, m: int, given: int) -> None:
    ctx = ForwardContext(nvfp4_layer.config, backend=nvfp4_layer.backend)
    x = rows(given)
    with pytest.raises(MetraleError) as e:
        if entry == "forward_km":
            nvfp4_layer.forward_km(x, m, ctx)
        else:
            getattr(nvfp4_layer, entry)(x, ctx)
    assert str(e.value) == f"{entry}: input has {given} rows, want {m}"
    assert nvfp4_layer.backend.launches == []


def test_zero_rows(nvfp4_layer: DenseFfnLayer) -> None:
    ctx = ForwardContext(nvfp4_layer.config, backend=nvfp4_layer.backend)
    with pytest.raises(MetraleError, match="forward_km: m=0 must be >= 1"):
        nvfp4_layer.forward_km(rows(0), 0, ctx)


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ("forward_km", "nvfp4"),
        ("forward_prefill", "nvfp4"),
        ("forward_km", "w8a8"),
        ("forward_prefill", "q2"),
    ],
)
def test_more_rows_than_the_buffers_hold(entry: str, kind: str) -> None:
    p = parts(kind)
    layer = p.layer(ReferenceBackend())
    ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=4)
    with pytest.raises(MetraleError) as e:
        getattr(layer, entry)(rows(5, p.config.hidden_size), 5, ctx)
    assert str(e.value) == f"{entry}: 5 rows exceed the context's buffers (4 rows)"
    assert layer.backend.launches == []


def test_fixed_rows_past_small_buffers(nvfp4_layer: DenseFfnLayer) -> None:
    ctx = ForwardContext(nvfp4_layer.config, backend=nvfp4_layer.backend, max_rows=2)
    with pytest.raises(MetraleError, match=r"forward_k3: 3 rows exceed the context's buffers \(2 rows\)"):
        nvfp4_layer.forward_k3(rows(3), ctx)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_refused_at_construction(fmt: str, bad: float) -> None:
    w = lc.gaussian_weight(np.random.default_rng(0), 16, 64)
    w[3, 7] = bad
    with pytest.raises(MetraleError) as e:
        FORMATS[fmt].quantize(w, name="up_proj")
    assert str(e.value) == f"up_proj: non-finite weight {np.float32(bad)} at [3, 7] (1 in all)"


def test_layer_refuses_mismatched_shapes() -> None:
    p = parts("nvfp4")
    w = p.weights
    with pytest.raises(MetraleError) as e:
        DenseFfnLayer(p.config, weights=FfnWeights(w.gate_proj, w.up_proj, w.gate_proj), backend="reference")
    assert (
        str(e.value)
        == "NVFP4 FFN shapes [(80, 48), (80, 48), (80, 48)], want gate/up [80, 48] and down [48, 80]"
    )


@pytest.mark.parametrize(("hidden", "inter"), [(40, 80), (48, 0), (48, -16)])
def test_config_wants_multiples_of_16(hidden: int, inter: int) -> None:
    with pytest.raises(MetraleError, match="want a positive multiple of 16"):
        FfnConfig(hidden, inter)


def test_context_backend_mismatch(nvfp4_layer: DenseFfnLayer) -> None:
    ctx = ForwardContext(nvfp4_layer.config, backend=ReferenceBackend())
    with pytest.raises(MetraleError) as e:
        nvfp4_layer.forward(rows(1), ctx)
    assert str(e.value) == "forward: the context's backend is not the layer's backend"


def test_context_config_mismatch(nvfp4_layer: DenseFfnLayer) -> None:
    ctx = ForwardContext(FfnConfig(HID, 96), backend=nvfp4_layer.backend)
    with pytest.raises(MetraleError, match=r"forward_k2: context config .* != layer config"):
        nvfp4_layer.forward_k2(rows(2), ctx)


def test_buffers_need_a_row() -> None:
    with pytest.raises(MetraleError, match="max_rows=0 must be >= 1"):
        ForwardContext(FfnConfig(HID, INTER), backend=ReferenceBackend(), max_rows=0)


# ---- outputs outside output[:m] are untouched ------------------------------------------------

GUARD_CASES = [
    (kind, mode, entry, m)
    for kind in lc.LAYER_KINDS
    for mode in (lc.WEIGHT_QUANT_MODES if kind in lc.A4_KINDS else ("w4a4",))
    for entry, ms in lc.entry_ms(kind, mode).items()
    for m in ms
    if m in (1, 2, 3, 5, 33)
]


@pytest.mark.parametrize("backend_name", lc.BACKENDS)
@pytest.mark.parametrize(("kind", "mode", "entry", "m"), GUARD_CASES)
def test_rows_past_m_keep_the_sentinel(
    kind: str, mode: str, entry: str, m: int, backend_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", mode)
    lc.weight_quantization.cache_clear()
    p = parts(kind)
    layer = p.layer(lc.backend_for(backend_name))
    ctx = lc.guarded_context(layer, m, guard=7)
    lc.run_entry(layer, entry, rows(m, p.config.hidden_size, seed=m), ctx)
    b = ctx.buffers
    for name, buf in (
        ("output", b.output()),
        ("gate", b.gate_out()),
        ("up", b.up_out()),
    ):
        host = lc.bits(ctx.backend.to_numpy(buf))
        assert (host[m:] == lc.SENTINEL_BITS).all(), f"{name} rows >= {m} overwritten"
    out = lc.bits(ctx.backend.to_numpy(b.output()))[:m]
    assert not (out == lc.SENTINEL_BITS).any(), "output[:m] not fully written"


# ---- each format in its slot (arithmetic.md § layer, "Slots") ----
@pytest.mark.parametrize(
    ("fmt", "slot", "right"),
    [
        ("w8a8", "weights", "set_w8a8_decode_weights"),
        ("q2_0", "weights", "q2_weights="),
        ("fp8", "weights", "fp8_weights="),
        ("nvfp4", "q2_weights", "weights="),
        ("bf16", "fp8_weights", "bf16_weights="),
    ],
)
def test_wrong_slot_refused_at_construction(fmt: str, slot: str, right: str) -> None:
    rng = np.random.default_rng(3)
    ws = FfnWeights(
        *(FORMATS[fmt].quantize(lc.gaussian_weight(rng, n, k), name="w") for n, k in ((256, 256),) * 3)
    )
    with pytest.raises(
        MetraleError, match=rf"^DenseFfnLayer\({slot}=\.\.\.\): gate_proj is a .* weight; .* go in "
    ) as e:
        DenseFfnLayer(FfnConfig(256, 256), backend="reference", **{slot: ws})
    assert right in str(e.value)


def test_mixed_formats_in_one_slot_refused() -> None:
    rng = np.random.default_rng(4)
    nv = [Nvfp4Weight.quantize(lc.gaussian_weight(rng, n, k)) for n, k in ((256, 256),) * 2]
    q2 = FORMATS["q2_0"].quantize(lc.gaussian_weight(rng, 256, 256), name="up")
    with pytest.raises(
        MetraleError,
        match=r"^DenseFfnLayer\(weights=\.\.\.\): up_proj is a Q2_0 weight; Q2_0 weights go in q2_weights=$",
    ):
        DenseFfnLayer(FfnConfig(256, 256), weights=FfnWeights(nv[0], q2, nv[1]), backend="reference")


def test_the_seed_names_stand_only_as_aliases() -> None:
    """The library, its tools and tests read ``W8a8Ffn`` as ``gate_proj`` / ``up_proj`` /
    ``down_proj`` (the names of ``FfnWeights``) and the buffers as ``output`` / ``gate_out`` /
    ``up_out``: the seed engine's names appear only where they are defined and where the tests
    of the aliases use them."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    allowed = {
        "metrale/reference/w8a8_arm.py",  # the W8a8Ffn aliases
        "metrale/reference/context.py",  # the buffer aliases
        "tests/test_constructors.py",  # the buffer aliases' test
        "tests/test_layer_errors.py",  # the W8a8Ffn aliases' test, and this one
    }
    attr = re.compile(r"\.(gate|up|down)\b(?![_.(])")
    seed = re.compile(r"\b(moe_output|expert_gate_out|expert_up_out)\b")
    found = []
    for sub in ("metrale", "tools", "tests"):
        for f in sorted((root / sub).rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            if rel in allowed:
                continue
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if re.match(r"\s*(from|import)\s", code):
                    continue
                if attr.search(code) or seed.search(code):
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert found == [], "the seed engine's names used:\n" + "\n".join(found)


def test_w8a8_ffn_names_and_aliases() -> None:
    rng = np.random.default_rng(5)
    g, u, d = (W8a8Weight.quantize(lc.gaussian_weight(rng, n, k)) for n, k in ((256, 256),) * 3)
    w = W8a8Ffn(g, u, d)
    assert w.all() == (w.gate_proj, w.up_proj, w.down_proj) == (w.gate, w.up, w.down) == (g, u, d)
    layer = DenseFfnLayer(FfnConfig(256, 256), backend="reference")
    with pytest.raises(MetraleError, match=r"^set_w8a8_decode_weights: up_proj is a NVFP4 weight"):
        layer.set_w8a8_decode_weights(
            W8a8Ffn(g, Nvfp4Weight.quantize(lc.gaussian_weight(rng, 256, 256)), d), 32, 64
        )
