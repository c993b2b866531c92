"""The README's Python example runs as written (on the reference backend here)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs(monkeypatch) -> None:
    monkeypatch.setenv("METRALE_BACKEND", "reference")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "README has no python example"
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # its asserts are the checks
    assert namespace["y"].shape == (5, 64)
