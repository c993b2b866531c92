"""metrale.torch: MetraleFfn against DenseFfnLayer on the reference, buffers, errors, compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from metrale.checkpoint.load import build_ffn_layer
from metrale.checkpoint.work import quantize_array
from metrale.errors import MetraleError
from metrale.reference.context import FfnConfig
from metrale.reference.elements import BF16
from metrale.reference.formats import DenseWeight
from metrale.reference.layer import DenseFfnLayer, FfnActivation
from metrale.torch import MetraleFfn

H, INTER = 64, 128


def _weights(fmt: str, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for j, (n, k) in enumerate(((INTER, H), (INTER, H), (H, INTER))):
        w = (rng.standard_normal((n, k), dtype=np.float32) * 0.08).astype(BF16)
        if fmt == "bf16":
            out.append(DenseWeight.quantize(w, name=f"p{j}"))
        elif fmt == "w4a4":
            out.append(quantize_array("nvfp4", w, f"p{j}", input_amax=3.0 if j < 2 else 0.5))
        else:
            out.append(quantize_array(fmt, w, f"p{j}"))
    return out


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy()


def _x(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(torch.bfloat16)


@pytest.mark.parametrize("fmt", ["nvfp4", "w4a4", "w8a8", "q2_0", "fp8", "bf16"])
def test_bit_equal_to_dense_ffn_layer(fmt: str) -> None:
    act = FfnActivation.SiLU
    ws = _weights(fmt, 1)
    ref = build_ffn_layer(FfnConfig(H, INTER), act, ws, "reference", "test")
    ref.set_weight_quant("w4a4-all")  # MetraleFfn's tier (70 rows run A4 for w4a4)
    mod = MetraleFfn.from_weights(FfnConfig(H, INTER), ws, act)
    for lead in ((1,), (2,), (3,), (1, 5), (2, 20), (70,)):
        x = _x((*lead, H), len(lead) * 100 + lead[-1])
        y = mod(x)
        assert y.shape == x.shape and y.dtype == torch.bfloat16
        want = ref(x.reshape(-1, H).view(torch.int16).numpy().view(BF16))
        assert (_bits(y).reshape(-1, H) == want.view(np.int16)).all(), (fmt, lead)


def test_gelu_and_strided_input() -> None:
    ws = _weights("nvfp4", 2)
    ref = build_ffn_layer(FfnConfig(H, INTER), FfnActivation.GELU, ws, "reference", "test")
    mod = MetraleFfn.from_weights(FfnConfig(H, INTER), ws, "gelu")
    big = _x((4, 2 * H), 7)
    x = big[:, ::2]  # non-contiguous rows
    want = ref(x.contiguous().view(torch.int16).numpy().view(BF16))
    assert (_bits(mod(x)) == want.view(np.int16)).all()


def test_state_dict_round_trip_and_dtype_casts() -> None:
    a = MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("nvfp4", 3), "silu")
    b = MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("nvfp4", 4), "silu")
    x = _x((3, H), 5)
    ya, yb = _bits(a(x)), _bits(b(x))
    assert (ya != yb).any()
    b.load_state_dict(a.state_dict())  # invalidates b's built layer
    assert (_bits(b(x)) == ya).all()
    a.to(torch.float16)  # the byte carriers are integer buffers: a float cast leaves them alone
    assert (_bits(a.to("cpu")(x)) == ya).all()
    with pytest.raises(RuntimeError, match="size mismatch"):
        wide = MetraleFfn.from_weights(FfnConfig(H, 2 * H + 64), _weights_w(), "silu")
        a.load_state_dict(wide.state_dict())


def _weights_w() -> list:
    rng = np.random.default_rng(9)
    i2 = 2 * H + 64
    return [
        quantize_array("nvfp4", rng.standard_normal(s, dtype=np.float32), f"p{j}")
        for j, s in enumerate(((i2, H), (i2, H), (H, i2)))
    ]


def test_errors_are_clear() -> None:
    mod = MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("w8a8", 6), "silu")
    with pytest.raises(MetraleError, match=r"dtype torch.float32, want torch.bfloat16"):
        mod(torch.zeros(2, H))
    with pytest.raises(MetraleError, match=r"shape \[2, 32\], want \[\.\.\., 64\]"):
        mod(torch.zeros(2, 32, dtype=torch.bfloat16))
    with pytest.raises(MetraleError, match="device meta is not supported"):
        mod(torch.zeros(2, H, dtype=torch.bfloat16, device="meta"))
    x = _x((2, H), 1).requires_grad_()
    y = mod(x)  # forward works with grad enabled; backward says why it cannot
    with pytest.raises(MetraleError, match="inference only"):
        y.float().sum().backward()
    with pytest.raises(MetraleError, match="want 3 weights"):
        MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("w8a8", 6)[:2], "silu")
    with pytest.raises(MetraleError, match="holds 0 weight sets"):
        MetraleFfn.from_layer(DenseFfnLayer(FfnConfig(H, INTER), backend="reference"))


def test_compile_fullgraph_equals_eager() -> None:
    torch._dynamo.reset()
    mod = MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("w4a4", 8), "silu")

    def f(x: torch.Tensor) -> torch.Tensor:
        return mod(x * 2) + x

    cf = torch.compile(f, fullgraph=True, dynamic=False)
    for shape in ((1, 1, H), (1, 4, H)):
        x = _x(shape, shape[1])
        assert (_bits(cf(x)) == _bits(f(x))).all(), shape


def test_import_metrale_without_torch_or_transformers() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import metrale\n"
        "assert metrale.DenseFfnLayer and 'metrale.torch' not in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


def test_deepcopy_is_an_independent_module() -> None:
    import copy

    a = MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("nvfp4", 3), "silu")
    x = _x((2, H), 4)
    ya = _bits(a(x))
    b = copy.deepcopy(a)
    b.load_state_dict(MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("nvfp4", 5), "silu").state_dict())
    assert (_bits(a(x)) == ya).all()  # the copy's new weights do not leak into the original
    assert (_bits(b(x)) != ya).any()


def test_w4a4_rows_of_a_prefill_have_their_decode_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """MetraleFfn runs ``w4a4-all``: row r of a 70-row call (past the 64-row edge) equals the
    one-row call on row r, whatever METRALE_WEIGHT_QUANT says; ``weight_quant=None`` follows
    the process-wide tier (``w4a4``: the 70 rows run A16, which differs)."""
    from metrale.reference.tiers import weight_quantization

    monkeypatch.setenv("METRALE_WEIGHT_QUANT", "w4a4")
    weight_quantization.cache_clear()
    ws = _weights("w4a4", 9)
    x = _x((70, H), 9)
    cfg = FfnConfig(H, INTER)
    mods = {q: MetraleFfn.from_weights(cfg, ws, "silu", weight_quant=q) for q in ("w4a4-all", None)}
    assert MetraleFfn.from_weights(FfnConfig(H, INTER), ws).weight_quant == "w4a4-all"
    for q, mod in mods.items():
        decode = torch.cat([mod(x[r : r + 1]) for r in range(70)])
        same = bool((_bits(mod(x)) == _bits(decode)).all())
        assert same is (q == "w4a4-all"), q
    with pytest.raises(MetraleError, match=r"^weight_quant='w4a2' unknown: want one of"):
        MetraleFfn.from_weights(FfnConfig(H, INTER), ws, "silu", weight_quant="w4a2")
