"""The public constructors refuse bad arguments with one-line MetraleErrors naming the
argument, and a fuzz test of FfnConfig, ForwardContext, the weight
classes, FfnWeights and DenseFfnLayer with random types, shapes and dtypes sees only
MetraleErrors or working objects."""

from __future__ import annotations

import inspect
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metrale
from metrale.checkpoint.example import make_example_checkpoint
from metrale.errors import MetraleError

RNG = np.random.default_rng(0)


def _nv(n: int = 128, k: int = 64) -> metrale.Nvfp4Weight:
    return metrale.Nvfp4Weight.quantize(RNG.standard_normal((n, k), dtype=np.float32))


def test_forward_context_too_many_rows() -> None:
    cfg = metrale.FfnConfig(64, 128)
    with pytest.raises(MetraleError, match=r"^FfnBuffers: max_rows=1000000000000: the buffers need .* GiB"):
        metrale.ForwardContext(cfg, max_rows=10**12, backend="reference")


def test_seed_buffer_names_are_aliases() -> None:
    """docs/arithmetic.md § layer: the seed engine's buffer names hand back the same arrays."""
    b = metrale.ForwardContext(metrale.FfnConfig(16, 32), max_rows=2, backend="reference").buffers
    assert (
        b.moe_output() is b.output()
        and b.expert_gate_out() is b.gate_out()
        and b.expert_up_out() is b.up_out()
    )
    assert b.output().shape == (2, 16) and b.gate_out().shape == (2, 32) and b.gate_out() is not b.up_out()


def test_nvfp4_scale_of_the_wrong_type() -> None:
    w = _nv()
    with pytest.raises(
        MetraleError, match=r"^weight\.weight_scale_2: must be a finite f32 scalar, got str 'a'$"
    ):
        metrale.Nvfp4Weight(w.weight, w.weight_scale, "a")  # type: ignore[arg-type]
    with pytest.raises(MetraleError, match=r"^weight\.input_scale: must be a finite positive f32 scalar"):
        metrale.Nvfp4Weight(w.weight, w.weight_scale, w.weight_scale_2, [1.0])  # type: ignore[arg-type]
    with pytest.raises(MetraleError, match=r"^Nvfp4Weight: name=3 is an int, want a str$"):
        metrale.Nvfp4Weight(w.weight, w.weight_scale, w.weight_scale_2, name=3)  # type: ignore[arg-type]


def test_ffn_weights_of_none() -> None:
    with pytest.raises(MetraleError, match=r"^FfnWeights: gate_proj is a NoneType, want a metrale weight"):
        metrale.FfnWeights(None, None, None)


def test_ffn_config_takes_numpy_integers() -> None:
    cfg = metrale.FfnConfig(np.int64(64), np.int32(128))  # type: ignore[arg-type]
    assert cfg == metrale.FfnConfig(64, 128) and type(cfg.hidden_size) is int
    with pytest.raises(MetraleError, match=r"^FfnConfig\.hidden_size=64\.0 is a float: want an int$"):
        metrale.FfnConfig(64.0, 128)  # type: ignore[arg-type]


def test_nvfp4_gate_with_q2_up_refused_at_construction() -> None:
    q2 = metrale.Q2_0Weight.quantize(RNG.standard_normal((256, 256), dtype=np.float32))
    ws = metrale.FfnWeights(_nv(256, 256), q2, _nv(256, 256))
    with pytest.raises(MetraleError, match=r"up_proj is a Q2_0 weight; Q2_0 weights go in q2_weights=$"):
        metrale.DenseFfnLayer(metrale.FfnConfig(256, 256), weights=ws, backend="reference")


def test_load_ffn_layer_argument_types(tmp_path: Path) -> None:
    src = make_example_checkpoint(tmp_path / "src")
    with pytest.raises(MetraleError, match=r"^load_ffn_layer: layer='0' is a str, want an int >= 0$"):
        metrale.load_ffn_layer(src, layer="0")  # type: ignore[arg-type]
    with pytest.raises(
        MetraleError, match=r"^load_ffn_layer: path is a NoneType, want a str or os\.PathLike$"
    ):
        metrale.load_ffn_layer(None)  # type: ignore[arg-type]
    a = metrale.load_ffn_layer(src, layer=np.int64(1), backend="reference")  # type: ignore[arg-type]
    b = metrale.load_ffn_layer(src, layer=1, backend="reference")
    x = RNG.standard_normal((2, 64), dtype=np.float32).astype(metrale.BF16)
    assert (a(x).view(np.uint16) == b(x).view(np.uint16)).all()


# ---- fuzz ----
DTYPES = [
    np.uint8,
    np.int8,
    np.int32,
    np.float16,
    np.float32,
    np.float64,
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
]
ints = st.one_of(
    st.integers(-64, 512),
    st.sampled_from([0, 16, 64, 256, 10**12, 2**70]),
    st.integers(1, 32).map(lambda v: np.int64(16 * v)),
)
arrays = st.builds(
    lambda shape, dt: np.zeros(shape, dtype=dt),
    st.lists(st.sampled_from([0, 1, 2, 16, 32, 64, 84]), min_size=0, max_size=3).map(tuple),
    st.sampled_from(DTYPES),
)
junk = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=4), ints, arrays, st.just([1.0])
)


def _outcome(f) -> None:  # type: ignore[no-untyped-def]
    try:
        f()
    except MetraleError as e:
        msg = str(e)
        assert msg and "\n" not in msg and len(msg) < 400, msg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(ints, junk), st.one_of(ints, junk))
def test_fuzz_ffn_config(h: object, i: object) -> None:
    _outcome(lambda: metrale.FfnConfig(h, i))  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.one_of(ints, junk), st.sampled_from([None, "reference", "nope", 3]))
def test_fuzz_forward_context(rows: object, backend: object) -> None:
    _outcome(lambda: metrale.ForwardContext(metrale.FfnConfig(16, 32), backend=backend, max_rows=rows))  # type: ignore[arg-type]


def _weight_args(draw: st.DrawFn, cls: type) -> dict[str, object]:
    good = {
        metrale.Nvfp4Weight: lambda: _nv(32, 32),
        metrale.Fp8Weight: lambda: metrale.Fp8Weight.quantize(
            RNG.standard_normal((32, 32), dtype=np.float32)
        ),
        metrale.W8a8Weight: lambda: metrale.W8a8Weight.quantize(
            RNG.standard_normal((32, 32), dtype=np.float32)
        ),
        metrale.Q2_0Weight: lambda: metrale.Q2_0Weight.quantize(
            RNG.standard_normal((2, 256), dtype=np.float32)
        ),
        metrale.DenseWeight: lambda: metrale.DenseWeight.quantize(
            RNG.standard_normal((32, 32), dtype=np.float32)
        ),
    }[cls]()
    fields = list(inspect.signature(cls).parameters)
    args = [getattr(good, f) for f in fields]
    j = draw(st.integers(0, len(args) - 1))
    args[j] = draw(junk)
    return dict(zip(fields, args, strict=True))


@settings(max_examples=400, deadline=None)
@given(
    st.data(),
    st.sampled_from(
        [metrale.Nvfp4Weight, metrale.Fp8Weight, metrale.W8a8Weight, metrale.Q2_0Weight, metrale.DenseWeight]
    ),
)
def test_fuzz_weight_classes(data: st.DataObject, cls: type) -> None:
    args = _weight_args(data.draw, cls)
    _outcome(lambda: cls(**args))
    _outcome(lambda: cls.quantize(data.draw(junk)))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fuzz_ffn_weights_and_layer(data: st.DataObject) -> None:
    pool = [_nv(32, 16), _nv(16, 32), _nv(32, 32), None, "w", np.zeros((32, 16), np.uint8)]
    pool.append(metrale.Fp8Weight.quantize(RNG.standard_normal((32, 16), dtype=np.float32)))
    parts = [data.draw(st.sampled_from(pool)) for _ in range(3)]
    slot = data.draw(st.sampled_from(["weights", "fp8_weights", "q2_weights", "bf16_weights"]))
    cfg = data.draw(st.sampled_from([metrale.FfnConfig(16, 32), metrale.FfnConfig(32, 32), "cfg"]))

    def build() -> None:
        ws = metrale.FfnWeights(*parts)
        layer = metrale.DenseFfnLayer(cfg, backend="reference", **{slot: ws})  # type: ignore[arg-type]
        x = np.ones((3, layer.config.hidden_size), metrale.BF16)
        assert layer(x).shape == (3, layer.config.hidden_size)

    _outcome(build)
