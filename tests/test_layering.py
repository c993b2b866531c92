"""The house's layers: ``metrale/reference`` (the specification) imports nothing above it, and
no import circle anywhere: none between modules (lazy imports inside functions included; a
higher floor plugs itself into a lower one by registration, never by an upward import) and
none between the packages of ``metrale`` (each subpackage and each top-level module one node),
so the packages stand on floors: checkpoint reading, the tensor-parallel layer above it, the
torch modules on top."""

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


def test_no_import_circle_between_modules() -> None:
    assert ig.cycles(ig.edges()) == []


def test_no_import_circle_between_packages() -> None:
    found = ig.cycles(ig.package_edges(ig.edges()))
    assert found == [], "packages importing each other:\n" + "\n".join(
        f"{e.src} -> {e.dst}: {e.line.strip()}"
        for e in ig.package_edges(ig.edges())
        if any(e.src in c and e.dst in c for c in found)
    )


def test_checker_sees_an_upward_import_and_a_circle(tmp_path: Path) -> None:
    """The checks above fail on a tree that has the faults (so they can fail): an upward lazy
    import, a module circle, and a package circle made of modules that form no module circle."""
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
    (root / "checkpoint" / "read.py").write_text("")
    (root / "reference" / "layer.py").write_text("def f():\n    from metrale.checkpoint.read import g\n")
    es = ig.edges(root)
    assert ig.cycles(es) == []
    assert ig.cycles(ig.package_edges(es)) == [["metrale.checkpoint", "metrale.reference"]]


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
