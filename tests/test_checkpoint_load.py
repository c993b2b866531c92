"""``DenseFfnLayer.from_checkpoint`` on every format metrale writes and on hand-made files in
the producers' conventions (ModelOpt, compressed-tensors, GGUF)."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.io import HfFolder, save_tensors
from metrale.errors import MetraleError
from metrale.reference.context import FfnConfig
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, W8a8Weight
from metrale.reference.layer import DenseFfnLayer, FfnActivation, FfnWeights
from metrale.reference.w8a8_arm import W8a8Ffn

HIDDEN, INTER = 64, 128
FFN = ("gate_proj", "up_proj", "down_proj")
ROWS = (1, 2, 3, 5, 70)


def bits(y: np.ndarray) -> np.ndarray:
    return np.asarray(y).view(np.uint16)


def rows(m: int, seed: int = 0) -> np.ndarray:
    return (
        np.random.default_rng(seed + m)
        .standard_normal((m, HIDDEN), dtype=np.float32)
        .astype(ml_dtypes.bfloat16)
    )


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_example_checkpoint(
        tmp_path_factory.mktemp("s") / "llama", hidden=HIDDEN, intermediate=INTER, layers=2, shards=2, seed=5
    )


@pytest.fixture(scope="module")
def amax_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    amax = {f"model.layers.{i}.mlp.{p}": 4.0 + i + j for i in range(2) for j, p in enumerate(FFN)}
    path = tmp_path_factory.mktemp("c") / "amax.safetensors"
    save_tensors(path, {f"{k}.input_amax": np.array(v, np.float32) for k, v in amax.items()})
    return path, amax


def source_weights(src: Path, layer: int) -> list[np.ndarray]:
    with HfFolder(src) as f:
        return [np.array(f.tensor(f"model.layers.{layer}.mlp.{p}.weight")) for p in FFN]


def expected_layer(src: Path, fmt: str, layer: int, amax: dict[str, float] | None = None) -> DenseFfnLayer:
    """The layer built directly from the reference quantizers applied to SRC."""
    ws = source_weights(src, layer)
    cfg = FfnConfig(HIDDEN, INTER)
    names = [f"model.layers.{layer}.mlp.{p}" for p in FFN]
    if fmt == "nvfp4":
        # gate and up are fused siblings: one weight amax, the larger (ModelOpt)
        shared = float(max(np.abs(ws[0].astype(np.float32)).max(), np.abs(ws[1].astype(np.float32)).max()))
        q = [
            Nvfp4Weight.quantize(w, input_amax=None if amax is None else amax[n], weight_amax=wa, name=n)
            for w, n, wa in zip(ws, names, (shared, shared, None), strict=True)
        ]
        return DenseFfnLayer(cfg, weights=FfnWeights(*q), backend="reference")
    if fmt == "fp8":
        return DenseFfnLayer(
            cfg, fp8_weights=FfnWeights(*(Fp8Weight.quantize(w) for w in ws)), backend="reference"
        )
    if fmt == "q2_0":
        return DenseFfnLayer(
            cfg, q2_weights=FfnWeights(*(Q2_0Weight.quantize(w) for w in ws)), backend="reference"
        )
    if fmt == "bf16":
        return DenseFfnLayer(
            cfg, bf16_weights=FfnWeights(*(DenseWeight.quantize(w) for w in ws)), backend="reference"
        )
    layer_ = DenseFfnLayer(cfg, backend="reference")
    layer_.set_w8a8_decode_weights(W8a8Ffn(*(W8a8Weight.quantize(w) for w in ws)), HIDDEN, INTER)
    return layer_


@pytest.mark.parametrize("fmt", ["nvfp4", "nvfp4_a4", "fp8", "w8a8", "q2_0", "bf16"])
def test_loads_every_format_bit_exact(
    src: Path, amax_file: tuple[Path, dict[str, float]], tmp_path: Path, fmt: str
) -> None:
    base = fmt.split("_a4")[0]
    if fmt == "bf16":
        path = src
    else:
        path = tmp_path / fmt
        cal = amax_file[0] if fmt == "nvfp4_a4" else None
        convert_checkpoint(src, path, ConvertOptions(base, ffn_only=True, calibration=cal))
    layer = DenseFfnLayer.from_checkpoint(path, layer=1, backend="reference")
    want = expected_layer(src, base, 1, amax_file[1] if fmt == "nvfp4_a4" else None)
    assert layer.config == FfnConfig(HIDDEN, INTER)
    assert layer.activation == FfnActivation.SiLU
    holder = {"nvfp4": "weights", "fp8": "fp8_weights", "q2_0": "q2_weights", "bf16": "bf16_weights"}
    if base == "w8a8":
        assert layer.w8a8 is not None and layer.weights is None
    else:
        assert getattr(layer, holder[base]) is not None
    if fmt == "nvfp4_a4":
        assert all(p.input_scale is not None for p in layer.weights.all())
        assert layer.declares_a4()
    elif base == "nvfp4":
        assert all(p.input_scale is None for p in layer.weights.all())
    for m in ROWS:
        x = rows(m)
        assert np.array_equal(bits(layer(x)), bits(want(x))), (fmt, m)
    if fmt == "q2_0":  # the .gguf file itself is accepted too
        again = DenseFfnLayer.from_checkpoint(path / "model.gguf", layer=1, backend="reference")
        assert np.array_equal(bits(again(rows(1))), bits(want(rows(1))))


def test_w8a8_only_layer_prefill_chunks_beyond_64_rows(src: Path, tmp_path: Path) -> None:
    convert_checkpoint(src, tmp_path / "w", ConvertOptions("w8a8"))
    layer = DenseFfnLayer.from_checkpoint(tmp_path / "w", layer=0, backend="reference")
    from metrale.reference.context import ForwardContext

    x = rows(130, seed=9)
    ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=130)
    layer.forward_prefill(x, 130, ctx)
    big = layer.backend.to_numpy(ctx.buffers.output()[:130]).copy()
    one = np.concatenate([layer(x[i : i + 1]) for i in range(130)])
    assert np.array_equal(bits(big), bits(one))


def test_gelu_config_and_w8a8_silu_only(tmp_path: Path) -> None:
    s = make_example_checkpoint(
        tmp_path / "g", hidden=HIDDEN, intermediate=INTER, layers=1, hidden_act="gelu_pytorch_tanh"
    )
    assert DenseFfnLayer.from_checkpoint(s, backend="reference").activation == FfnActivation.GELU
    convert_checkpoint(s, tmp_path / "w", ConvertOptions("w8a8"))
    with pytest.raises(MetraleError, match="W8A8 FFN arm fuses SiLU only"):
        DenseFfnLayer.from_checkpoint(tmp_path / "w", backend="reference")
    convert_checkpoint(s, tmp_path / "q", ConvertOptions("q2_0"))
    assert DenseFfnLayer.from_checkpoint(tmp_path / "q", backend="reference").activation == FfnActivation.GELU
    cfg = json.loads((s / "config.json").read_text())
    cfg["hidden_act"] = "relu"
    (s / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MetraleError, match="hidden_act 'relu' is not supported"):
        DenseFfnLayer.from_checkpoint(s, backend="reference")


def test_layer_out_of_range_names_the_layers(src: Path) -> None:
    with pytest.raises(MetraleError, match=r"no FFN for layer 7 \(layers with an FFN: \[0, 1\]\)"):
        DenseFfnLayer.from_checkpoint(src, layer=7, backend="reference")


# ---- files written the producers' way, by hand ----
def llama_config(extra: dict | None = None) -> dict:
    from metrale.checkpoint.example import example_config

    cfg = example_config(hidden=HIDDEN, intermediate=INTER, layers=1)
    cfg.update(extra or {})
    return cfg


def e2m1(nib: np.ndarray) -> np.ndarray:
    mag = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)[nib & 7]
    return np.where(nib & 8, -mag, mag)


def test_modelopt_folder_from_another_tool(tmp_path: Path) -> None:
    """Random packed codes and e4m3 scales saved with torch as ModelOpt exports them."""
    rng = np.random.default_rng(1)
    d = tmp_path / "mo"
    d.mkdir()
    tensors, want = {}, []
    for p, (n, k) in zip(FFN, [(INTER, HIDDEN), (INTER, HIDDEN), (HIDDEN, INTER)], strict=True):
        mod = f"model.layers.0.mlp.{p}"
        packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
        scale = torch.from_numpy(rng.uniform(0.01, 400, (n, k // 16)).astype(np.float32)).to(
            torch.float8_e4m3fn
        )
        s2, inp = torch.tensor(0.003, dtype=torch.float32), torch.tensor(0.02, dtype=torch.float32)
        tensors[f"{mod}.weight"] = torch.from_numpy(packed)
        tensors[f"{mod}.weight_scale"] = scale
        tensors[f"{mod}.weight_scale_2"] = s2
        tensors[f"{mod}.input_scale"] = inp
        nib = np.empty((n, k), np.uint8)
        nib[:, 0::2], nib[:, 1::2] = packed & 15, packed >> 4
        val = e2m1(nib).reshape(n, k // 16, 16) * scale.float().numpy()[..., None]
        want.append((val * np.float32(0.003)).reshape(n, k).astype(np.float32))
    tensors["model.embed_tokens.weight"] = torch.zeros((256, HIDDEN), dtype=torch.bfloat16)
    from safetensors.torch import save_file

    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    hq = {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": 16,
            "exclude_modules": ["lm_head"],
        },
    }
    (d / "hf_quant_config.json").write_text(json.dumps(hq))
    qc = {
        "config_groups": {
            "group_0": {
                "input_activations": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
                "weights": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
                "targets": ["Linear"],
            }
        },
        "ignore": ["lm_head"],
        "quant_algo": "NVFP4",
        "producer": hq["producer"],
        "quant_method": "modelopt",
    }
    (d / "config.json").write_text(json.dumps(llama_config({"quantization_config": qc})))
    layer = DenseFfnLayer.from_checkpoint(d, layer=0, backend="reference")
    for w, ref in zip(layer.weights.all(), want, strict=True):
        assert isinstance(w, Nvfp4Weight) and w.input_scale == np.float32(0.02)
        assert np.array_equal(w.dequantize().view(np.uint32), ref.view(np.uint32))
    assert layer(rows(4)).shape == (4, HIDDEN)
    from metrale.checkpoint.inspect import scan
    from metrale.checkpoint.verify import verify_path

    s = scan(d)
    assert s.layout == "modelopt"
    assert {r.name: r.format for r in s.rows}["model.layers.0.mlp.up_proj"] == "nvfp4+a4"
    assert verify_path(d).ok


@pytest.mark.parametrize("kind", ["fp8-channel-bf16-scale", "fp8-tensor-scale", "int8-channel-zero-point"])
def test_compressed_tensors_folder_from_another_tool(tmp_path: Path, kind: str) -> None:
    rng = np.random.default_rng(2)
    d = tmp_path / "ct"
    d.mkdir()
    tensors, want = {}, []
    for p, (n, k) in zip(FFN, [(INTER, HIDDEN), (INTER, HIDDEN), (HIDDEN, INTER)], strict=True):
        mod = f"model.layers.0.mlp.{p}"
        if kind.startswith("fp8"):
            w = torch.from_numpy(rng.uniform(-448, 448, (n, k)).astype(np.float32)).to(torch.float8_e4m3fn)
        else:
            w = torch.from_numpy(rng.integers(-128, 128, (n, k), dtype=np.int8))
        if kind == "fp8-tensor-scale":
            s = torch.tensor([0.0025], dtype=torch.float32)
            srow = np.full(n, np.float32(0.0025))
        else:
            s = torch.from_numpy(rng.uniform(1e-4, 1e-2, (n, 1)).astype(np.float32)).to(torch.bfloat16)
            srow = s.float().numpy()[:, 0]
        tensors[f"{mod}.weight"] = w
        tensors[f"{mod}.weight_scale"] = s
        if kind.startswith("int8"):
            tensors[f"{mod}.weight_zero_point"] = torch.zeros((n, 1), dtype=torch.int8)
        want.append(w.float().numpy() * srow[:, None])
    from safetensors.torch import save_file

    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    fmt, typ = ("float-quantized", "float") if kind.startswith("fp8") else ("int-quantized", "int")
    qc = {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "ignore": ["lm_head"],
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 8,
                    "type": typ,
                    "symmetric": True,
                    "strategy": "tensor" if kind == "fp8-tensor-scale" else "channel",
                    "dynamic": False,
                },
                "input_activations": {
                    "num_bits": 8,
                    "type": typ,
                    "symmetric": True,
                    "strategy": "token",
                    "dynamic": True,
                },
            }
        },
    }
    (d / "config.json").write_text(json.dumps(llama_config({"quantization_config": qc})))
    layer = DenseFfnLayer.from_checkpoint(d, layer=0, backend="reference")
    got = [w for w in (layer.fp8_weights.all() if kind.startswith("fp8") else layer.w8a8.all())]
    for w, ref in zip(got, want, strict=True):
        assert isinstance(w, Fp8Weight if kind.startswith("fp8") else W8a8Weight)
        assert np.array_equal(w.dequantize(), ref.astype(np.float32))
    assert layer(rows(3)).shape == (3, HIDDEN)
    from metrale.checkpoint.verify import verify_path

    res = verify_path(d)
    assert res.ok, res.violations


def test_gguf_written_by_gguf_package(tmp_path: Path) -> None:
    import gguf

    import metrale.checkpoint.gguf_q2 as gq

    rng = np.random.default_rng(3)
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(INTER)
    w.add_block_count(1)
    want = []
    for g, (n, k) in zip(
        ("ffn_gate", "ffn_up", "ffn_down"), [(INTER, HIDDEN), (INTER, HIDDEN), (HIDDEN, INTER)], strict=True
    ):
        blocks = rng.integers(0, 256, (n, k // 64, 18), dtype=np.uint8)
        blocks[..., :2] = rng.uniform(0, 2, (n, k // 64, 1)).astype(np.float16).view(np.uint8)
        w.add_tensor(f"blk.0.{g}.weight", blocks.reshape(n, -1), raw_dtype=gq.Q2_0_TYPE)
        want.append(blocks)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    layer = DenseFfnLayer.from_checkpoint(path, backend="reference")
    for got, ref in zip(layer.q2_weights.all(), want, strict=True):
        assert np.array_equal(got.blocks, ref)
    assert layer.activation == FfnActivation.SiLU
    assert layer(rows(2)).shape == (2, HIDDEN)
    from metrale.checkpoint.inspect import scan

    assert {r.name: r.format for r in scan(path).rows}["blk.0.ffn_up.weight"] == "q2_0"


def test_mixed_formats_refused(src: Path, tmp_path: Path) -> None:
    convert_checkpoint(src, tmp_path / "m", ConvertOptions("fp8", exclude=("*down_proj",)))
    with pytest.raises(MetraleError, match="gate/up/down mix formats"):
        DenseFfnLayer.from_checkpoint(tmp_path / "m", backend="reference")
