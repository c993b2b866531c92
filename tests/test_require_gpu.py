"""METRALE_REQUIRE_GPU=1 (tools/gpu_check.py sets it) turns a missing CUDA backend into a failed
run instead of skipped CUDA tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from metrale.cuda import cuda_unavailable_reason

ROOT = Path(__file__).resolve().parent.parent
#: A small test file that exists: on a GPU machine collecting it must succeed (rc 0).
TARGET = "tests/test_elements.py"


def test_require_gpu_fails_without_a_backend() -> None:
    assert (ROOT / TARGET).is_file(), TARGET
    env = {**os.environ, "METRALE_REQUIRE_GPU": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co", TARGET],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if cuda_unavailable_reason() is None:
        assert p.returncode == 0, p.stdout + p.stderr
    else:
        assert p.returncode != 0
        assert "METRALE_REQUIRE_GPU=1 but the CUDA backend is unavailable" in p.stdout + p.stderr
