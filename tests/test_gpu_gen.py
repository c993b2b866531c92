"""The GPU tests' weight generators (tests/gpu/gen.py) give a valid weight for every seed and
shape the tests draw, with the edge values they promise: a generator that fails for one seed in
a hundred fails device runs at random, and its failure reads like a kernel's."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gpu import gen


def test_q2_0_seed_that_overflowed_f16() -> None:
    """Seed 63 drew a d of 2^14 times a normal sample past 4, which rounded to +-inf in f16 and
    Q2_0Weight refused it."""
    w = gen.q2_0(np.random.default_rng(63), 45, 12288)
    assert np.isfinite(w.d().astype(np.float32)).all()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 64), blocks=st.integers(1, 200))
def test_q2_0_finite_and_edges(seed: int, n: int, blocks: int) -> None:
    w = gen.q2_0(np.random.default_rng(seed), n, 64 * blocks)
    d = w.d()
    assert np.isfinite(d.astype(np.float32)).all()
    bits = d.view(np.uint16)
    want = gen.F16_EDGES[: min(d.size, gen.F16_EDGES.size)].view(np.uint16)
    assert set(want.tolist()) <= set(bits.ravel().tolist()), "an f16 edge scale is missing"


def test_q2_0_every_binade_and_code() -> None:
    """One large draw holds every f16 exponent (subnormal field 0 through 29, i.e. 2^14) of both
    signs, and all four 2-bit codes."""
    w = gen.q2_0(np.random.default_rng(0), 128, 64 * 256)
    bits = w.d().view(np.uint16).ravel()
    for sign in (0, 1):
        fields = set(((bits[(bits >> 15) == sign] >> 10) & 0x1F).tolist())
        assert fields >= set(range(0, 30)), sorted(set(range(30)) - fields)
    assert set(np.unique(w.q()).tolist()) == {0, 1, 2, 3}
