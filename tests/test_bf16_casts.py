"""Generated bf16 inputs do not depend on the ml_dtypes version: no float64 random draw
(``standard_normal``, ``uniform``, ... without ``dtype=``) reaches a bf16 cast without a float32
step. ml_dtypes 0.7 rounds float64 -> bf16 once; 0.5 and 0.6 went through float32
(two roundings), so such a cast gives different bits one value in a few thousand. Every
generator here goes float64 -> float32 -> bf16 (or draws float32), in the tests, the tools,
the package, the Python of the docs' code blocks and the scripts the tests hold as strings."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import doc_examples as de

ROOT = Path(__file__).resolve().parent.parent
BF16_NAMES = {"BF16", "metrale.BF16", "ml_dtypes.bfloat16", "bfloat16", "np.dtype(BF16)"}
#: numpy Generator methods that draw float64 unless given ``dtype=``.
FLOAT64_DRAWS = {"standard_normal", "normal", "uniform", "random", "standard_exponential"}


def _draws_float64(node: ast.AST) -> bool:
    """``node`` holds a float64 draw not narrowed to float32 before the cast."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "astype":
            return False  # narrowed (to float32, or the bf16 of another cast) before this one
        if node.func.attr in FLOAT64_DRAWS and not any(k.arg == "dtype" for k in node.keywords):
            return True
    return any(_draws_float64(c) for c in ast.iter_child_nodes(node))


def direct_casts(tree: ast.AST, where: str) -> list[str]:
    out = []
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "astype"
            and n.args
            and ast.unparse(n.args[0]) in BF16_NAMES
            and _draws_float64(n.func.value)
        ):
            out.append(f"{where}:{n.lineno}: {ast.unparse(n)[:120]}")
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "astype(" in n.value:
            try:  # a script held as a string (run in a subprocess)
                inner = ast.parse(textwrap.dedent(n.value))
            except SyntaxError:
                continue
            out += direct_casts(inner, f"{where}:{n.lineno} (string)")
    return out


def all_direct_casts() -> list[str]:
    found = []
    for p in sorted([*ROOT.glob("metrale/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("tools/*.py")]):
        if p.name != Path(__file__).name:  # this file's examples of what the scan finds
            found += direct_casts(ast.parse(p.read_text(encoding="utf-8")), str(p.relative_to(ROOT)))
    for b in de.all_blocks():
        if b.lang == "python":
            found += direct_casts(ast.parse(b.code), b.where)
    return found


def test_no_float64_draw_is_cast_to_bf16() -> None:
    found = all_direct_casts()
    assert not found, "float64 -> bf16 casts (use .astype(np.float32) first):\n" + "\n".join(found)


def test_a_direct_cast_is_seen() -> None:
    """The scan can fail: a direct cast is found, in code and in a script string; the
    float32 paths are not."""
    bad = (
        "x = (rng.standard_normal((3, 4)) * 0.5).astype(BF16)\n"
        "s = 'y = rng.uniform(0, 1, 3).astype(metrale.BF16)'\n"
    )
    assert len(direct_casts(ast.parse(bad), "t")) == 2
    good = (
        "x = (rng.standard_normal((3, 4)) * 0.5).astype(F32).astype(BF16)\n"
        "y = rng.standard_normal((3, 4), dtype=np.float32).astype(BF16)\n"
    )
    assert direct_casts(ast.parse(good), "t") == []
