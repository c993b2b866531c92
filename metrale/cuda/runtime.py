"""Run-time compilation of the CUDA kernel files (``kernels/*.cu``) with CuPy.

Each ``.cu`` file is compiled once per process and device with ``cupy.RawModule`` (NVRTC),
options ``-std=c++17 --fmad=false --ftz=false --prec-div=true --prec-sqrt=true`` (exactness:
no contraction of a multiply and an add, IEEE division, subnormals kept; no fast math) for the
current device's architecture (CuPy picks it). ``#include "x.cuh"`` lines naming a file of
``kernels/`` are inlined textually, so the module's cache key covers the headers too.

``get_kernel(cu_file, name)`` returns the ``cupy.RawKernel`` or None when the module cannot be
built for this device; the reason is kept in ``build_errors`` and the backend then lacks the
kernels of that file ("missing in this target build").
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

KERNEL_DIR = Path(__file__).parent / "kernels"
COMPILE_OPTIONS: tuple[str, ...] = (
    "-std=c++17",
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)

#: (cu_file, device id) -> why the module could not be built.
build_errors: dict[tuple[str, int], str] = {}
_modules: dict[tuple[str, int], Any] = {}


def kernel_files() -> list[str]:
    """Names of the shipped ``.cu`` files."""
    return sorted(p.name for p in KERNEL_DIR.glob("*.cu"))


def source(cu_file: str) -> str:
    """The file's text with its local ``#include "..."`` headers inlined (each once)."""
    seen: set[str] = set()

    def expand(name: str) -> str:
        text = (KERNEL_DIR / name).read_text()

        def repl(m: re.Match[str]) -> str:
            inc = m.group(1)
            if not (KERNEL_DIR / inc).is_file():
                return m.group(0)
            if inc in seen:
                return f"// {inc} already included\n"
            seen.add(inc)
            return f"// ---- begin {inc} ----\n{expand(inc)}\n// ---- end {inc} ----\n"

        return _INCLUDE.sub(repl, text)

    return expand(cu_file)


def device_id() -> int:
    """The current CUDA device's ordinal."""
    import cupy

    return int(cupy.cuda.runtime.getDevice())


@cache
def device_props(dev: int) -> dict[str, Any]:
    """Properties of device ``dev`` (name, multiProcessorCount, major, minor, ...)."""
    import cupy

    return dict(cupy.cuda.runtime.getDeviceProperties(dev))


def sm_count(dev: int | None = None) -> int:
    """Number of multiprocessors of the (current) device."""
    return int(device_props(device_id() if dev is None else dev)["multiProcessorCount"])


def get_module(cu_file: str) -> Any | None:
    """The compiled ``cupy.RawModule`` of ``cu_file`` for the current device, or None."""
    dev = device_id()
    key = (cu_file, dev)
    if key in _modules:
        return _modules[key]
    mod = None
    try:
        import cupy

        mod = cupy.RawModule(code=source(cu_file), options=COMPILE_OPTIONS)
        mod.compile()
    except Exception as exc:  # compile or load failure: the kernels are absent on this device
        build_errors[key] = f"{type(exc).__name__}: {exc}"
        mod = None
    _modules[key] = mod
    return mod


def get_kernel(cu_file: str, name: str) -> Any | None:
    """The ``cupy.RawKernel`` ``name`` of ``cu_file`` on the current device, or None when the
    module did not build or lacks the function (reason in ``build_errors``)."""
    mod = get_module(cu_file)
    if mod is None:
        return None
    try:
        return mod.get_function(name)
    except Exception as exc:
        build_errors[(f"{cu_file}:{name}", device_id())] = f"{type(exc).__name__}: {exc}"
        return None


def set_dynamic_smem(kernel: Any, nbytes: int) -> None:
    """Allow ``kernel`` up to ``nbytes`` of dynamic shared memory (raises the opt-in cap once)."""
    cur = getattr(kernel, "_metrale_smem", 0)
    if nbytes > cur and nbytes > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = int(nbytes)
        kernel._metrale_smem = int(nbytes)
