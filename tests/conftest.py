"""Shared pytest fixtures (generic helpers live in tests/helpers.py)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator

import numpy as np
import pytest

from metrale.cuda import cuda_unavailable_reason
from metrale.reference.tiers import weight_quantization


def pytest_sessionstart(session: pytest.Session) -> None:
    """With METRALE_REQUIRE_GPU=1 (set by tools/gpu_check.py) a missing CUDA backend (CuPy
    failing to import, no device) fails the run instead of skipping every CUDA test."""
    if os.environ.get("METRALE_REQUIRE_GPU") == "1":
        reason = cuda_unavailable_reason()
        if reason is not None:
            raise pytest.UsageError(f"METRALE_REQUIRE_GPU=1 but the CUDA backend is unavailable: {reason}")


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
