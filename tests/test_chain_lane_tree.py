"""CPU replay of the tree over parts in the fast chain decode kernels (nvfp4.cuh
``nvfp4_run_body``): a warp holds units of U lanes (16 where Q <= 16, else 32), a unit CPI =
U // Q columns of Q part roots, its lane u column u // Q and part u % Q; at stride h = 1, 2, 4,
... < Q a lane whose part is a multiple of 2h adds the root of lane l + h
(``__shfl_down_sync``) where part + h < Q, else keeps its value (the padded
tree's −0.0 leaf: x + −0.0 = x). The replay, symbolic, must give every column the padded tree
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


def warp_tree(q: int) -> dict[tuple[int, int], Node]:
    """The kernel's shuffle schedule over one warp of 32 // U units (lane u of a unit: column
    u // Q, part u % Q; lanes past U // Q whole columns idle). Returns each (unit, column)'s
    root, read in the column's first lane."""
    unit = 16 if q <= 16 else 32
    cols = unit // q

    def label(lane: int) -> str:
        u = lane % unit
        return f"u{lane // unit}c{u // q}p{u % q}" if u < cols * q else "idle"

    lanes: list[Node] = [label(lane) for lane in range(32)]
    h = 1
    while h < q:
        old = list(lanes)
        for lane in range(32):
            down = old[lane + h] if lane + h < 32 else old[lane]  # __shfl_down_sync
            part = lane % unit % q
            if part & (2 * h - 1) == 0 and part + h < q:
                lanes[lane] = f"({old[lane]}+{down})"
        h *= 2
    return {(w, c): lanes[w * unit + c * q] for w in range(32 // unit) for c in range(cols)}


@pytest.mark.parametrize("q", range(1, 33))
def test_run_body_tree_is_the_padded_tree_over_parts(q: int) -> None:
    roots = warp_tree(q)
    unit = 16 if q <= 16 else 32
    assert len(roots) == (32 // unit) * (unit // q)  # every column of every unit
    for (w, col), got in roots.items():
        assert got == padded_tree([f"u{w}c{col}p{j}" for j in range(q)]), (q, w, col, got)
        assert got is not None and "idle" not in got
