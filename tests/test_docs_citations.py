"""The repository stands alone: code and docs cite ``docs/arithmetic.md`` sections by name, and
only names that exist there; never the design notes outside the repository, the seed engine's
Rust file names or issue numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARITHMETIC = ROOT / "docs" / "arithmetic.md"
#: Trees whose files must not cite anything outside the repository.
CODE_TREES = ("metrale", "tests", "tools")
TEXT_SUFFIXES = {".py", ".cu", ".cuh", ".md", ".toml", ".txt", ".sh", ".cfg", ".ini", ".yaml", ".yml"}

#: Forbidden citations: the design notes outside the repository (by file or by section number),
#: a Rust file name, an issue number (``issue 5``, ``issue-10``, ``issues #3``).
FORBIDDEN = {
    "the design notes": re.compile(r"CONTRACT(?:\.md)?\s*§|CONTRACT\.md"),
    "a Rust file name": re.compile(r"\b[A-Za-z0-9_-]+\.rs\b"),
    "an issue number": re.compile(r"\bissues?[ -]?#?\d+\b", re.IGNORECASE),
}
#: A section citation: ``§ name`` (``arithmetic.md § a16``, ``§ a16, § tree``).
CITATION = re.compile(r"§\s*([A-Za-z0-9][A-Za-z0-9_-]*)")
HEADING = re.compile(r"^#{2,4} ([a-z0-9][a-z0-9_-]*): ", re.MULTILINE)
TABLE_ROW = re.compile(r"^\| `([a-z0-9][a-z0-9_-]*)` \|", re.MULTILINE)


def _files(trees: tuple[str, ...]) -> list[Path]:
    out = []
    for tree in trees:
        out += [p for p in sorted((ROOT / tree).rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES]
    return [p for p in out if p != Path(__file__).resolve()]


def _doc_files() -> list[Path]:
    return [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def _sections() -> list[str]:
    return HEADING.findall(ARITHMETIC.read_text(encoding="utf-8"))


def forbidden_citations(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, matched text) of every forbidden citation in ``text``."""
    hits = []
    for no, line in enumerate(text.splitlines(), 1):
        for kind, pattern in FORBIDDEN.items():
            hits += [(no, kind, m.group(0)) for m in pattern.finditer(line)]
    return hits


def unknown_sections(text: str, sections: set[str]) -> list[tuple[int, str]]:
    """(line number, name) of every ``§ name`` in ``text`` that is not a section name."""
    return [
        (no, m.group(1))
        for no, line in enumerate(text.splitlines(), 1)
        for m in CITATION.finditer(line)
        if m.group(1) not in sections
    ]


@pytest.mark.parametrize(
    "line",
    [
        "# see CONTRACT §5.3",
        "// Contract: CONTRACT.md §4 (A16)",
        '"""The W8A8 arm (``dense_ffn_w8a8.rs``)."""',
        "# routed as quant_dispatch.rs does",
        "# the issue 5 targets",
        "help='issue-3 m=1 floor'",
        "(Issue #10)",
    ],
)
def test_forbidden_patterns_catch(line: str) -> None:
    assert forbidden_citations(line), line


@pytest.mark.parametrize(
    "line",
    [
        "# arithmetic.md § tree",
        'res["issue3_floor"] = {',  # a JSON key, not a citation
        "name.rsplit('.', 1)",
        "an issue slot is busy",
        "tool calls x.rs_scale",
    ],
)
def test_forbidden_patterns_spare(line: str) -> None:
    assert not forbidden_citations(line), line


def test_sections_are_unique_and_listed() -> None:
    text = ARITHMETIC.read_text(encoding="utf-8")
    names = _sections()
    assert len(names) >= 20, names
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    table = text[text.index("| name | what it fixes |") :].split("\n\n", 1)[0]
    assert sorted(TABLE_ROW.findall(table)) == sorted(names)


def test_unknown_sections_catch() -> None:
    assert unknown_sections("# arithmetic.md § a16, § nosuch, §5", {"a16"}) == [(1, "nosuch"), (1, "5")]


@pytest.mark.parametrize("tree", CODE_TREES)
def test_code_cites_nothing_outside_the_repository(tree: str) -> None:
    bad = [
        f"{p.relative_to(ROOT)}:{no}: {kind}: {hit}"
        for p in _files((tree,))
        for no, kind, hit in forbidden_citations(p.read_text(encoding="utf-8"))
    ]
    assert not bad, "\n".join(bad)


def test_docs_cite_nothing_outside_the_repository() -> None:
    bad = [
        f"{p.relative_to(ROOT)}:{no}: {kind}: {hit}"
        for p in _doc_files()
        for no, kind, hit in forbidden_citations(p.read_text(encoding="utf-8"))
    ]
    assert not bad, "\n".join(bad)


def test_section_citations_exist() -> None:
    sections = set(_sections())
    files = _files(CODE_TREES) + _doc_files()
    bad = [
        f"{p.relative_to(ROOT)}:{no}: § {name}"
        for p in files
        for no, name in unknown_sections(p.read_text(encoding="utf-8"), sections)
    ]
    assert not bad, "\n".join(bad)
