"""One vocabulary of formats (``FORMAT_NAMES``): convert, generate, bench, replace_mlps and
the benchmark tools take the same names, and a name a command cannot serve is a one-line
error saying why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metrale.bench import cases, report
from metrale.bench.options import parse
from metrale.checkpoint.example import make_example_checkpoint
from metrale.cli import app
from metrale.errors import MetraleError
from metrale.reference.formats.spec import CONVERT_SERVES, FORMAT_ALIASES, FORMAT_NAMES, FORMATS, pick_format
from metrale.testing import random_ffn

NAMES = ["nvfp4", "w4a4", "w8a8", "q2_0", "fp8", "bf16"]


def test_the_vocabulary() -> None:
    assert list(FORMAT_NAMES) == NAMES
    assert all(n.stem in FORMATS for n in FORMAT_NAMES.values())
    assert [n for n, f in FORMAT_NAMES.items() if f.a4] == ["w4a4"]


def test_every_command_speaks_it() -> None:
    pytest.importorskip("torch")
    from metrale import hf

    assert list(cases.FORMATS) == NAMES
    assert list(hf.FORMATS) == NAMES
    assert set(CONVERT_SERVES) == set(NAMES)
    r = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "200"})
    assert " | ".join(NAMES) in r.output


def test_bench_takes_the_names_and_the_old_spellings() -> None:
    assert parse(["--dry-run", "--formats", "w4a4,nvfp4-w4a16"]).formats == ["w4a4", "nvfp4"]
    assert cases.FORMATS["w4a4"].input_scale is not None and cases.FORMATS["nvfp4"].input_scale is None


def test_bench_seeds_unchanged_by_the_rename() -> None:
    """The weights of ``nvfp4`` are those the stored runs measured as ``nvfp4-w4a16``."""
    a = cases.build_host("nvfp4", 32, 64, 0, "tiny")
    want = cases.rng_for(0, "tiny", "nvfp4-w4a16")
    b = random_ffn("nvfp4", want, 32, 64, None)
    assert all(x.weight.tobytes() == y.weight.tobytes() for x, y in zip(a.all(), b.all(), strict=True))


def test_stored_runs_with_old_names_load(tmp_path: Path) -> None:
    doc = {"shapes": {"tiny": {"formats": {"nvfp4-w4a16": {"rows": {"1": {}}}}, "peers": {}}}}
    p = tmp_path / "old.json"
    p.write_text(json.dumps(doc))
    assert list(report.load(p)["shapes"]["tiny"]["formats"]) == ["nvfp4"]


@pytest.mark.parametrize(
    ("fmt", "says"), [("w4a4", "use --format nvfp4 with --calibrate"), ("bf16", "BF16 is the source format")]
)
def test_convert_refuses_what_it_cannot_write(tmp_path: Path, fmt: str, says: str) -> None:
    src = make_example_checkpoint(tmp_path / "src")
    r = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "o"), "--format", fmt])
    err = r.stderr.strip()
    assert r.exit_code == 1 and len(err.splitlines()) == 1 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_pick_format() -> None:
    serves = dict.fromkeys(NAMES)
    assert pick_format(" NVFP4 ", serves, "--format") == "nvfp4"
    assert all(pick_format(a, serves, "f") == n for a, n in FORMAT_ALIASES.items())
    with pytest.raises(MetraleError, match=r"^--format 'int3': unknown format \(want one of nvfp4, w4a4"):
        pick_format("int3", serves, "--format")
    with pytest.raises(MetraleError, match="want a format name"):
        pick_format(3, serves, "--format")
    with pytest.raises(MetraleError, match=r"^f bf16: no reason$"):
        pick_format("bf16", {"bf16": "no reason"}, "f")
