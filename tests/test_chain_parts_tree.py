"""CPU replay of the tree over parts of the chain decode and generic kernels (common.cuh
``chain_round_tree``: nvfp4.cuh ``nvfp4_run_body`` and ``nvfp4_chain_body``, q2_0_gemv.cu and
fp8_bf16_gemv.cu's generic chain kernels): after a CTA round, thread j < C holds column j's Q part
roots at v[p C] (p = 0 .. Q - 1) in shared memory and sums them in place: at stride h = 1, 2, 4,
... < Q, v[p] = v[p] + v[p + h] for every p a multiple of 2h with p + h < Q (else v[p] is kept:
the padded tree's −0.0 leaf, x + −0.0 = x), the root in v[0]. The replay, symbolic, must give the
padded tree over the parts (``chain`` § tree over parts; arithmetic.md § tree) for every Q the
kernels take."""

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


def in_place_tree(q: int) -> str:
    """The kernel's loop over one column's part roots."""
    v = [f"p{j}" for j in range(q)]
    h = 1
    while h < q:
        for p in range(0, q - h, 2 * h):
            v[p] = f"({v[p]}+{v[p + h]})"
        h *= 2
    return v[0]


@pytest.mark.parametrize("q", range(1, 97))
def test_run_body_tree_is_the_padded_tree_over_parts(q: int) -> None:
    assert in_place_tree(q) == padded_tree([f"p{j}" for j in range(q)])
