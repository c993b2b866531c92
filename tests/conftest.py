"""Shared pytest fixtures (generic helpers live in tests/helpers.py)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np
import pytest

from metrale.reference.tiers import weight_quantization


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A numpy Generator seeded from the test's node id: reproducible, distinct per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def _fresh_weight_quant_tier(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts from the default METRALE_WEIGHT_QUANT tier, and none leaks its own
    (the tier is read once per process and cached)."""
    monkeypatch.delenv("METRALE_WEIGHT_QUANT", raising=False)
    weight_quantization.cache_clear()
    yield
    weight_quantization.cache_clear()
