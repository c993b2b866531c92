"""The GPU tests' session seed reaches pytest-xdist workers: every worker's randomized inputs must
come from the seed the report header prints, or a failure cannot be replayed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(env_seed: str | None) -> list[str]:
    """Import tests/gpu/conftest.py in a fresh interpreter, then start a child process as xdist
    starts a worker (inheriting the environment); print both processes' seeds."""
    code = textwrap.dedent(
        """
        import subprocess, sys
        import tests.gpu.conftest as c
        probe = "import tests.gpu.conftest as c; print(c.SESSION_SEED)"
        child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        print(c.SESSION_SEED)
        print(child.stdout.strip())
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "METRALE_TEST_SEED"}
    env["PYTHONPATH"] = str(ROOT)
    if env_seed is not None:
        env["METRALE_TEST_SEED"] = env_seed
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=ROOT
    )
    return out.stdout.split()


def test_a_fresh_seed_is_shared_with_child_processes() -> None:
    parent, child = _run(None)
    assert parent == child


def test_a_given_seed_is_kept() -> None:
    assert _run("12345") == ["12345", "12345"]


def test_worker_comparison_counts_reach_the_controller() -> None:
    """Each xdist worker's bits_equal counts travel in its workeroutput and the controller's
    summary adds them up (it printed 0 comparisons under -n before)."""
    import types

    from tests.gpu import conftest, gen

    start = dict(gen.COMPARED)
    try:
        worker_out: dict = {}
        gen.COMPARED.update(calls=3, values=300)
        conftest.pytest_sessionfinish(
            types.SimpleNamespace(config=types.SimpleNamespace(workeroutput=worker_out))
        )
        assert worker_out["metrale_compared"] == {"calls": 3, "values": 300}
        gen.COMPARED.update(calls=1, values=10)  # the controller's own
        for _ in range(2):
            conftest.pytest_testnodedown(types.SimpleNamespace(workeroutput=worker_out), None)
        assert gen.COMPARED == {"calls": 7, "values": 610}
        conftest.pytest_sessionfinish(types.SimpleNamespace(config=types.SimpleNamespace()))  # not a worker
    finally:
        gen.COMPARED.clear()
        gen.COMPARED.update(start)
