"""tools/mutants.py's list cannot rot: every mutant's ``old`` snippet occurs exactly once in its
file, its ``new`` differs, and its targeted tests exist (the mutation run itself is on demand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mutants() -> tuple:
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "tools" / "mutants.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutants", mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod.MUTANTS


def test_every_old_snippet_occurs_once() -> None:
    muts = _mutants()
    assert len({m.name for m in muts}) == len(muts) == 34
    for m in muts:
        text = (ROOT / m.file).read_text()
        assert text.count(m.old) == 1, f"{m.name}: {m.file} holds its old snippet {text.count(m.old)} times"
        assert m.new != m.old, m.name
        for t in m.tests:
            assert (ROOT / t).is_file(), f"{m.name}: no {t}"
