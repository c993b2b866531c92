"""What a user of the command line sees: help at 80 columns, the bench's typer interface,
``python -m metrale``, the demo's files and columns, backend errors naming
``METRALE_BACKEND``, ``verify`` on an unquantized folder, and reprs."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from metrale.checkpoint.example import make_example_checkpoint
from metrale.cli import app
from metrale.cuda import cuda_unavailable_reason
from tests.layer_cases import small_nvfp4_layer

COMMANDS = ["convert", "inspect", "verify", "demo", "generate", "bench"]
BOX = "│╭╮╰╯─┃━┏┓┗┛"


def _help(*cmd: str) -> str:
    r = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert r.exit_code == 0, r.output
    return r.output


def _texts(cmd: str | None) -> list[str]:
    """The help texts the user wrote for ``cmd`` (its options' and its own)."""
    group = typer.main.get_command(app)
    c = group if cmd is None else group.commands[cmd]  # type: ignore[attr-defined]
    texts = [p.help for p in c.params if getattr(p, "help", None)]
    return [*texts, (c.help or "").split("\n\n")[0]]


@pytest.mark.parametrize("cmd", [None, *COMMANDS])
def test_help_at_80_columns(cmd: str | None) -> None:
    out = _help(*([cmd] if cmd else []))
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert "<bool>" not in out and "``" not in out and "…" not in out
    words = {w for ln in lines for w in "".join(" " if ch in BOX else ch for ch in ln).split()}
    for text in _texts(cmd):
        for w in text.split():
            assert w in words, f"{w!r} of {text!r} is cut in:\n{out}"


def _early_breaks(out: str, width: int = 80) -> list[str]:
    """Lines of the help's prose (outside the boxes) broken before the width was used: the next
    line's first word would have fitted (rich keeps a docstring's own line breaks)."""
    prose = [ln.rstrip() for ln in out.splitlines()]
    prose = [ln if ln.strip() and not any(ch in BOX for ch in ln) else "" for ln in prose]
    return [
        f"{a!r} / {b!r}"
        for a, b in itertools.pairwise(prose)
        if a and b and len(a) + 1 + len(b.split()[0]) <= width - 1
    ]


@pytest.mark.parametrize("cmd", [None, *COMMANDS])
def test_help_prose_fills_its_lines(cmd: str | None) -> None:
    out = _help(*([cmd] if cmd else []))
    assert not _early_breaks(out), "\n".join(_early_breaks(out)) + "\n" + out


def test_an_early_break_is_seen() -> None:
    """The property above can fail: a paragraph broken short of the width is found."""
    assert _early_breaks(" Torch peers are measured; --dry-run runs on the\n CPU with tiny shapes.\n")
    assert not _early_breaks(" " + "word " * 15 + "\n last line.\n")


def test_a_cut_word_is_seen() -> None:
    """The property above can fail: a word cut across two lines is missing from the words."""
    lines = ["│ (mlp.gate_proj/up_pro… │", "│ default: every │"]
    words = {w for ln in lines for w in "".join(" " if ch in BOX else ch for ch in ln).split()}
    assert "(mlp.gate_proj/up_proj/down_proj);" not in words


def test_bench_has_the_typer_interface_with_defaults() -> None:
    out = _help("bench")
    assert "╭─ Options" in out and "usage:" not in out
    for opt, default in (("--samples", "9"), ("--full-max", "64"), ("--kernels", "nvfp4")):
        assert opt in out and f"[default: {default}]" in out


def test_bench_typer_options_reach_the_benchmark(tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    r = CliRunner().invoke(
        app, ["bench", "--dry-run", "--formats", "w4a4", "--m", "1,2", "--peers", "none", "--json", str(js)]
    )
    assert r.exit_code == 0, r.output
    doc = js.read_text()
    assert '"w4a4"' in doc and '"w8a8"' not in doc


def test_python_dash_m_metrale() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "metrale", "--version"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and r.stdout.startswith("metrale ")


def test_demo_keeps_its_files_and_explains_its_columns(tmp_path: Path) -> None:
    d = tmp_path / "d"
    r = CliRunner().invoke(app, ["demo", "--out", str(d), "--backend", "reference"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert f"files kept in {d}:" in r.output
    kept = sorted(p.name for p in d.iterdir())
    assert kept == ["llama-tiny", "llama-tiny-fp8", "llama-tiny-nvfp4", "llama-tiny-q2_0", "llama-tiny-w8a8"]
    for col in ("FFN ratio:", "FFN rel. error:", "max weight err:", "verify:"):
        assert col in r.output
    r = CliRunner().invoke(app, ["demo", "--backend", "reference"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "removed now (--out DIR keeps them)" in r.output
    assert not re.search(r"metrale-demo-\w+", r.output)  # no path to a folder that is gone


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="CUDA can run here")
def test_backend_from_the_environment_is_named(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["demo"], env={"METRALE_BACKEND": "cuda", "COLUMNS": "300"})
    assert r.exit_code == 1
    assert "error: METRALE_BACKEND='cuda': the CUDA backend cannot run here" in r.output
    assert "--backend auto" not in r.output


def test_verify_says_when_nothing_is_quantized(tmp_path: Path) -> None:
    src = make_example_checkpoint(tmp_path / "src")
    r = CliRunner().invoke(app, ["verify", str(src)], env={"COLUMNS": "300"})
    assert r.exit_code == 0
    assert "nothing quantized" in r.output and "OK" not in r.output and "(none)" not in r.output


def test_reprs() -> None:
    layer = small_nvfp4_layer()
    assert (
        repr(layer) == "DenseFfnLayer(hidden=64, intermediate=128, silu, weights=NVFP4, backend='reference')"
    )
    assert repr(layer.backend) == "<ReferenceBackend 'reference': 30 of 30 kernels>"
    assert repr(layer.backend.without(["lora_shrink"])).endswith("29 of 30 kernels, without lora_shrink>")
