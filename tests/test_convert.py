"""Round trips and producer layouts of ``metrale convert`` on a generated two-layer Llama."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from producers import ct_channel, ggml_q2_0, modelopt_nvfp4, q2_decode
from safetensors import safe_open

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.io import save_tensors

HIDDEN, INTER, LAYERS = 64, 128, 2
FFN = ("gate_proj", "up_proj", "down_proj")


def read_all(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a folder through the safetensors package (an independent reader)."""
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as s:
            for k in s.keys():
                out[k] = s.get_tensor(k)
    return out


def src_f64(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.float64).numpy()


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_example_checkpoint(
        tmp_path_factory.mktemp("src") / "llama",
        hidden=HIDDEN,
        intermediate=INTER,
        layers=LAYERS,
        shards=2,
        seed=3,
    )


@pytest.fixture(scope="module")
def calib(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    rng = np.random.default_rng(11)
    amax = {f"model.layers.{i}.mlp.{p}": float(rng.uniform(1, 20)) for i in range(LAYERS) for p in FFN}
    path = tmp_path_factory.mktemp("cal") / "amax.safetensors"
    save_tensors(path, {f"{k}.input_amax": np.array(v, dtype=np.float32) for k, v in amax.items()})
    return path, amax


@pytest.fixture(scope="module")
def outputs(
    src: Path, calib: tuple[Path, dict[str, float]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("out")
    out = {}
    for fmt in ("nvfp4", "fp8", "w8a8", "q2_0"):  # the FFN only: these tests read its tensors
        out[fmt] = root / fmt
        convert_checkpoint(src, out[fmt], ConvertOptions(fmt, ffn_only=True))
    out["nvfp4_a4"] = root / "nvfp4_a4"
    convert_checkpoint(src, out["nvfp4_a4"], ConvertOptions("nvfp4", ffn_only=True, calibration=calib[0]))
    return out


def ffn_names() -> list[str]:
    return [f"model.layers.{i}.mlp.{p}" for i in range(LAYERS) for p in FFN]


def test_sharding_index_and_copies(src: Path, outputs: dict[str, Path]) -> None:
    s_idx = json.loads((src / "model.safetensors.index.json").read_text())
    source = read_all(src)
    for fmt in ("nvfp4", "fp8", "w8a8"):
        d = outputs[fmt]
        assert sorted(p.name for p in d.glob("*.safetensors")) == sorted(set(s_idx["weight_map"].values()))
        idx = json.loads((d / "model.safetensors.index.json").read_text())
        got = read_all(d)
        assert set(idx["weight_map"]) == set(got)
        total = sum(t.numel() * t.element_size() for t in got.values())
        assert idx["metadata"]["total_size"] == total
        for name, shard in idx["weight_map"].items():
            with safe_open(str(d / shard), "pt") as f:
                assert name in f.keys()
        for name, t in source.items():  # every tensor but the FFN weights is copied bit for bit
            if ".mlp." in name:
                continue
            assert torch.equal(got[name].view(torch.int16), t.view(torch.int16)), name
            # ...and in the shard it came from
            assert idx["weight_map"][name] == s_idx["weight_map"][name]
        assert (d / "generation_config.json").read_bytes() == (src / "generation_config.json").read_bytes()


def test_nvfp4_modelopt_layout(
    src: Path, outputs: dict[str, Path], calib: tuple[Path, dict[str, float]]
) -> None:
    source = read_all(src)
    for key, a4 in (("nvfp4", False), ("nvfp4_a4", True)):
        d = outputs[key]
        got = read_all(d)
        for mod in ffn_names():
            w, s, s2 = got[f"{mod}.weight"], got[f"{mod}.weight_scale"], got[f"{mod}.weight_scale_2"]
            x = src_f64(source[f"{mod}.weight"])
            n, k = x.shape
            assert w.dtype == torch.uint8 and tuple(w.shape) == (n, k // 2)
            assert s.dtype == torch.float8_e4m3fn and tuple(s.shape) == (n, k // 16)
            assert s2.dtype == torch.float32 and tuple(s2.shape) == ()
            # gate and up are fused siblings: the larger amax of the pair (ModelOpt)
            sib = [mod.replace(mod.rsplit(".", 1)[1], t) for t in ("gate_proj", "up_proj")]
            group = sib if mod in sib else [mod]
            amax = max(np.abs(src_f64(source[f"{m}.weight"])).max() for m in group)
            want_s2 = np.float32(amax) / np.float32(6 * 448)
            assert np.float32(s2.item()) == want_s2
            if a4:
                inp = got[f"{mod}.input_scale"]
                assert inp.dtype == torch.float32 and tuple(inp.shape) == ()
                assert np.float32(inp.item()) == np.float32(calib[1][mod]) / np.float32(6 * 448)
            else:
                assert f"{mod}.input_scale" not in got
            # the bytes ModelOpt writes for this source (with the group's shared amax)
            want_w, want_s, want_s2b = modelopt_nvfp4(x.astype(np.float32), amax=float(np.float32(amax)))
            assert np.float32(s2.item()).tobytes() == want_s2b.tobytes(), mod
            assert np.array_equal(s.view(torch.uint8).numpy(), want_s), mod
            assert np.array_equal(w.numpy(), want_w), mod
        hq = json.loads((d / "hf_quant_config.json").read_text())
        assert hq["producer"]["name"] == "modelopt"
        q = hq["quantization"]
        assert q["quant_algo"] == ("NVFP4" if a4 else "W4A16_NVFP4")
        assert q["group_size"] == 16
        assert "lm_head" in q["exclude_modules"]
        assert not any(m in q["exclude_modules"] for m in ffn_names())
        assert "model.layers.0.self_attn.q_proj" in q["exclude_modules"]
        cfg = json.loads((d / "config.json").read_text())
        qc = cfg["quantization_config"]
        assert qc["quant_method"] == "modelopt" and qc["quant_algo"] == q["quant_algo"]
        assert qc["ignore"] == q["exclude_modules"] and qc["producer"]["name"] == "modelopt"
        g = qc["config_groups"]["group_0"]
        assert g["weights"] == {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16}
        assert g["targets"] == ["Linear"]
        assert (g["input_activations"] is not None) == a4
        src_cfg = json.loads((src / "config.json").read_text())
        assert {k: v for k, v in cfg.items() if k != "quantization_config"} == src_cfg


@pytest.mark.parametrize(("fmt", "typ", "qmax"), [("fp8", "float", 448.0), ("w8a8", "int", 127.5)])
def test_compressed_tensors_layout(
    src: Path, outputs: dict[str, Path], fmt: str, typ: str, qmax: float
) -> None:
    source = read_all(src)
    got = read_all(outputs[fmt])
    for mod in ffn_names():
        x = src_f64(source[f"{mod}.weight"])
        w, s = got[f"{mod}.weight"], got[f"{mod}.weight_scale"]
        assert w.dtype == (torch.float8_e4m3fn if fmt == "fp8" else torch.int8)
        assert tuple(w.shape) == x.shape
        assert s.dtype == torch.float32 and tuple(s.shape) == (x.shape[0], 1)
        want = (np.abs(x).max(axis=1).astype(np.float32) / np.float32(qmax)).astype(np.float32)
        assert np.array_equal(s.numpy()[:, 0], want)
        # the bytes compressed-tensors writes for this source
        want_q, want_s = ct_channel(x.astype(np.float32), fmt)
        assert np.array_equal(s.numpy()[:, 0].view(np.uint32), want_s.view(np.uint32)), mod
        assert np.array_equal(w.view(torch.uint8 if fmt == "fp8" else torch.int8).numpy(), want_q), mod
    cfg = json.loads((outputs[fmt] / "config.json").read_text())
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors"
    assert qc["format"] == ("float-quantized" if fmt == "fp8" else "int-quantized")
    g = qc["config_groups"]["group_0"]
    assert {k: g["weights"][k] for k in ("num_bits", "type", "strategy", "symmetric", "dynamic")} == {
        "num_bits": 8,
        "type": typ,
        "strategy": "channel",
        "symmetric": True,
        "dynamic": False,
    }
    assert {k: g["input_activations"][k] for k in ("num_bits", "type", "strategy", "dynamic")} == {
        "num_bits": 8,
        "type": typ,
        "strategy": "token",
        "dynamic": True,
    }
    assert "lm_head" in qc["ignore"] and not any(m in qc["ignore"] for m in ffn_names())
    assert not (outputs[fmt] / "hf_quant_config.json").exists()


@pytest.mark.parametrize("fmt", ["fp8", "w8a8"])
def test_compressed_tensors_package_accepts_config(outputs: dict[str, Path], fmt: str) -> None:
    import compressed_tensors.quantization as ct  # in the test extras: a hard requirement here

    qc = json.loads((outputs[fmt] / "config.json").read_text())["quantization_config"]
    model = ct.QuantizationConfig.model_validate(qc)
    assert model.quant_method == "compressed-tensors"
    assert model.format == qc["format"]
    scheme = model.config_groups["group_0"]
    assert scheme.weights.strategy == "channel" and scheme.weights.num_bits == 8
    assert scheme.input_activations.strategy == "token" and scheme.input_activations.dynamic is True
    want = ct.QuantizationType.FLOAT if fmt == "fp8" else ct.QuantizationType.INT
    assert scheme.weights.type == want


def test_gguf_q2_0(src: Path, outputs: dict[str, Path]) -> None:
    import gguf

    source = read_all(src)
    r = gguf.GGUFReader(outputs["q2_0"] / "model.gguf")
    by = {t.name: t for t in r.tensors}
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["llama.embedding_length"].contents() == HIDDEN
    assert r.fields["llama.feed_forward_length"].contents() == INTER
    assert r.fields["llama.block_count"].contents() == LAYERS
    gg = {"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
    for i in range(LAYERS):
        for p, g in gg.items():
            t = by[f"blk.{i}.{g}.weight"]
            assert int(t.tensor_type) == 42
            x = src_f64(source[f"model.layers.{i}.mlp.{p}.weight"])
            n, k = x.shape
            assert [int(v) for v in t.shape] == [k, n]  # ggml order: ne0 = K
            assert int(t.n_bytes) == n * (k // 64) * 18
            raw = np.asarray(t.data, dtype=np.uint8).reshape(n, k // 64, 18)
            d = raw[..., :2].copy().view(np.float16)[..., 0].astype(np.float64)
            qs = raw[..., 2:]
            j = np.arange(64)
            q = (qs[..., j // 4] >> (2 * (j % 4))) & 3
            deq = ((q.astype(np.float64) - 1) * d[..., None]).reshape(n, k)
            amax = np.abs(x).reshape(n, k // 64, 64).max(-1)
            assert np.array_equal(d, amax.astype(np.float32).astype(np.float16).astype(np.float64))
            # the bytes ggml's quantize_row_q2_0_ref writes for the source rows
            assert raw.tobytes() == ggml_q2_0(x.astype(np.float32)), f"blk.{i}.{g}"
            assert np.array_equal(deq, q2_decode(raw.tobytes(), n, k))
    # the other tensors: llama.cpp names, norms as F32, q/k rows permuted as convert_hf_to_gguf does
    assert by["token_embd.weight"].tensor_type == gguf.GGMLQuantizationType.BF16
    assert by["output.weight"].tensor_type == gguf.GGMLQuantizationType.BF16
    norm = by["blk.0.attn_norm.weight"]
    assert norm.tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(
        np.asarray(norm.data), source["model.layers.0.input_layernorm.weight"].float().numpy()
    )
    q_src = source["model.layers.1.self_attn.q_proj.weight"].view(torch.int16).numpy()
    q_got = np.asarray(by["blk.1.attn_q.weight"].data).view(np.int16).reshape(q_src.shape)
    heads, hd = 4, HIDDEN // 4
    for h in range(heads):  # within a head, row 2t is source row t, row 2t+1 is source row hd/2 + t
        for t in range(hd // 2):
            assert np.array_equal(q_got[h * hd + 2 * t], q_src[h * hd + t])
            assert np.array_equal(q_got[h * hd + 2 * t + 1], q_src[h * hd + hd // 2 + t])


def test_report(src: Path, outputs: dict[str, Path]) -> None:
    source = read_all(src)
    for fmt in ("nvfp4", "fp8", "w8a8", "q2_0"):
        rep = json.loads((outputs[fmt] / "conversion_report.json").read_text())
        assert rep["format"] == fmt
        q = {t["name"]: t for t in rep["tensors"] if t["action"] == "quantized"}
        assert sorted(q) == sorted(f"{m}.weight" for m in ffn_names())
        assert len(rep["tensors"]) == len(source)
        assert rep["source_bytes"] == sum(t.numel() * 2 for t in source.values())
        name = "model.layers.1.mlp.down_proj.weight"
        assert q[name]["source_bytes"] == HIDDEN * INTER * 2
        want_bytes = {
            "nvfp4": HIDDEN * INTER // 2 + HIDDEN * INTER // 16 + 4,
            "fp8": HIDDEN * INTER + 4 * HIDDEN,
            "w8a8": HIDDEN * INTER + 4 * HIDDEN,
            "q2_0": HIDDEN * INTER // 64 * 18,
        }[fmt]
        assert q[name]["bytes"] == want_bytes
        assert 0 < q[name]["rel_error"] < {"nvfp4": 0.2, "fp8": 0.06, "w8a8": 0.02, "q2_0": 1.0}[fmt]
    # the report's error is ‖ŵ − w‖/‖w‖ of what was written (checked for FP8 from the files)
    got = read_all(outputs["fp8"])
    rep = json.loads((outputs["fp8"] / "conversion_report.json").read_text())
    err = {t["name"]: t["rel_error"] for t in rep["tensors"] if t["action"] == "quantized"}
    mod = "model.layers.0.mlp.up_proj"
    x = src_f64(source[f"{mod}.weight"])
    deq = got[f"{mod}.weight"].to(torch.float64).numpy() * got[f"{mod}.weight_scale"].numpy().astype(
        np.float64
    )
    # a float64 statistic the converter sums in another order (chunked): rel 1e-6 covers the
    # reordering (≈ n·2^-53 relative for n = 8192 terms) with a wide margin; it is no contract bit
    assert err[f"{mod}.weight"] == pytest.approx(np.linalg.norm(deq - x) / np.linalg.norm(x), rel=1e-6)


def test_workers_pool_writes_identical_files(src: Path, outputs: dict[str, Path], tmp_path: Path) -> None:
    for fmt in ("nvfp4", "q2_0"):
        convert_checkpoint(src, tmp_path / fmt, ConvertOptions(fmt, ffn_only=True, workers=2))
        for f in sorted(outputs[fmt].iterdir()):
            if f.name != "conversion_report.json":
                assert (tmp_path / fmt / f.name).read_bytes() == f.read_bytes(), f.name


def test_default_quantizes_every_linear_but_lm_head_and_ffn_only_narrows(src: Path, tmp_path: Path) -> None:
    convert_checkpoint(src, tmp_path / "a", ConvertOptions("fp8", exclude=("*layers.1.mlp.*",)))
    got = read_all(tmp_path / "a")
    for mod in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert got[f"model.layers.0.self_attn.{mod}.weight"].dtype == torch.float8_e4m3fn, mod
    assert got["model.layers.0.mlp.down_proj.weight"].dtype == torch.float8_e4m3fn
    assert got["model.layers.1.mlp.gate_proj.weight"].dtype == torch.bfloat16
    assert got["lm_head.weight"].dtype == torch.bfloat16
    assert got["model.embed_tokens.weight"].dtype == torch.bfloat16
    ig = json.loads((tmp_path / "a" / "config.json").read_text())["quantization_config"]["ignore"]
    assert "model.layers.1.mlp.gate_proj" in ig and "lm_head" in ig
    assert "model.layers.0.self_attn.q_proj" not in ig
    convert_checkpoint(src, tmp_path / "f", ConvertOptions("fp8", ffn_only=True))
    got = read_all(tmp_path / "f")
    assert got["model.layers.0.self_attn.q_proj.weight"].dtype == torch.bfloat16
    assert got["model.layers.1.mlp.up_proj.weight"].dtype == torch.float8_e4m3fn
    ig = json.loads((tmp_path / "f" / "config.json").read_text())["quantization_config"]["ignore"]
    assert "model.layers.0.self_attn.q_proj" in ig and "model.layers.1.mlp.up_proj" not in ig
    convert_checkpoint(
        src,
        tmp_path / "b",
        ConvertOptions("w8a8", default_exclude=False, exclude=("model.embed_tokens",)),
    )
    got = read_all(tmp_path / "b")
    assert got["lm_head.weight"].dtype == torch.int8
    assert got["model.embed_tokens.weight"].dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_f16_and_f32_sources(tmp_path: Path, dtype: str) -> None:
    s = make_example_checkpoint(tmp_path / "s", hidden=HIDDEN, intermediate=INTER, layers=1, dtype=dtype)
    convert_checkpoint(s, tmp_path / "o", ConvertOptions("nvfp4"))
    source, got = read_all(s), read_all(tmp_path / "o")
    mod = "model.layers.0.mlp.gate_proj"
    x = src_f64(source[f"{mod}.weight"])
    # gate_proj shares its global scale with up_proj (fused siblings)
    up = src_f64(source["model.layers.0.mlp.up_proj.weight"])
    amax = np.float32(max(np.abs(x).max(), np.abs(up).max()))
    want_w, want_s, want_s2 = modelopt_nvfp4(x.astype(np.float32), amax=float(amax))
    assert np.array_equal(got[f"{mod}.weight"].numpy(), want_w)
    assert np.array_equal(got[f"{mod}.weight_scale"].view(torch.uint8).numpy(), want_s)
    assert np.float32(got[f"{mod}.weight_scale_2"].item()).tobytes() == want_s2.tobytes()
    assert got["lm_head.weight"].dtype == source["lm_head.weight"].dtype


def test_example_reads_with_safetensors(tmp_path: Path) -> None:
    s = make_example_checkpoint(tmp_path / "s", hidden=HIDDEN, intermediate=INTER, layers=1)
    got = read_all(s)
    assert got["model.layers.0.mlp.down_proj.weight"].shape == (HIDDEN, INTER)
    assert got["model.layers.0.mlp.down_proj.weight"].dtype == torch.bfloat16
    assert np.isfinite(got["lm_head.weight"].float().numpy()).all()
    assert ml_dtypes.bfloat16 is not None
