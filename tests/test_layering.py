"""The house's layers: ``metrale/reference`` (the specification) imports nothing above it, and
the package has no import circle except deliberate lazy plug-in points marked in the code with
a ``# plug-in point`` comment on the import line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import import_graph as ig

FLOOR = "metrale.reference"
FLOOR_MAY_IMPORT = {"metrale.errors"}


def _upward(es: list[ig.Edge]) -> list[ig.Edge]:
    return [
        e
        for e in es
        if (e.src == FLOOR or e.src.startswith(FLOOR + "."))
        and not (e.dst == FLOOR or e.dst.startswith(FLOOR + "."))
        and e.dst not in FLOOR_MAY_IMPORT
    ]


def test_reference_imports_nothing_above_it() -> None:
    bad = _upward(ig.edges())
    assert not bad, "imports from metrale/reference upward:\n" + "\n".join(
        f"{e.src} -> {e.dst}: {e.line.strip()}" for e in bad
    )


def test_no_import_circle_except_marked_plug_in_points() -> None:
    es = [e for e in ig.edges() if "# plug-in point" not in e.line]
    assert ig.cycles(es) == []


def test_checker_sees_an_upward_import_and_a_circle(tmp_path: Path) -> None:
    """The two checks above fail on a tree that has the faults (so they can fail)."""
    root = tmp_path / "metrale"
    (root / "reference").mkdir(parents=True)
    (root / "checkpoint").mkdir()
    for p in (root, root / "reference", root / "checkpoint"):
        (p / "__init__.py").write_text("")
    (root / "errors.py").write_text("")
    (root / "reference" / "layer.py").write_text(
        textwrap.dedent("""
            from metrale.errors import X
            def f():
                from metrale.checkpoint.load import g
        """)
    )
    (root / "checkpoint" / "load.py").write_text("from metrale.reference.layer import f\n")
    es = ig.edges(root)
    assert [(e.src, e.dst, e.lazy) for e in _upward(es)] == [
        ("metrale.reference.layer", "metrale.checkpoint.load", True)
    ]
    assert ig.cycles(es) == [["metrale.checkpoint.load", "metrale.reference.layer"]]


def test_reference_runs_without_the_layers_above() -> None:
    """The reference's modules import in a fresh interpreter with metrale.cuda, .checkpoint and
    .cli blocked, and project computes."""
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name in ("metrale.cuda", "metrale.checkpoint", "metrale.cli"):
                    raise ImportError("blocked " + name)
        sys.meta_path.insert(0, Block())
        import numpy as np
        import metrale
        from metrale.reference import layer, projection, kernels, context, dispatch, tiers, w8a8_arm
        x = np.ones((1, 16), dtype=metrale.BF16)
        w = metrale.Nvfp4Weight.quantize(np.ones((16, 16), dtype=np.float32))
        print(metrale.project(x, w).view(np.uint16)[0, 0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(0x4180)  # bf16(16.0): sixteen products 1·1, exact
