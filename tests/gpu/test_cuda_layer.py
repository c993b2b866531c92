"""DenseFfnLayer on the CUDA backend gives the reference's bits for every NVFP4 entry point
(A16 and A4 rows under each METRALE_WEIGHT_QUANT tier, with and without LoRA), with guard rows
in every buffer that must survive, and launches the same kernels in the same order."""

from __future__ import annotations

import numpy as np
import pytest

from metrale.backend import get_backend
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.formats import Nvfp4Weight
from metrale.reference.layer import DenseFfnLayer, FfnActivation, FfnLora, FfnWeights
from metrale.reference.lora import LoraAdapter
from metrale.reference.tiers import weight_quantization
from tests.gpu import gen

cp = pytest.importorskip("cupy")

HIDDEN, INTER = 80, 208  # 5 and 13 blocks: not powers of two
GUARD = 3
SENTINEL = 0xDEAD


def _weights(rng: np.random.Generator, a4: bool) -> FfnWeights[Nvfp4Weight]:
    def q(n: int, k: int, name: str) -> Nvfp4Weight:
        src = (rng.standard_normal((n, k)) * np.exp2(rng.uniform(-4, 0, (n, 1)))).astype(np.float32)
        return Nvfp4Weight.quantize(src, input_amax=float(rng.uniform(1, 8)) if a4 else None, name=name)

    return FfnWeights(q(INTER, HIDDEN, "gate"), q(INTER, HIDDEN, "up"), q(HIDDEN, INTER, "down"))


def _lora(rng: np.random.Generator) -> FfnLora:
    def ad(n: int, k: int) -> LoraAdapter:
        r = 6
        a = (rng.standard_normal((r, k)) * 0.1).astype(np.float32).astype(gen.BF16)
        b = (rng.standard_normal((n, r)) * 0.1).astype(np.float32).astype(gen.BF16)
        return LoraAdapter(a=a, b=b, scale=np.float32(0.5))

    return FfnLora(ad(INTER, HIDDEN), ad(INTER, HIDDEN), ad(HIDDEN, INTER))


def _run(layer: DenseFfnLayer, entry: str, x: np.ndarray) -> tuple[np.ndarray, list[str]]:
    m = x.shape[0]
    be = layer.backend
    ctx = ForwardContext(layer.config, backend=be, max_rows=m + GUARD)
    bufs = ctx.buffers
    for buf in (bufs.output(), bufs.gate_out(), bufs.up_out()):
        buf.view(np.uint16).fill(np.uint16(SENTINEL))
    xb = be.rows(x, HIDDEN, name="x")
    be.launches.clear()
    {
        "forward": lambda: layer.forward(xb, ctx),
        "forward_k2": lambda: layer.forward_k2(xb, ctx),
        "forward_k3": lambda: layer.forward_k3(xb, ctx),
        "forward_km": lambda: layer.forward_km(xb, m, ctx),
        "forward_prefill": lambda: layer.forward_prefill(xb, m, ctx),
    }[entry]()
    for nm, buf in (
        ("moe", bufs.output()),
        ("gate", bufs.gate_out()),
        ("up", bufs.up_out()),
    ):
        host = be.to_numpy(buf).view(np.uint16)
        assert (host[m:] == SENTINEL).all(), f"{entry} m={m}: {nm} written past row {m}"
    return be.to_numpy(bufs.output()).view(np.uint16)[:m], list(be.launches)


@pytest.mark.parametrize("mode", ["w4a4", "w4a4-batch", "w4a16"])
@pytest.mark.parametrize("a4", [True, False], ids=["declares_a4", "a16_only"])
@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
def test_layer_entry_points_match_reference(
    fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, mode: str, a4: bool, lora: bool
) -> None:
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", mode)
    weight_quantization.cache_clear()
    try:
        cfg = FfnConfig(HIDDEN, INTER)
        ws = _weights(fresh_rng, a4)
        lo = _lora(fresh_rng) if lora else None
        act = FfnActivation.SiLU if fresh_rng.random() < 0.5 else FfnActivation.GELU
        ref_layer = DenseFfnLayer(cfg, weights=ws, lora=lo, activation=act, backend=get_backend("reference"))
        gpu_layer = DenseFfnLayer(cfg, weights=ws, lora=lo, activation=act, backend=get_backend("cuda"))
        x = gen.rows(fresh_rng, 64, HIDDEN)
        cases = [("forward", 1), ("forward_k2", 2), ("forward_k3", 3)]
        cases += [
            ("forward_km", m)
            for m in (1, 2, 4, 5, 8, 13, 16, 32, 33, 64)
            if m <= gpu_layer.narrow_rows()
            and gpu_layer.can_forward_km(m)
            and (m <= 32 or gpu_layer.small_batch_w4a4())
        ]
        cases += [("forward_prefill", m) for m in (1, 7, 64)]
        for entry, m in cases:
            with np.errstate(all="ignore"):
                want, ref_launches = _run(ref_layer, entry, x[:m])
            got, gpu_launches = _run(gpu_layer, entry, x[:m])
            assert gpu_launches == ref_launches, f"{entry} m={m}: launches differ"
            gen.bits_equal(got, want, f"{entry} m={m} mode={mode} a4={a4} lora={lora}")
    finally:
        weight_quantization.cache_clear()


def test_layer_call_returns_reference_bits(fresh_rng: np.random.Generator) -> None:
    cfg = FfnConfig(HIDDEN, INTER)
    ws = _weights(fresh_rng, True)
    x = gen.rows(fresh_rng, 40, HIDDEN, finite=True)
    ref_layer = DenseFfnLayer(cfg, weights=ws, backend="reference")
    gpu_layer = DenseFfnLayer(cfg, weights=ws, backend="cuda")
    for m in (1, 2, 3, 9, 40):
        with np.errstate(all="ignore"):
            want = ref_layer(x[:m]).view(np.uint16)
        got = gpu_layer(x[:m]).view(np.uint16)
        gen.bits_equal(got, want, f"__call__ m={m}")
