"""MetraleFfn under hostile use: owned buffers, compile with grad, pickling after a
forward, one-line MetraleErrors for bad arguments, and a fuzz of construction and forward."""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from metrale.checkpoint.load import build_ffn_layer
from metrale.errors import MetraleError
from metrale.reference.context import FfnConfig
from metrale.reference.elements import BF16
from metrale.reference.layer import FfnActivation
from metrale.torch import MetraleFfn, dense_ffn
from tests.test_torch_ffn import INTER, H, _bits, _weights, _x

CFG = FfnConfig(H, INTER)


def _ref_bits(ws: list, act: str, x: torch.Tensor) -> np.ndarray:
    """The CPU reference layer's output bits for bf16 x [..., H] (int16, x's shape)."""
    ref = build_ffn_layer(CFG, FfnActivation(act), ws, "reference", "test")
    y = ref(x.reshape(-1, H).contiguous().view(torch.int16).numpy().view(BF16))
    return y.view(np.int16).reshape(x.shape)


def test_modules_own_their_buffers() -> None:
    """Two modules from the same weights: loading a state dict into one changes neither the
    other nor the caller's arrays."""
    ws = _weights("nvfp4", 1)
    before = [w.weight.copy() for w in ws]
    a = MetraleFfn.from_weights(CFG, ws, "silu")
    b = MetraleFfn.from_weights(CFG, ws, "silu")
    x = _x((3, H), 2)
    ya = _bits(a(x))
    b.load_state_dict(MetraleFfn.from_weights(CFG, _weights("nvfp4", 9), "silu").state_dict())
    assert (_bits(b(x)) != ya).any()
    assert (_bits(a(x)) == ya).all()
    for w, w0 in zip(ws, before, strict=True):
        assert (w.weight.view(np.uint8) == w0.view(np.uint8)).all(), w.name
    c = MetraleFfn.from_layer(build_ffn_layer(CFG, FfnActivation.SiLU, ws, "reference", "t"))
    c.gate_proj_weight.zero_()
    assert (ws[0].weight.view(np.uint8) == before[0].view(np.uint8)).all()
    assert (_bits(a(x)) == ya).all()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_forward_with_grad_enabled(backend: str) -> None:
    """A compiled forward outside no_grad runs (the same bits as eager); backward refuses."""
    torch._dynamo.reset()
    ws = _weights("nvfp4", 3)
    ffn = MetraleFfn.from_weights(CFG, ws, "silu")
    x = _x((3, H), 4)
    if backend == "aot_eager":
        y = torch.compile(ffn, fullgraph=True, backend="aot_eager")(x.clone().requires_grad_())
        assert (_bits(y.detach()) == _ref_bits(ws, "silu", x)).all()
    else:
        torch.manual_seed(0)
        lin = torch.nn.Linear(H, H, dtype=torch.bfloat16)
        seq = torch.nn.Sequential(lin, ffn)
        y = torch.compile(seq, backend="inductor")(x)
        with torch.no_grad():
            h = lin(x)
        assert (_bits(y.detach()) == _ref_bits(ws, "silu", h)).all()
    with pytest.raises(MetraleError, match="inference only"):
        y.float().sum().backward()


def test_pickle_and_save_after_a_forward(tmp_path) -> None:
    ws = _weights("q2_0", 5)
    ffn = MetraleFfn.from_weights(CFG, ws, "silu")
    x = _x((2, H), 6)
    y = _bits(ffn(x))
    back = pickle.loads(pickle.dumps(ffn))
    assert (_bits(back(x)) == y).all()
    torch.save(ffn, tmp_path / "ffn.pt")
    loaded = torch.load(tmp_path / "ffn.pt", weights_only=False)
    assert (_bits(loaded(x)) == y).all()
    assert (_bits(ffn(x)) == y).all()  # the original still runs its built layer


def test_bad_arguments_are_one_line_metrale_errors() -> None:
    ws = _weights("nvfp4", 7)
    ffn = MetraleFfn.from_weights(CFG, ws, "silu")
    x = _x((2, H), 8)
    cases = [
        (lambda: MetraleFfn.from_weights(CFG, ws, "relu"), r"activation 'relu' is not supported"),
        (
            lambda: MetraleFfn.from_weights(CFG, [torch.zeros(INTER, H)] * 3, "silu"),
            r"gate_proj is a torch\.Tensor, want one of Nvfp4Weight",
        ),
        (lambda: MetraleFfn.from_weights("64x128", ws, "silu"), "config is a str"),
        (lambda: MetraleFfn.from_weights(CFG, None, "silu"), "got a NoneType"),
        (lambda: dense_ffn("x", 1), "x is a str, want a torch tensor"),
        (lambda: dense_ffn(x, 2**70), r"handle 1180591620717411303424 is not a module handle"),
        (lambda: dense_ffn(x, "1"), r"handle '1' is not a module handle"),
        (lambda: ffn(x.to_sparse()), r"layout torch\.sparse_coo, want a dense"),
        (
            lambda: torch.compile(ffn, fullgraph=True, backend="aot_eager")(x.float()),
            r"^MetraleFfn input: dtype torch\.float32, want torch\.bfloat16$",
        ),
    ]
    for f, pattern in cases:
        torch._dynamo.reset()
        with pytest.raises(MetraleError, match=pattern) as e:
            f()
        assert len(str(e.value).splitlines()) == 1, str(e.value)


@functools.cache
def _fuzz_weights(fmt: str) -> tuple:
    return tuple(_weights(fmt, 11))


_FORMATS = ("nvfp4", "w4a4", "w8a8", "q2_0", "fp8", "bf16")
_VALID_WEIGHTS = st.sampled_from(_FORMATS).map(lambda f: list(_fuzz_weights(f)))
_WEIGHTS = st.one_of(
    *[_VALID_WEIGHTS] * 6,
    st.tuples(st.sampled_from(_FORMATS), st.sampled_from(_FORMATS)).map(
        lambda fs: [*_fuzz_weights(fs[0])[:2], _fuzz_weights(fs[1])[2]]  # mixed formats
    ),
    st.sampled_from(_FORMATS).map(lambda f: list(_fuzz_weights(f))[::-1]),  # wrong shapes
    st.sampled_from(_FORMATS).map(lambda f: list(_fuzz_weights(f))[:2]),
    st.sampled_from([None, [], [torch.zeros(INTER, H)] * 3, [np.zeros((INTER, H))] * 3, "nvfp4", 3]),
)
_CONFIGS = st.sampled_from([*[CFG] * 8, FfnConfig(H, 2 * INTER), FfnConfig(2 * H, INTER), None, "64x128", 64])
_ACTS = st.sampled_from(
    [*["silu", "gelu", FfnActivation.SiLU, FfnActivation.GELU] * 2, "relu", "SILU", None, 3]
)
_DTYPES = (*[torch.bfloat16] * 6, torch.float32, torch.float16, torch.int16, torch.bool)


@st.composite
def _inputs(draw: st.DrawFn) -> object:
    kind = draw(st.sampled_from(["tensor"] * 6 + ["sparse", "other"]))
    if kind == "other":
        return draw(st.sampled_from([None, 3, "x", np.zeros((2, H), dtype=np.float32), [[0.0] * H]]))
    lead = draw(st.lists(st.integers(0, 4), min_size=0, max_size=2))
    last = draw(st.sampled_from([*[H] * 6, H - 16, 1, 0, 2 * H]))
    dtype = draw(st.sampled_from(_DTYPES))
    seed = draw(st.integers(0, 2**16))
    x = (torch.randn((*lead, last), generator=torch.Generator().manual_seed(seed)) * 2).to(dtype)
    if kind == "sparse" and x.dim() >= 1:
        return x.to_sparse()
    return draw(st.sampled_from([x, x, x.transpose(0, -1) if x.dim() > 1 else x]))


def _outcome(f: Callable[[], object]) -> object:
    """f's result, or the MetraleError it raised (any other exception fails the test)."""
    try:
        return f()
    except MetraleError as e:
        assert len(str(e).splitlines()) == 1, str(e)
        return e


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(config=_CONFIGS, weights=_WEIGHTS, act=_ACTS, x=_inputs())
def test_fuzz_construction_and_forward(config: object, weights: object, act: object, x: object) -> None:
    """Random configs, weight lists, activations and inputs (types, shapes, dtypes, layouts):
    construction and forward end in a one-line MetraleError or in the CPU reference layer's
    bits (the reference refusing exactly when the module does)."""
    mod = _outcome(lambda: MetraleFfn.from_weights(config, weights, act))
    if isinstance(mod, MetraleError):
        event("construction refused")
        return
    assert isinstance(mod, MetraleFfn)
    y = _outcome(lambda: mod(x))
    valid = (
        isinstance(x, torch.Tensor)
        and x.layout == torch.strided
        and x.dtype == torch.bfloat16
        and x.dim() >= 1
        and x.shape[-1] == H
    )
    if not valid:
        assert isinstance(y, MetraleError), (type(x), getattr(x, "shape", None), getattr(x, "dtype", None))
        return
    if x.numel() == 0:
        assert isinstance(y, torch.Tensor) and y.shape == x.shape
        return
    ref = build_ffn_layer(config, FfnActivation(act), list(weights), "reference", "fuzz")
    want = _outcome(lambda: ref(x.reshape(-1, H).contiguous().view(torch.int16).numpy().view(BF16)))
    if isinstance(want, MetraleError):
        assert isinstance(y, MetraleError), want
        event("forward refused by both")
        return
    event("bits compared")
    assert isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == torch.bfloat16
    assert (_bits(y).reshape(-1, H) == want.view(np.int16)).all()
