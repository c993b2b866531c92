"""The streaming order of the tensor-core GEMM (arithmetic.md § tree): a binary counter of
aligned 8-block steps, finished by the right-nested sum of its levels, gives ``tree_sum``'s bits
for every block count, including −0.0, NaN, Inf and values whose sum depends on the order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrale.reference.tree import tree_sum

F32 = np.float32
STEP = 8


def counter_root(v: np.ndarray) -> np.float32:
    """The kernel's order: 8-leaf step roots (padded with −0.0), pushed into levels p[L]."""
    b = len(v)
    steps = -(-b // STEP)
    padded = np.concatenate([v, np.full(steps * STEP - b, -0.0, dtype=F32)])
    p: dict[int, np.float32] = {}
    for s in range(steps):
        c = tree_sum(padded[s * STEP : (s + 1) * STEP], axis=0)
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


@pytest.mark.parametrize(
    "b", [1, 2, 7, 8, 9, 16, 17, 24, 56, 63, 64, 65, 96, 100, 104, 120, 129, 232, 256, 257, 768]
)
def test_counter_equals_tree_sum_every_shape(b: int) -> None:
    rng = np.random.default_rng(b)
    # magnitudes spread over 2^-30 .. 2^30: the sum's bits depend on the association order
    v = (rng.standard_normal(b) * np.exp2(rng.integers(-30, 30, b))).astype(F32)
    with np.errstate(all="ignore"):
        assert _bits(counter_root(v)) == _bits(tree_sum(v, axis=0))


@pytest.mark.parametrize(
    "special", [[-0.0], [0.0, -0.0], [np.nan], [np.inf, -np.inf], [3.0e38, 3.0e38, -3.0e38], [1e-45, -1e-45]]
)
def test_counter_special_values(special: list[float]) -> None:
    for b in (len(special), 9, 33):
        v = np.full(b, -0.0, dtype=F32)
        v[: len(special)] = special
        with np.errstate(all="ignore"):
            got, want = counter_root(v), tree_sum(v, axis=0)
        assert _bits(got) == _bits(want) or (np.isnan(got) and np.isnan(want)), (special, b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=300))
def test_counter_equals_tree_sum_property(values: list[float]) -> None:
    v = np.asarray(values, dtype=F32)
    with np.errstate(all="ignore"):
        assert _bits(counter_root(v)) == _bits(tree_sum(v, axis=0))


def test_counter_fold_is_right_nested() -> None:
    """7 steps (56 blocks): the levels hold 2^24 (steps 0-3), 1 (steps 4-5) and 1 (step 6). The
    padded tree adds the two 1s first: 2^24 + 2 exactly; adding 2^24 + 1 first would round to
    2^24 (tie to even) and end at 2^24."""
    v = np.zeros(56, dtype=F32)
    v[0], v[32], v[48] = 2.0**24, 1.0, 1.0
    assert float(tree_sum(v, axis=0)) == 2.0**24 + 2
    assert _bits(counter_root(v)) == _bits(tree_sum(v, axis=0))
