"""The fixed binary tree over block values (arithmetic.md § tree), whole or split along its
aligned subtrees.

``tree_sum`` is ``finish_tree`` over the roots of the aligned subtrees that cover [0, B): the
same code a tensor-parallel rank uses for its block range, so a split cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

NEG_ZERO = np.float32(-0.0)

Span = tuple[int, int]


def padded_leaves(nblocks: int) -> int:
    """P: the tree's leaf count, ``nblocks`` rounded up to a power of two."""
    return 1 << max(0, (nblocks - 1).bit_length())


def subtree_spans(b0: int, b1: int) -> list[Span]:
    """The maximal aligned subtrees ``(lo, size)`` (size a power of two, lo % size == 0) that
    cover blocks [b0, b1) in K order: at most 2·log2(b1 − b0) + 1 of them."""
    spans: list[Span] = []
    lo = b0
    while lo < b1:
        size = 1 << ((b1 - lo).bit_length() - 1)
        if lo:
            size = min(size, lo & -lo)
        spans.append((lo, size))
        lo += size
    return spans


def _pairwise(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):  # ±Inf / NaN propagate by IEEE rules
        while v.shape[0] > 1:
            v = v[0::2] + v[1::2]
    return v[0]


def subtree_roots(v: np.ndarray, spans: list[Span], first: int = 0, axis: int = 0) -> np.ndarray:
    """Roots of ``spans`` over f32 block values ``v`` whose index 0 along ``axis`` is block
    ``first``: f32 [len(spans), *rest]. Each root is its subtree of adjacent-pair adds."""
    v = np.moveaxis(np.asarray(v, dtype=np.float32), axis, 0)
    return np.stack([_pairwise(v[lo - first : lo - first + size]) for lo, size in spans])


def finish_tree(nodes: Mapping[Span, np.ndarray], nblocks: int) -> np.ndarray:
    """The root of the tree over ``nblocks`` leaves from known subtree roots ``nodes`` that cover
    [0, nblocks): every missing node is left + right of its children, a node wholly in the
    −0.0 padding is −0.0 (−0.0 + −0.0 = −0.0). f32, the shape of one node."""
    shape = next(iter(nodes.values())).shape

    def node(lo: int, size: int) -> np.ndarray:
        got = nodes.get((lo, size))
        if got is not None:
            return got
        if lo >= nblocks:
            return np.full(shape, NEG_ZERO, dtype=np.float32)
        if size == 1:
            raise ValueError(f"finish_tree: block {lo} is covered by no subtree")
        h = size // 2
        with np.errstate(over="ignore", invalid="ignore"):
            return node(lo, h) + node(lo + h, h)

    return node(0, padded_leaves(nblocks))


def tree_sum(v: np.ndarray, axis: int = 0) -> np.ndarray:
    """Sum fp32 block values along ``axis`` by the perfect binary tree in K order.

    Leaves are padded with −0.0 up to a power of two, then ``v = v[0::2] + v[1::2]``
    (adjacent pairs first, each add one fp32 rounding) until one node is left.
    """
    b = np.shape(v)[axis]
    spans = subtree_spans(0, b)
    return finish_tree(dict(zip(spans, subtree_roots(v, spans, 0, axis), strict=True)), b)
