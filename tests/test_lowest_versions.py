"""tools/lowest_versions.py: the pins of CI's lowest-versions run cover every runtime requirement."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("lowest_versions", ROOT / "tools" / "lowest_versions.py")
assert _spec and _spec.loader
TOOL = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(TOOL)


def test_every_runtime_requirement_is_pinned_at_its_floor() -> None:
    project = TOOL.tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = TOOL.lowest(ROOT / "pyproject.toml")
    runtime = list(project["dependencies"])
    for extra, reqs in project["optional-dependencies"].items():
        if extra not in TOOL.SKIPPED_EXTRAS:
            runtime += [r for r in reqs if not r.startswith(project["name"])]
    for req in runtime:
        name, floor = req.split(">=")
        assert pins[name.split("[")[0].strip().lower()] == floor.strip(), req
    assert "cupy-cuda13x" not in pins and "pytest" not in pins


def test_a_requirement_without_a_floor_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "pyproject.toml"
    p.write_text('[project]\nname = "x"\ndependencies = ["numpy>=1.26", "rich"]\n')
    with pytest.raises(SystemExit, match="'rich' has no plain '>=' floor"):
        TOOL.lowest(p)
    p.write_text('[project]\nname = "x"\ndependencies = ["numpy>=1.26", "rich<14"]\n')
    with pytest.raises(SystemExit, match="'rich<14'"):
        TOOL.lowest(p)
