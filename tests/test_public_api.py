"""The public API: ``import metrale`` names, argument errors that name the public call, the
producers' tensor shapes through the weight classes' named constructors, the format
descriptors against the classes they describe, ``project``'s inferred mode, and the FFN
buffers' meaning after every route."""

from __future__ import annotations

import layer_cases as lc
import ml_dtypes
import numpy as np
import pytest

import metrale
from metrale.reference.formats import FORMATS, spec_of, spec_of_tensors
from metrale.reference.tables import act_mul
from metrale.reference.tiers import weight_quantization

HID, INTER = 48, 80
#: safetensors dtype code -> numpy dtype, as the safetensors format defines them.
ST_DTYPES = {
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "F32": np.dtype(np.float32),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "BF16": np.dtype(ml_dtypes.bfloat16),
}


def rows(m: int, k: int = HID, seed: int = 0) -> np.ndarray:
    return lc.random_rows(np.random.default_rng(seed), m, k)


def source(n: int, k: int, seed: int = 1) -> np.ndarray:
    return lc.gaussian_weight(np.random.default_rng(seed), n, k)


def test_all_names_resolve_and_have_docstrings() -> None:
    for name in metrale.__all__:
        obj = getattr(metrale, name)
        if callable(obj) and name not in ("BF16",):
            assert (obj.__doc__ or "").strip(), f"metrale.{name} has no docstring"


def test_readme_style_use_through_import_metrale_only() -> None:
    rng = np.random.default_rng(0)

    def w(n: int, k: int) -> metrale.Nvfp4Weight:
        return metrale.Nvfp4Weight.quantize(rng.standard_normal((n, k), dtype=np.float32) * 0.05)

    layer = metrale.DenseFfnLayer(
        metrale.FfnConfig(HID, INTER),
        weights=metrale.FfnWeights(w(INTER, HID), w(INTER, HID), w(HID, INTER)),
        backend="reference",
    )
    x = rows(5)
    y = layer(x)
    assert y.dtype == metrale.BF16 and y.shape == (5, HID)
    assert (y[2:3].view(np.uint16) == layer(x[2:3]).view(np.uint16)).all()
    ctx = metrale.ForwardContext(layer.config, backend=layer.backend, max_rows=8)
    layer.forward_k2(x[:2], ctx)
    assert (ctx.buffers.output()[:2].view(np.uint16) == y[:2].view(np.uint16)).all()


# ---- argument errors name the public call -------------------------------------------------


@pytest.fixture
def nvfp4() -> metrale.FfnWeights[metrale.Nvfp4Weight]:
    return metrale.FfnWeights(
        metrale.Nvfp4Weight.quantize(source(INTER, HID, 1), name="gate_proj"),
        metrale.Nvfp4Weight.quantize(source(INTER, HID, 2), name="up_proj"),
        metrale.Nvfp4Weight.quantize(source(HID, INTER, 3), name="down_proj"),
    )


def test_weights_as_a_tuple_is_an_error(nvfp4: metrale.FfnWeights) -> None:
    want = r"^DenseFfnLayer: NVFP4 weights are a tuple, want FfnWeights"
    with pytest.raises(metrale.MetraleError, match=want):
        metrale.DenseFfnLayer(metrale.FfnConfig(HID, INTER), weights=tuple(nvfp4.all()), backend="reference")


def test_config_and_activation_types(nvfp4: metrale.FfnWeights) -> None:
    with pytest.raises(metrale.MetraleError, match=r"^DenseFfnLayer: config is a tuple, want an FfnConfig"):
        metrale.DenseFfnLayer((HID, INTER), weights=nvfp4, backend="reference")  # type: ignore[arg-type]
    with pytest.raises(metrale.MetraleError, match=r"^DenseFfnLayer: activation='relu'"):
        metrale.DenseFfnLayer(metrale.FfnConfig(HID, INTER), weights=nvfp4, activation="relu")
    layer = metrale.DenseFfnLayer(
        metrale.FfnConfig(HID, INTER), weights=nvfp4, activation="GELU", backend="reference"
    )
    assert layer.activation is metrale.FfnActivation.GELU
    with pytest.raises(metrale.MetraleError, match=r"^FfnConfig.hidden_size=True"):
        metrale.FfnConfig(True, INTER)  # type: ignore[arg-type]


def test_backend_by_name_and_wrong_type(nvfp4: metrale.FfnWeights) -> None:
    ctx = metrale.ForwardContext(metrale.FfnConfig(HID, INTER), backend="reference")
    assert ctx.backend.name == "reference"
    with pytest.raises(metrale.MetraleError, match=r"^ForwardContext: backend=int"):
        metrale.ForwardContext(metrale.FfnConfig(HID, INTER), backend=3)  # type: ignore[arg-type]
    with pytest.raises(metrale.MetraleError, match=r"^ForwardContext: config is a dict"):
        metrale.ForwardContext({"hidden_size": HID})  # type: ignore[arg-type]
    with pytest.raises(metrale.MetraleError, match=r"^DenseFfnLayer: backend=list"):
        metrale.DenseFfnLayer(metrale.FfnConfig(HID, INTER), weights=nvfp4, backend=["cuda"])


def test_entry_point_argument_types(nvfp4: metrale.FfnWeights) -> None:
    layer = metrale.DenseFfnLayer(metrale.FfnConfig(HID, INTER), weights=nvfp4, backend="reference")
    ctx = metrale.ForwardContext(layer.config, backend=layer.backend)
    with pytest.raises(metrale.MetraleError, match=r"^forward_km: m='2', want an int row count"):
        layer.forward_km(rows(2), "2", ctx)  # type: ignore[arg-type]
    with pytest.raises(metrale.MetraleError, match=r"^forward: ctx is a NoneType, want a ForwardContext"):
        layer.forward(rows(1), None)  # type: ignore[arg-type]


def test_layer_call_errors_speak_of_layer_x(nvfp4: metrale.FfnWeights) -> None:
    layer = metrale.DenseFfnLayer(metrale.FfnConfig(HID, INTER), weights=nvfp4, backend="reference")
    with pytest.raises(metrale.MetraleError, match=r"^layer\(x\): expected a numpy bf16 array, got list"):
        layer([[0.0] * HID])
    with pytest.raises(metrale.MetraleError, match=r"^layer\(x\): dtype float32, want bfloat16"):
        layer(np.zeros((1, HID), dtype=np.float32))
    with pytest.raises(metrale.MetraleError, match=r"^layer\(x\): K=32, the weight wants K=48"):
        layer(rows(1, 32))
    small = metrale.ForwardContext(layer.config, backend=layer.backend, max_rows=2)
    with pytest.raises(metrale.MetraleError, match=r"^layer\(x\) with 3 rows \(via forward_k3\): .*exceed"):
        layer(rows(3), small)


def test_project_type_errors() -> None:
    with pytest.raises(metrale.MetraleError, match=r"^project: weight is a list"):
        metrale.project(rows(1), [1, 2])  # type: ignore[arg-type]
    w = metrale.Fp8Weight.quantize(source(16, HID))
    with pytest.raises(metrale.MetraleError, match=r"^project: x: dtype float64, want bfloat16"):
        metrale.project(np.zeros((1, HID)), w)


# ---- project's inferred mode --------------------------------------------------------------


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16)


def test_project_infers_a8_for_w8a8() -> None:
    w = metrale.W8a8Weight.quantize(source(32, HID))
    x = rows(3)
    assert (_bits(metrale.project(x, w)) == _bits(metrale.project(x, w, "A8"))).all()


@pytest.mark.parametrize(
    ("tier", "m", "want"),
    [
        ("w4a4", 1, "A4"),
        ("w4a4", 64, "A4"),
        ("w4a4", 65, "A16"),
        ("w4a4-batch", 1, "A16"),
        ("w4a4-batch", 2, "A4"),
        ("w4a16", 2, "A16"),
    ],
)
def test_project_infers_the_layer_rule_for_nvfp4(
    tier: str, m: int, want: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", tier)
    weight_quantization.cache_clear()
    try:
        w = metrale.Nvfp4Weight.quantize(source(32, HID), input_amax=3.0)
        x = rows(m)
        assert (_bits(metrale.project(x, w)) == _bits(metrale.project(x, w, want))).all()
        other = "A16" if want == "A4" else "A4"
        assert (_bits(metrale.project(x, w)) != _bits(metrale.project(x, w, other))).any()
    finally:
        monkeypatch.delenv("METRALE_WEIGHT_QUANT")
        weight_quantization.cache_clear()


def test_project_without_input_scale_is_a16() -> None:
    w = metrale.Nvfp4Weight.quantize(source(32, HID))
    x = rows(2)
    assert (_bits(metrale.project(x, w)) == _bits(metrale.project(x, w, "A16"))).all()


# ---- producer shapes through named constructors -------------------------------------------


@pytest.mark.parametrize("scale_shape", [(32, 1), (32,)])
def test_row_scale_shapes_of_compressed_tensors(scale_shape: tuple[int, ...]) -> None:
    q = metrale.Fp8Weight.quantize(source(32, HID))
    w = metrale.Fp8Weight.from_tensors(
        {"weight": q.weight, "weight_scale": q.weight_scale.reshape(scale_shape)}, name="m"
    )
    assert (w.weight_scale.view(np.uint32) == q.weight_scale.view(np.uint32)).all()


def test_per_tensor_scale_broadcasts_and_bad_shapes_are_named() -> None:
    q = metrale.W8a8Weight.quantize(source(32, HID))
    w = metrale.W8a8Weight.from_tensors({"weight": q.weight, "weight_scale": np.float32([0.5])}, name="m")
    assert (w.weight_scale == np.float32(0.5)).all() and w.weight_scale.shape == (32,)
    with pytest.raises(metrale.MetraleError, match=r"^m.weight_scale: shape \[2, 16\], want \[32, 1\]"):
        bad = {"weight": q.weight, "weight_scale": np.ones((2, 16), np.float32)}
        metrale.W8a8Weight.from_tensors(bad, name="m")
    with pytest.raises(metrale.MetraleError, match=r"^m: no m.weight_scale tensor"):
        metrale.W8a8Weight.from_tensors({"weight": q.weight}, name="m")
    zp = np.ones((32, 1), np.int8)
    with pytest.raises(metrale.MetraleError, match=r"^m: asymmetric weights"):
        metrale.W8a8Weight.from_tensors(
            {"weight": q.weight, "weight_scale": q.weight_scale, "weight_zero_point": zp}, name="m"
        )


def test_gguf_q2_rows_of_flat_bytes() -> None:
    q = metrale.Q2_0Weight.quantize(source(8, 128))
    flat = q.blocks.reshape(8, -1)
    assert flat.shape == (8, 2 * 18)
    w = metrale.Q2_0Weight.from_gguf_rows(flat, name="blk.0.ffn_up.weight")
    assert (w.blocks == q.blocks).all()
    with pytest.raises(metrale.MetraleError, match=r"^blk.0.ffn_up.weight: GGUF Q2_0 rows shape \[8, 35\]"):
        metrale.Q2_0Weight.from_gguf_rows(flat[:, :35], name="blk.0.ffn_up.weight")


def test_nvfp4_scalars_as_producers_store_them() -> None:
    q = metrale.Nvfp4Weight.quantize(source(32, HID), input_amax=2.0)
    t = {
        "weight": q.weight,
        "weight_scale": q.weight_scale,
        "weight_scale_2": np.array([q.weight_scale_2], np.float32),
        "input_scale": np.array([[q.input_scale]], np.float32),
    }
    w = metrale.Nvfp4Weight.from_tensors(t, name="m")
    assert w.weight_scale_2 == q.weight_scale_2 and w.input_scale == q.input_scale
    t["weight_scale_2"] = np.ones(2, np.float32)
    with pytest.raises(metrale.MetraleError, match=r"^m.weight_scale_2: want a scalar, got shape \[2\]"):
        metrale.Nvfp4Weight.from_tensors(t, name="m")


# ---- the descriptors against the classes --------------------------------------------------


@pytest.mark.parametrize(("stem", "declares_a4"), [*((s, False) for s in sorted(FORMATS)), ("nvfp4", True)])
def test_descriptor_tensors_match_the_class(stem: str, declares_a4: bool) -> None:
    spec = FORMATS[stem]
    n, k = 16, 2 * spec.block * 2
    amax = 2.0 if declares_a4 else None
    q = spec.quantize(source(n, k), name="m", input_amax=amax)
    assert isinstance(q, spec.weight_type) and spec_of(q) is spec and spec.stem == q.format
    got = {s: (a.dtype, a.shape) for s, a in q.tensors().items()}
    want = {s: (ST_DTYPES[d], shape) for s, d, shape in spec.entries(n, k, declares_a4=declares_a4)}
    assert got == want
    back = spec.from_tensors(q.tensors(), name="m")
    for s, a in q.tensors().items():
        assert back.tensors()[s].tobytes() == a.tobytes(), s


def test_descriptor_by_weight_dtype() -> None:
    for stem in ("nvfp4", "fp8", "w8a8", "bf16"):
        q = FORMATS[stem].quantize(source(16, HID), name="m")
        assert spec_of_tensors(q.tensors(), "m").stem == stem
    with pytest.raises(metrale.MetraleError, match=r"^m.weight: dtype uint8 is not a format metrale loads"):
        spec_of_tensors({"weight": np.zeros((2, 8), np.uint8)}, "m")
    with pytest.raises(metrale.MetraleError, match=r"^m.weight: dtype int16"):
        spec_of_tensors({"weight": np.zeros((2, 8), np.int16)}, "m")
    with pytest.raises(metrale.MetraleError, match="not a metrale weight format"):
        spec_of(np.zeros(3))


def test_input_amax_refused_outside_nvfp4() -> None:
    with pytest.raises(metrale.MetraleError, match=r"^m: an input amax applies to NVFP4 only, not fp8"):
        FORMATS["fp8"].quantize(source(16, HID), name="m", input_amax=1.0)


# ---- every route leaves h in gate_out ---------------------------------------------------

H_CASES = [
    (kind, entry, m)
    for kind, mode_a in (("nvfp4", "A16"), ("q2", "A16"), ("fp8", "A16"), ("w8a8", "A8"), ("w8a8_only", "A8"))
    for entry, ms in lc.entry_ms(kind, "w4a16").items()
    for m in ms
    if m in (1, 2, 3, 5) and entry != "forward_w8a8"
]


@pytest.mark.parametrize("backend_name", lc.BACKENDS)
@pytest.mark.parametrize(("kind", "entry", "m"), H_CASES)
def test_gate_out_holds_h_after_every_route(
    kind: str, entry: str, m: int, backend_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gate_out[:m] = bf16(silu(gate(x))·up(x)), up_out[:m] = up(x), with the projections in
    the mode the route uses (A8 on the W8A8 arm, A16 otherwise)."""
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", "w4a16")
    weight_quantization.cache_clear()
    h, i = lc.default_shape(kind)
    parts = lc.make_parts(kind, h, i, seed=5)
    layer = parts.layer(lc.backend_for(backend_name))
    ctx = lc.guarded_context(layer, m)
    x = rows(m, h, seed=m)
    lc.run_entry(layer, entry, x, ctx)
    if parts.w8a8 is not None:
        g, u, mode = parts.w8a8.gate_proj, parts.w8a8.up_proj, "A8"
    else:
        ws = parts.weights or parts.q2_weights or parts.fp8_weights
        assert ws is not None
        g, u, mode = ws.gate_proj, ws.up_proj, "A16"
    up = metrale.project(x, u, mode)
    want_h = act_mul(metrale.project(x, g, mode), up, "silu")
    got_h = ctx.backend.to_numpy(ctx.buffers.gate_out())[:m]
    got_u = ctx.backend.to_numpy(ctx.buffers.up_out())[:m]
    assert (_bits(got_u) == _bits(up)).all()
    assert (_bits(got_h) == _bits(want_h)).all()
    weight_quantization.cache_clear()
