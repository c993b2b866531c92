"""The import graph of the ``metrale`` package, read from the source with ``ast`` (test helper).

An edge a → b for every ``import b`` / ``from b import x`` in module a, module level or inside a
function; ``from pkg import sub`` counts as an edge to the submodule ``pkg.sub`` only (Python
imports a package before its submodules anyway, so parent packages are not edges). Each edge
records whether it is lazy (inside a function) and the source line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "metrale"


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    lazy: bool
    line: str


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name → file, for every .py under ``root``."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = p.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _targets(node: ast.AST, pkg: str, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
        mod = ".".join([*base, node.module] if node.module else base)
    else:
        mod = node.module or ""
    subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
    if len(subs) == len(node.names):
        return subs
    return [*subs, mod] if mod in known else subs


def edges(root: Path = PACKAGE) -> list[Edge]:
    """Every import edge between metrale modules."""
    known = modules(root)
    out = []
    for name, path in known.items():
        src = path.read_text()
        lines = src.splitlines()
        tree = ast.parse(src)
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        lazy_nodes = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for dst in _targets(node, pkg, known):
                    if dst != name:
                        out.append(Edge(name, dst, id(node) in lazy_nodes, lines[node.lineno - 1]))
    return out


def package_of(module: str) -> str:
    """The package node of a module: its subpackage of ``metrale`` (``metrale.checkpoint.load``
    → ``metrale.checkpoint``), or the module itself at the top (``metrale.torch``, ``metrale``)."""
    return ".".join(module.split(".")[:2])


def package_edges(es: list[Edge]) -> list[Edge]:
    """The edges between packages (``package_of`` both ends; edges inside a package dropped)."""
    return [
        Edge(package_of(e.src), package_of(e.dst), e.lazy, e.line)
        for e in es
        if package_of(e.src) != package_of(e.dst)
    ]


def cycles(es: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for e in es:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found
