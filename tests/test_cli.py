"""The ``metrale`` command line through typer's CliRunner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.io import HfFolder, save_tensors
from metrale.cli import app

ENV = {"COLUMNS": "240", "NO_COLOR": "1"}


def run(*args: str) -> object:
    return CliRunner().invoke(app, list(args), env=ENV)


def listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_example_checkpoint(
        tmp_path_factory.mktemp("s") / "llama", hidden=64, intermediate=128, layers=2
    )


@pytest.fixture(scope="module")
def converted(src: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("o")
    out = {}
    for fmt in ("nvfp4", "fp8", "w8a8", "q2_0"):
        r = run("convert", str(src), str(root / fmt), "--format", fmt)
        assert r.exit_code == 0, r.output
        assert "model.layers.1.mlp.down_proj.weight" in r.output  # the report table
        assert f"wrote {root / fmt}" in r.output and "max rel. error" in r.output
        out[fmt] = root / fmt
    return out


def test_convert_inspect_verify_each_format(src: Path, converted: dict[str, Path]) -> None:
    formats = {"nvfp4": "nvfp4", "fp8": "fp8", "w8a8": "w8a8", "q2_0": "q2_0"}
    names = {
        "nvfp4": "model.layers.0.mlp.gate_proj",
        "fp8": "model.layers.0.mlp.gate_proj",
        "w8a8": "model.layers.0.mlp.gate_proj",
        "q2_0": "blk.0.ffn_gate.weight",
    }
    ratio = {
        "nvfp4": 2 * 64 * 128 / (64 * 128 // 2 + 64 * 128 // 16 + 4),
        "fp8": 2 * 64 * 128 / (64 * 128 + 512),
        "w8a8": 2 * 64 * 128 / (64 * 128 + 512),
        "q2_0": 2 * 64 * 128 / (128 * 18),
    }
    for fmt, d in converted.items():
        r = run("inspect", str(d))
        assert r.exit_code == 0, r.output
        line = next(ln for ln in r.output.splitlines() if names[fmt] in ln)
        assert formats[fmt] in line and "128×64" in line and f"{ratio[fmt]:.2f}" in line
        j = run("inspect", str(d), "--json")
        rows = {t["tensor"]: t for t in json.loads(j.stdout)["tensors"]}
        assert rows[names[fmt]]["format"] == formats[fmt]
        # bf16 bytes / stored bytes: one correctly rounded float64 division of the same exact
        # integers on both sides (and JSON round-trips a float exactly), so no tolerance
        assert rows[names[fmt]]["ratio"] == ratio[fmt]
        v = run("verify", str(d))
        assert v.exit_code == 0 and "OK" in v.output, v.output
        v = run("verify", str(d), "--against", str(src), "--exact")
        assert v.exit_code == 0, v.output
        assert "error against SRC" in v.output and "yes" in v.output


def test_convert_with_calibration_and_workers(src: Path, tmp_path: Path) -> None:
    with HfFolder(src) as f:
        mods = [n[: -len(".weight")] for n in f.names() if ".mlp." in n]
    cal = tmp_path / "amax.safetensors"
    save_tensors(cal, {f"{m}.input_amax": np.array(5.0, np.float32) for m in mods})
    r = run(
        "convert",
        str(src),
        str(tmp_path / "a4"),
        "-f",
        "nvfp4",
        "--calibration",
        str(cal),
        "--ffn-only",
        "-j",
        "2",
        "-q",
    )
    assert r.exit_code == 0, r.output
    hq = json.loads((tmp_path / "a4" / "hf_quant_config.json").read_text())
    assert hq["quantization"]["quant_algo"] == "NVFP4"
    r = run("inspect", str(tmp_path / "a4"))
    assert "nvfp4+a4" in r.output


def test_verify_reports_violations(converted: dict[str, Path], src: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(converted["nvfp4"], bad)
    hq = json.loads((bad / "hf_quant_config.json").read_text())
    hq["quantization"]["quant_algo"] = "NVFP4"  # declares A4 but no input_scale was written
    (bad / "hf_quant_config.json").write_text(json.dumps(hq))
    r = run("verify", str(bad))
    assert r.exit_code == 1
    assert (
        "violation: quant_algo NVFP4 declares FP4 activations but some modules lack input_scale" in r.stderr
    )
    r = run("verify", str(converted["w8a8"]), "--against", str(src), "--max-rel-error", "1e-6")
    assert r.exit_code == 1 and "relative error" in r.stderr and "exceeds 1e-06 (w8a8)" in r.stderr
    r = run("verify", str(tmp_path / "missing"))
    assert r.exit_code == 1 and "no such file or folder" in r.stderr


def test_cli_errors_leave_filesystem_unchanged(src: Path, tmp_path: Path) -> None:
    before_src, before = listing(src), listing(tmp_path)
    r = run("convert", str(src), str(tmp_path / "o"), "--format", "int3")
    assert r.exit_code == 1 and "error: --format 'int3': unknown format" in r.stderr
    r = run("convert", str(src), str(tmp_path / "o"), "--bogus")
    assert r.exit_code == 2 and re.search(r"No such option:? '?--bogus\b", r.output)
    r = run("convert", str(tmp_path / "nothing"), str(tmp_path / "o"))
    assert r.exit_code == 1 and "SRC is not a folder" in r.stderr
    (tmp_path / "o").mkdir()
    r = run("convert", str(src), str(tmp_path / "o"), "-f", "fp8")
    assert r.exit_code == 1 and "DST exists; pass --force to replace it" in r.stderr
    (tmp_path / "o").rmdir()
    assert listing(src) == before_src and listing(tmp_path) == before


def test_ctrl_c_exit_code(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import metrale.checkpoint.work as work

    def boom(task: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(work, "quantize_tensor", boom)
    r = run("convert", str(src), str(tmp_path / "o"), "-f", "w8a8")
    assert r.exit_code == 130 and "interrupted" in r.stderr
    assert listing(tmp_path) == []


def test_demo(tmp_path: Path) -> None:
    r = run("demo", "--out", str(tmp_path / "d"), "--backend", "reference")
    assert r.exit_code == 0, r.output
    for fmt in ("nvfp4", "fp8", "w8a8", "q2_0"):
        assert any(ln.split("│")[1].strip() == fmt for ln in r.output.splitlines() if ln.count("│") > 3)
        assert (tmp_path / "d" / f"llama-tiny-{fmt}").is_dir()
    assert "OK" in r.output
    r = run("demo", "--out", str(tmp_path / "d"))
    assert r.exit_code == 1 and "exists" in r.stderr


def test_help_lists_commands() -> None:
    r = run("--help")
    assert r.exit_code == 0
    for c in ("convert", "inspect", "verify", "demo", "bench"):
        assert c in r.output


def test_bench_dry_run_is_exact_and_reports() -> None:
    """`metrale bench --dry-run` runs the whole benchmark on the CPU with tiny shapes: every
    format and mode through the layer's entry points, the bit-exactness gate, the table."""
    r = run("bench", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "every timed result bit-exact" in r.output
    for fmt in ("NVFP4", "W8A8", "Q2_0", "FP8", "BF16"):
        assert fmt in r.output


def test_bench_options_through_the_cli() -> None:
    """`metrale bench` hands its arguments to the package's benchmark: its help, and a bad
    option as one error line with exit status 2."""
    r = run("bench", "--help")
    assert r.exit_code == 0
    for opt in ("--formats", "--m", "--full-max", "--sample-rows", "--cell-seconds", "--json"):
        assert opt in r.output
    r = run("bench", "--m", "0")
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: --m 0: '0' is not a row count >= 1 (or decode, prefill)"


def test_bench_report_without_a_page_regenerates_the_default_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`metrale bench --report` (no PAGE, alone or before another option) regenerates the
    default page from the default JSON, as `python -m metrale.bench --report` does: a page whose
    generated block is stale comes back as the committed one."""
    from metrale.bench import report

    root = Path(__file__).resolve().parent.parent
    committed = (root / report.REPORT_PAGE).read_text(encoding="utf-8")
    begin = committed.index("<!-- begin generated tables")
    begin = committed.index("\n", begin) + 1
    stale = committed[:begin] + "stale table\n" + committed[committed.index(report.BLOCK_END) :]
    assert stale != committed
    (tmp_path / report.REPORT_JSON).parent.mkdir(parents=True)
    (tmp_path / report.REPORT_JSON).write_bytes((root / report.REPORT_JSON).read_bytes())
    monkeypatch.chdir(tmp_path)
    for args in (["--report"], ["--report", "--json", str(report.REPORT_JSON)]):
        (tmp_path / report.REPORT_PAGE).write_text(stale, encoding="utf-8")
        r = run("bench", *args)
        assert r.exit_code == 0, r.output
        assert (tmp_path / report.REPORT_PAGE).read_text(encoding="utf-8") == committed


def test_version_and_format_choices_in_help() -> None:
    from metrale.checkpoint.layouts import metrale_version

    r = run("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"metrale {metrale_version()}"
    r = run("convert", "--help")
    assert r.exit_code == 0 and "nvfp4 | fp8 | w8a8 | q2_0" in r.stdout and "--ffn-only" in r.stdout
    assert "--all-linear" not in r.stdout


def test_default_every_linear_and_ffn_only(src: Path, converted: dict[str, Path], tmp_path: Path) -> None:
    r = run("inspect", str(converted["fp8"]), "--json")
    fmts = {t["tensor"]: t["format"] for t in json.loads(r.stdout)["tensors"]}
    assert fmts["model.layers.1.self_attn.o_proj"] == "fp8" and fmts["lm_head"] == "bf16"
    r = run("convert", str(src), str(tmp_path / "f"), "-f", "fp8", "--ffn-only", "-q")
    assert r.exit_code == 0, r.output
    r = run("inspect", str(tmp_path / "f"), "--json")
    fmts = {t["tensor"]: t["format"] for t in json.loads(r.stdout)["tensors"]}
    assert fmts["model.layers.1.self_attn.o_proj"] == "bf16"
    assert fmts["model.layers.1.mlp.down_proj"] == "fp8"
    r = run("convert", str(src), str(tmp_path / "g"), "--all-linear")
    assert r.exit_code == 2 and re.search(r"No such option:? '?--all-linear\b", r.output)


def test_inspect_flags_what_verify_rejects(converted: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(converted["fp8"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["hidden_act"] = "relu"
    (bad / "config.json").write_text(json.dumps(cfg))
    r = run("inspect", str(bad))
    assert r.exit_code == 0
    assert "warning: verify would reject this checkpoint:" in r.stderr and "hidden_act 'relu'" in r.stderr
    r = run("inspect", str(converted["fp8"]))
    assert r.exit_code == 0 and "warning" not in r.stderr
