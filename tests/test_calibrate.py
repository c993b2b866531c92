"""``convert --calibrate TEXTFILE``: activation amax measured with transformers on sample text,
written as NVFP4 input_scale = amax / (6·448) (ModelOpt's rule)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.io import HfFolder
from metrale.errors import MetraleError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXT = (
    "The quick brown fox jumps over the lazy dog.\n"
    "\n"
    "   \n"
    "Quantized feed-forward layers run in four bits.\n"
    "Hello world! It's 2026; we've 12345 tokens.\n"
    "This line is beyond the sample count.\n"
)


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from metrale.checkpoint.example import make_hf_model

    return make_hf_model(tmp_path_factory.mktemp("cal") / "qwen3", "qwen3")


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("txt") / "calib.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


def direct_amax(src: Path, lines: list[str]) -> dict[str, float]:
    """max |x| at every Linear's input, hooked here independently of metrale."""
    tok = transformers.AutoTokenizer.from_pretrained(src)
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
    seen: dict[str, list[torch.Tensor]] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(
                lambda m, a, n=name: seen.setdefault(n, []).append(a[0].abs().max())
            )
    with torch.no_grad():
        for line in lines:
            model(**tok(line, return_tensors="pt"))
    return {n: float(torch.stack(v).max().float()) for n, v in seen.items()}


def test_recorded_amax_equals_a_direct_hook(src: Path, text: Path) -> None:
    from metrale.checkpoint.calibrate import collect_amax

    lines = [ln for ln in TEXT.splitlines() if ln.strip()][:3]
    want = direct_amax(src, lines)
    mods = [n for n in want if n != "lm_head"]
    assert len(mods) == 2 * 7
    got = collect_amax(src, text, mods, samples=3)
    assert got == {m: want[m] for m in mods}
    # fused siblings read one input: equal amax, as vLLM's fused layers need
    for layer in (0, 1):
        p = f"model.layers.{layer}"
        assert got[f"{p}.mlp.gate_proj"] == got[f"{p}.mlp.up_proj"]
        assert got[f"{p}.self_attn.q_proj"] == got[f"{p}.self_attn.k_proj"] == got[f"{p}.self_attn.v_proj"]
    # the fourth non-empty line is read with samples=4 (whether it raises a maximum depends on the
    # tiny model's random weights, which differ between transformers versions)
    four = [ln for ln in TEXT.splitlines() if ln.strip()][:4]
    got4 = collect_amax(src, text, mods, samples=4)
    want4 = direct_amax(src, four)
    assert got4 == {m: want4[m] for m in mods}
    assert (got4 != got) == any(want4[m] != want[m] for m in mods)


def test_convert_writes_input_scale_from_the_measured_amax(src: Path, text: Path, tmp_path: Path) -> None:
    lines = [ln for ln in TEXT.splitlines() if ln.strip()][:2]
    want = direct_amax(src, lines)
    dst = tmp_path / "a4"
    convert_checkpoint(src, dst, ConvertOptions("nvfp4", calibrate=text, calibration_samples=2))
    hq = json.loads((dst / "hf_quant_config.json").read_text())
    assert hq["quantization"]["quant_algo"] == "NVFP4"
    n = 0
    with HfFolder(dst) as f:
        for name in f.names():
            if name.endswith(".input_scale"):
                mod = name[: -len(".input_scale")]
                got = np.asarray(f.tensor(name))
                ref = (torch.tensor(want[mod], dtype=torch.float32) / (6.0 * 448.0)).numpy()
                assert got.dtype == np.float32 and got.view(np.uint32) == ref.view(np.uint32), mod
                n += 1
    assert n == 14


def test_calibrate_errors(src: Path, text: Path, tmp_path: Path) -> None:
    def refused(opts: ConvertOptions, match: str) -> None:
        with pytest.raises(MetraleError, match=match):
            convert_checkpoint(src, tmp_path / "o", opts)
        assert not (tmp_path / "o").exists()

    refused(ConvertOptions("fp8", calibrate=text), r"--calibrate applies to --format nvfp4 only \(got fp8\)")
    refused(
        ConvertOptions("nvfp4", calibrate=text, calibration=text),
        r"--calibration and --calibrate: give one",
    )
    refused(
        ConvertOptions("nvfp4", calibrate=text, calibration_samples=0),
        r"--calibration-samples 0: want at least 1",
    )
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    refused(ConvertOptions("nvfp4", calibrate=empty), r"--calibrate .*empty\.txt: no non-empty line of text")
    refused(
        ConvertOptions("nvfp4", calibrate=tmp_path / "nope.txt"), r"--calibrate .*nope\.txt: cannot read it"
    )


def test_cli_calibrate(src: Path, text: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from metrale.cli import app

    r = CliRunner().invoke(
        app,
        [
            "convert",
            str(src),
            str(tmp_path / "a4"),
            "--calibrate",
            str(text),
            "--calibration-samples",
            "1",
            "-q",
        ],
        env={"COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "a4")], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert "nvfp4+a4" in r.output
