"""Shared pytest fixtures (generic helpers live in tests/helpers.py)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A numpy Generator seeded from the test's node id: reproducible, distinct per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
