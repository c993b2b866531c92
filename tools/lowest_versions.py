#!/usr/bin/env python3
"""Print a pip constraints file pinning every runtime dependency of metrale to its floor.

Reads ``pyproject.toml``: ``[project] dependencies`` and every optional extra but ``cuda``
(CuPy needs a GPU) and ``test`` (the test tools run at their newest); each ``name>=floor``
becomes ``name==floor``. ``tools/test.sh --lowest`` installs the project under these pins, so
CI proves the declared floors work. A requirement without a floor is an error (it could not be
tested at its lowest).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

#: Extras whose requirements are not pinned low: CuPy needs a GPU, the test tools stay newest.
SKIPPED_EXTRAS = ("cuda", "test")
FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)\s*$")


def lowest(pyproject: Path) -> dict[str, str]:
    """Package name -> its declared floor, over the runtime dependencies and extras."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"])
    for extra, items in project.get("optional-dependencies", {}).items():
        if extra not in SKIPPED_EXTRAS:
            reqs += items
    pins: dict[str, str] = {}
    for req in reqs:
        if req.split("[")[0].strip() == project["name"]:
            continue  # an extra pulling in another extra of metrale
        m = FLOOR.match(req)
        if m is None:
            raise SystemExit(f"{pyproject}: requirement {req!r} has no plain '>=' floor")
        pins[m.group(1).lower()] = m.group(2)
    return pins


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    for name, floor in sorted(lowest(root / "pyproject.toml").items()):
        sys.stdout.write(f"{name}=={floor}\n")


if __name__ == "__main__":
    main()
