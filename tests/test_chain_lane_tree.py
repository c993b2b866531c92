"""CPU replay of the tree over parts in the fast chain decode kernels (nvfp4.cuh
``nvfp4_run_body``): with G lanes per run a warp holds CPI = (32 // G) // Q columns of Q part
roots, part-major: lane l (run slot i = l // G) column i % CPI and part i // CPI (idle slots
part Q - 1), the G lanes of a run the same root; at stride h = 1, 2, 4, ... < Q a lane whose
part is a multiple of 2h adds the root of lane l + h CPI G (``__shfl_down_sync``) where
part + h < Q, else keeps its value (the padded tree's −0.0
leaf: x + −0.0 = x). The replay, symbolic, must give every column the padded tree
over its parts (``chain`` § tree over parts; arithmetic.md § tree) for every Q the kernels take."""

from __future__ import annotations

import pytest

from metrale.reference.tree import padded_leaves

Node = str | None  # None: a node wholly in the -0.0 padding


def padded_tree(leaves: list[str]) -> Node:
    """The padded tree's root over ``leaves`` (None-padded to a power of two), left + right."""
    nodes: list[Node] = [*leaves, *[None] * (padded_leaves(len(leaves)) - len(leaves))]
    while len(nodes) > 1:
        nxt: list[Node] = []
        for a, b in zip(nodes[0::2], nodes[1::2], strict=True):
            nxt.append(a if b is None else None if a is None else f"({a}+{b})")
        nodes = nxt
    return nodes[0]


def warp_tree(q: int, g: int) -> list[Node]:
    """The kernel's shuffle schedule over one warp's 32 lanes, G = ``g`` lanes per run; the roots
    in each column's first lane."""
    slots = 32 // g
    cpi = slots // q
    lanes: list[Node] = [
        f"c{(i // g) % cpi}p{(i // g) // cpi}" if i // g < cpi * q else "idle" for i in range(32)
    ]
    h = 1
    while h < q:
        old = list(lanes)
        for lane in range(32):
            part = min((lane // g) // cpi, q - 1)
            d = h * cpi * g
            down = old[lane + d] if lane + d < 32 else old[lane]  # __shfl_down_sync
            if part & (2 * h - 1) == 0 and part + h < q:
                lanes[lane] = f"({old[lane]}+{down})"
        h *= 2
    return [lanes[c * g] for c in range(cpi)]


@pytest.mark.parametrize(("g", "q"), [(g, q) for g in (1, 2, 4) for q in range(1, 32 // g + 1)])
def test_run_body_tree_is_the_padded_tree_over_parts(g: int, q: int) -> None:
    for col, got in enumerate(warp_tree(q, g)):
        assert got == padded_tree([f"c{col}p{j}" for j in range(q)]), (q, col, got)
        assert got is not None and "idle" not in got
