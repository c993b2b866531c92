"""Every exception class metrale defines derives from MetraleError (read from the source with
ast, so modules that need CuPy count too)."""

from __future__ import annotations

import ast
import builtins

import import_graph as ig

import metrale


def _exception_classes() -> dict[str, list[str]]:
    """Class name → its base names, for every class in metrale whose bases reach a builtin
    exception (through classes of metrale or directly)."""
    bases: dict[str, list[str]] = {}
    for path in ig.modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                bases[node.name] = names
    builtin_exc = {
        n
        for n in dir(builtins)
        if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)
    }

    def is_exc(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in builtin_exc:
            return True
        return name in bases and name not in seen and any(is_exc(b, seen | {name}) for b in bases[name])

    return {n: b for n, b in bases.items() if is_exc(n)}


def _derives_from_metrale_error(name: str, classes: dict[str, list[str]]) -> bool:
    return name == "MetraleError" or any(
        b in classes and _derives_from_metrale_error(b, classes) for b in classes.get(name, [])
    )


def test_every_exception_class_is_a_metrale_error() -> None:
    classes = _exception_classes()
    assert {"MetraleError", "KernelMissing", "BackendUnavailable", "PeerUnavailable"} <= set(classes)
    bad = sorted(n for n in classes if not _derives_from_metrale_error(n, classes))
    assert bad == [], f"exception classes that are not MetraleErrors: {bad}"
    assert issubclass(metrale.BackendUnavailable, metrale.MetraleError)
    assert issubclass(metrale.BackendUnavailable, RuntimeError)  # still caught as before


def test_walker_sees_a_stray_exception_class() -> None:
    classes = _exception_classes() | {"Stray": ["RuntimeError"], "Child": ["Stray"]}
    assert not _derives_from_metrale_error("Stray", classes)
    assert not _derives_from_metrale_error("Child", classes)


def test_a_kind_takes_the_article_of_the_type_name() -> None:
    from metrale.errors import a_kind

    assert [a_kind(v) for v in (3, "x", None, 1.5, [], object())] == [
        "an int",
        "a str",
        "a NoneType",
        "a float",
        "a list",
        "an object",
    ]
