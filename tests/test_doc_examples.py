"""Every code block of README.md and docs/*.md runs as written (``tools/doc_examples.py``):
the CPU ones here, each alone in an empty folder; ``gpu`` ones on the GPU machine
(``tools/gpu_check.py``); ``no-run`` ones state why; ``text`` ones are pseudo-code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import doc_examples as de

BLOCKS = de.all_blocks()
CPU = [b for b in BLOCKS if b.runs and not b.gpu]


def test_every_block_is_classified() -> None:
    bad = [f"{b.where}: ```{b.lang}" for b in BLOCKS if b.lang not in de.LANGS]
    assert not bad, "blocks without a language (python, bash or text):\n" + "\n".join(bad)
    assert all(b.no_run for b in BLOCKS if b.no_run is not None), "a no-run block without its reason"
    assert [b.where for b in BLOCKS if b.gpu and b.lang == "python"], "no GPU example"
    assert len(CPU) >= 5


@pytest.mark.parametrize("block", CPU, ids=[b.where for b in CPU])
def test_doc_block_runs(block: de.Block, tmp_path: Path) -> None:
    r = de.run(block, tmp_path, timeout=300)
    assert r.returncode == 0, f"{block.where} failed:\n{r.stdout}{r.stderr}"


def test_the_reader_and_runner_can_fail(tmp_path: Path) -> None:
    """A made-up doc: tags are read, and a failing block fails."""
    doc = tmp_path / "d.md"
    doc.write_text(
        "x\n```python\nraise SystemExit(3)\n```\n```bash no-run: slow\nsleep 99\n```\n"
        "```python gpu\nimport cupy\n```\n```text\na = b\n```\n"
    )
    bs = de.blocks(doc)
    assert [(b.lang, b.gpu, b.no_run, b.runs, b.line) for b in bs] == [
        ("python", False, None, True, 2),
        ("bash", False, "slow", False, 5),
        ("python", True, None, True, 8),
        ("text", False, None, False, 11),
    ]
    assert de.run(bs[0], tmp_path / "w").returncode == 3
    doc.write_text("```python\nprint(1)\n")
    with pytest.raises(ValueError, match="unclosed code fence"):
        de.blocks(doc)
