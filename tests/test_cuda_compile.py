"""Every shipped CUDA kernel file compiles for sm_90 with the run-time options (CPU CI: nvcc
only, no GPU). Skipped where nvcc is absent. The files compile in parallel, one nvcc each."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from metrale.cuda.runtime import COMPILE_OPTIONS, KERNEL_DIR, kernel_files, source

NVCC = shutil.which("nvcc")


def _compile(cu: str, out_dir: str) -> tuple[str, int, str]:
    cmd = [
        NVCC or "nvcc",
        "-arch=sm_90",
        *COMPILE_OPTIONS,
        "-cubin",
        "-o",
        str(Path(out_dir) / f"{cu}.cubin"),
        str(KERNEL_DIR / cu),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return cu, p.returncode, p.stdout + p.stderr


def test_kernel_files_exist() -> None:
    assert kernel_files(), f"no .cu files in {KERNEL_DIR}"


def test_kernel_sources_need_no_system_headers() -> None:
    """NVRTC (the run-time compiler) has no system headers: only local includes, inlined."""
    for cu in kernel_files():
        text = source(cu)
        assert "#include <" not in text, f"{cu}: system header include"
        assert '#include "' not in text.replace("// ", ""), f"{cu}: a local include was not inlined"


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_every_kernel_file_compiles_for_sm90() -> None:
    files = kernel_files()
    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor(max_workers=max(1, len(files))) as ex:
        results = list(ex.map(lambda cu: _compile(cu, d), files))
    failed = [f"{cu} (exit {rc}):\n{log[-3000:]}" for cu, rc, log in results if rc != 0]
    assert not failed, "nvcc failed:\n" + "\n".join(failed)
