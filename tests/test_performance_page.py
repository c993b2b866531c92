"""docs/performance.md's tables are what ``metrale bench --report`` generates from the committed
result (docs/bench/bench_ffn.json), and regeneration replaces only the text between the markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from metrale.bench import report
from metrale.bench.run import main

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / report.REPORT_PAGE
JSON = ROOT / report.REPORT_JSON
NAME = report.REPORT_JSON.as_posix()


def _blank(text: str) -> str:
    """The page with its generated block emptied (the markers kept)."""
    lines = text.split("\n")
    i = next(n for n, ln in enumerate(lines) if ln.startswith("<!-- begin generated tables"))
    j = lines.index(report.BLOCK_END)
    return "\n".join([*lines[: i + 1], *lines[j:]])


def test_committed_page_is_the_generated_one() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert report.regenerate(page, report.load(JSON), NAME) == page


def test_the_page_holds_the_tables_of_every_shape_and_the_targets() -> None:
    page = PAGE.read_text(encoding="utf-8")
    doc = report.load(JSON)
    for shape, sd in doc["shapes"].items():
        assert f"### {shape}: hidden {sd['hidden']}, intermediate {sd['intermediate']}" in page
    assert "| target | met | worst | per m |" in page
    assert page.count("<!-- begin generated tables") == 1 and page.count(report.BLOCK_END) == 1


def test_report_command_regenerates_the_committed_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    page = tmp_path / "performance.md"
    page.write_text(_blank(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    assert main(["--report", str(page), "--json", NAME]) == 0
    assert page.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")


def test_regeneration_keeps_the_text_around_the_block() -> None:
    doc = report.load(JSON)
    page = f"intro\n{report.BLOCK_BEGIN.format(json='x.json')}\nstale table\n{report.BLOCK_END}\noutro\n"
    out = report.regenerate(page, doc, "x.json")
    assert out.startswith("intro\n") and out.endswith(f"\n{report.BLOCK_END}\noutro\n")
    assert "stale table" not in out and report.markdown(doc) in out


def test_a_page_without_markers_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "p.md"
    page.write_text("no markers here\n")
    assert main(["--report", str(page), "--json", str(JSON)]) == 2
    err = capsys.readouterr().err
    assert f"--report {page}" in err and "ValueError" in err
    assert page.read_text() == "no markers here\n"
