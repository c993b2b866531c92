"""The streaming order of the tensor-core GEMM (arithmetic.md § tree): a binary counter of
aligned 8-block steps, finished by the right-nested sum of its levels, gives ``tree_sum``'s bits
for every block count, including −0.0, NaN, Inf and values whose sum depends on the order. Both
are checked against ``pairing_root``, the tree written out by hand (not ``tree_sum``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrale.reference.tree import tree_sum

F32 = np.float32
STEP = 8


def pairing_root(v: np.ndarray) -> np.float32:
    """The tree by hand: pad with −0.0 to a power of two, then add (0, 1), (2, 3), … left to
    right, one f32 rounding per add, level after level, until one value is left."""
    level = [F32(x) for x in v]
    size = 1
    while size < len(level):
        size *= 2
    level += [F32(-0.0)] * (size - len(level))
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), 2):
            with np.errstate(over="ignore", invalid="ignore"):
                nxt.append(F32(level[i] + level[i + 1]))
        level = nxt
    return level[0]


def counter_root(v: np.ndarray) -> np.float32:
    """The kernel's order: 8-leaf step roots (padded with −0.0), pushed into levels p[L]."""
    b = len(v)
    steps = -(-b // STEP)
    padded = np.concatenate([v, np.full(steps * STEP - b, -0.0, dtype=F32)])
    p: dict[int, np.float32] = {}
    for s in range(steps):
        c = pairing_root(padded[s * STEP : (s + 1) * STEP])
        level = 0
        while (s >> level) & 1:
            c = F32(p[level] + c)
            level += 1
        p[level] = c
    acc = None
    for level in range(steps.bit_length()):
        if (steps >> level) & 1:
            acc = p[level] if acc is None else F32(p[level] + acc)
    assert acc is not None
    return acc


def _bits(x: np.float32) -> int:
    return int(np.asarray(x, dtype=F32).view(np.uint32))


def _same(a: np.float32, b: np.float32) -> bool:
    """Equal bits, or both NaN (a NaN's payload is not part of the rule)."""
    return _bits(a) == _bits(b) or bool(np.isnan(a) and np.isnan(b))


@pytest.mark.parametrize(
    "b", [1, 2, 7, 8, 9, 16, 17, 24, 56, 63, 64, 65, 96, 100, 104, 120, 129, 232, 256, 257, 768]
)
def test_counter_equals_tree_sum_every_shape(b: int) -> None:
    rng = np.random.default_rng(b)
    # magnitudes spread over 2^-30 .. 2^30: the sum's bits depend on the association order
    v = (rng.standard_normal(b) * np.exp2(rng.integers(-30, 30, b))).astype(F32)
    with np.errstate(all="ignore"):
        want = pairing_root(v)
        assert _bits(tree_sum(v, axis=0)) == _bits(want)
        assert _bits(counter_root(v)) == _bits(want)


@pytest.mark.parametrize(
    "special", [[-0.0], [0.0, -0.0], [np.nan], [np.inf, -np.inf], [3.0e38, 3.0e38, -3.0e38], [1e-45, -1e-45]]
)
def test_counter_special_values(special: list[float]) -> None:
    for b in (len(special), 9, 33):
        v = np.full(b, -0.0, dtype=F32)
        v[: len(special)] = special
        with np.errstate(all="ignore"):
            want = pairing_root(v)
            assert _same(counter_root(v), want), (special, b)
            assert _same(tree_sum(v, axis=0), want), (special, b)


@settings(max_examples=150, deadline=None, print_blob=True)
@given(st.lists(st.floats(width=32), min_size=1, max_size=300))
def test_counter_and_tree_sum_equal_pairing_property(values: list[float]) -> None:
    """Any f32 values, NaN, ±Inf, ±0 and subnormals included."""
    v = np.asarray(values, dtype=F32)
    with np.errstate(all="ignore"):
        want = pairing_root(v)
        assert _same(tree_sum(v, axis=0), want)
        assert _same(counter_root(v), want)


def test_padding_is_negative_zero() -> None:
    """Three −0.0 leaves and one −0.0 pad give −0.0; a +0.0 pad would give +0.0."""
    v = np.full(3, -0.0, dtype=F32)
    assert _bits(pairing_root(v)) == 0x80000000
    assert _bits(tree_sum(v, axis=0)) == 0x80000000


def test_counter_fold_is_right_nested() -> None:
    """7 steps (56 blocks): the levels hold 2^24 (steps 0-3), 1 (steps 4-5) and 1 (step 6). The
    padded tree adds the two 1s first: 2^24 + 2 exactly; adding 2^24 + 1 first would round to
    2^24 (tie to even) and end at 2^24."""
    v = np.zeros(56, dtype=F32)
    v[0], v[32], v[48] = 2.0**24, 1.0, 1.0
    assert float(pairing_root(v)) == 2.0**24 + 2
    assert _bits(tree_sum(v, axis=0)) == _bits(pairing_root(v))
    assert _bits(counter_root(v)) == _bits(pairing_root(v))
