"""GPU tests: every test under tests/gpu carries the ``gpu`` mark and is skipped (one reason)
where CuPy or a CUDA device is absent."""

from __future__ import annotations

import os
import secrets
import sys
from typing import Any

import numpy as np
import pytest

from metrale.cuda import cuda_unavailable_reason

# ``tests.gpu.gen`` / ``tests.helpers`` imports work under plain ``pytest`` too.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

_REASON = cuda_unavailable_reason()
#: Seed of the randomized comparisons: fresh per session unless METRALE_TEST_SEED is set; the
#: seed is printed in the report header so a failure can be replayed. Exported, so pytest-xdist
#: workers (started after this import, with the environment's copy) draw the same seed.
SESSION_SEED = int(os.environ.get("METRALE_TEST_SEED") or secrets.randbits(32))
os.environ["METRALE_TEST_SEED"] = str(SESSION_SEED)


def pytest_report_header(config: pytest.Config) -> str:
    return f"metrale GPU tests: METRALE_TEST_SEED={SESSION_SEED}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    skip = pytest.mark.skipif(_REASON is not None, reason=f"CUDA backend unavailable: {_REASON}")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cuda() -> Any:
    """The process's CUDA backend."""
    from metrale.backend import get_backend

    return get_backend("cuda")


@pytest.fixture
def fresh_rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the session seed and the test id (fresh every session)."""
    import zlib

    return np.random.default_rng([SESSION_SEED, zlib.crc32(request.node.nodeid.encode())])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its comparison counts to the controller (``workeroutput``)."""
    from tests.gpu import gen

    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["metrale_compared"] = dict(gen.COMPARED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller adds up its workers' counts (pytest-xdist hook; absent without xdist)."""
    from tests.gpu import gen

    for key, value in getattr(node, "workeroutput", {}).get("metrale_compared", {}).items():
        gen.COMPARED[key] += value


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.gpu import gen

    c = gen.COMPARED
    terminalreporter.write_line(
        f"metrale GPU comparisons: {c['calls']} output arrays, {c['values']} bf16 values matched bit for bit "
        f"(seed {SESSION_SEED})"
    )
