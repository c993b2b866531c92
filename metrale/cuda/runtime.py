"""Run-time compilation of the CUDA kernel files (``kernels/*.cu``) with CuPy.

Each ``.cu`` file is compiled once per process and device with NVRTC to a cubin for the
device's architecture (``sm_XY``), options ``-std=c++17 --fmad=false --ftz=false
--prec-div=true --prec-sqrt=true`` (exactness: no contraction of a multiply and an add, IEEE
division, subnormals kept; no fast math), and loaded with ``cupy.RawModule(path=...)``.
NVRTC is called directly (CuPy's ``cupy.cuda.compiler.compile_using_nvrtc`` path appends
``-ftz=true`` to every compile, and NVRTC honours the last occurrence: subnormals would be
flushed and the results would differ from the reference). ``#include "x.cuh"`` lines naming a
file of ``kernels/`` are inlined textually, so the cache key covers the headers too. Cubins
are cached on disk under ``$METRALE_CACHE_DIR`` (default ``~/.cache/metrale/kernels``), keyed
by the SHA-256 of source, options, architecture and NVRTC version.

``get_kernel(cu_file, name)`` returns the ``cupy.RawKernel`` or None when the module cannot be
built for this device; the reason is kept in ``build_errors`` and the backend then lacks the
kernels of that file ("missing in this target build").
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from metrale.cuda import configs

KERNEL_DIR = Path(__file__).parent / "kernels"
COMPILE_OPTIONS: tuple[str, ...] = (
    "-std=c++17",
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)
_INSTANCES = re.compile(r"^// @instances ([A-Z0-9_]+)\b.*$", re.MULTILINE)
_DEFINES = re.compile(r"^// @defines ([A-Z0-9_]+)\b.*$", re.MULTILINE)
_ARCH = re.compile(r"^// @arch (sm_\d+a)\s*$", re.MULTILINE)

#: (cu_file, device id) -> why the module could not be built.
build_errors: dict[tuple[str, int], str] = {}
_modules: dict[tuple[str, int], Any] = {}


def kernel_files() -> list[str]:
    """Names of the shipped ``.cu`` files."""
    return sorted(p.name for p in KERNEL_DIR.glob("*.cu"))


def source(cu_file: str) -> str:
    """The file's text with its local ``#include "..."`` headers inlined (each once), its
    ``// @defines GROUP`` lines replaced by the ``#define``s and its ``// @instances MACRO`` lines
    by the instantiations of ``configs.py``."""
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

    text = _DEFINES.sub(lambda m: "\n".join(configs.defines(m.group(1))), expand(cu_file))
    return _INSTANCES.sub(lambda m: "\n".join(configs.instances(m.group(1))), text)


def file_arch(cu_file: str, device_arch: str) -> str:
    """The architecture ``cu_file`` is built for on a ``device_arch`` (``sm_XY``) device: the
    device's, or the arch-specific target a ``// @arch sm_XYa`` line names (e.g. wgmma needs
    sm_90a), which runs only on sm_XY: elsewhere RuntimeError (the file's kernels are absent)."""
    m = _ARCH.search((KERNEL_DIR / cu_file).read_text())
    if m is None:
        return device_arch
    if m.group(1)[:-1] != device_arch:
        raise RuntimeError(f"{cu_file} is built for {m.group(1)} only, this device is {device_arch}")
    return m.group(1)


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


def cache_dir() -> Path:
    """Where compiled cubins are kept."""
    return Path(os.environ.get("METRALE_CACHE_DIR") or Path.home() / ".cache" / "metrale" / "kernels")


def compile_cubin(cu_file: str, arch: str) -> Path:
    """NVRTC-compile ``cu_file`` (headers inlined) for ``arch`` (e.g. ``sm_90``) with exactly
    COMPILE_OPTIONS; return the path of the cubin (cached on disk, or a temporary file that
    lives as long as the process). Raise RuntimeError carrying the compiler log on failure."""
    return compile_text(cu_file, source(cu_file), arch)


def compile_text(cu_file: str, src: str, arch: str) -> Path:
    """``compile_cubin`` for the CUDA source ``src`` named ``cu_file`` (probes and tests that
    need the kernels' options: no flush to zero, no contraction)."""
    from cupy_backends.cuda.libs import nvrtc

    opts = (*COMPILE_OPTIONS, f"--gpu-architecture={arch}")
    key = hashlib.sha256(repr((src, opts, nvrtc.getVersion())).encode()).hexdigest()[:32]
    path = cache_dir() / f"{cu_file}.{arch}.{key}.cubin"
    if path.is_file():
        return path
    prog = nvrtc.createProgram(src, cu_file, (), ())
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except Exception as exc:
            raise RuntimeError(f"NVRTC failed on {cu_file}: {exc}\n{nvrtc.getProgramLog(prog)}") from exc
        get_cubin = getattr(nvrtc, "getCUBIN", None)
        # PTX keeps the compile's choices (no .ftz on any instruction); the driver assembles it.
        cubin = bytes(get_cubin(prog) if get_cubin is not None else nvrtc.getPTX(prog))
    finally:
        nvrtc.destroyProgram(prog)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent)
    except OSError:  # no writable cache: a temporary file for this process
        fd, tmp = tempfile.mkstemp(suffix=".cubin")
        path = Path(tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(cubin)
    if Path(tmp) != path:
        os.replace(tmp, path)
    return path


def get_module(cu_file: str) -> Any | None:
    """The loaded ``cupy.RawModule`` of ``cu_file`` for the current device, or None."""
    dev = device_id()
    key = (cu_file, dev)
    if key in _modules:
        return _modules[key]
    mod = None
    try:
        import cupy

        props = device_props(dev)
        arch = file_arch(cu_file, f"sm_{props['major']}{props['minor']}")
        mod = cupy.RawModule(path=str(compile_cubin(cu_file, arch)))
    except Exception as exc:  # compile or load failure: the kernels are absent on this device
        build_errors[key] = f"{type(exc).__name__}: {exc}"
        mod = None
    _modules[key] = mod
    return mod


_kernels: dict[tuple[str, str, int], Any] = {}


def get_kernel(cu_file: str, name: str) -> Any | None:
    """The ``cupy.RawKernel`` ``name`` of ``cu_file`` on the current device, or None when the
    module did not build or lacks the function (reason in ``build_errors``). The same object
    is returned on every call (attributes set on it persist)."""
    key = (cu_file, name, device_id())
    if key in _kernels:
        return _kernels[key]
    mod = get_module(cu_file)
    k = None
    if mod is not None:
        try:
            k = mod.get_function(name)
        except Exception as exc:
            build_errors[(f"{cu_file}:{name}", key[2])] = f"{type(exc).__name__}: {exc}"
    _kernels[key] = k
    return k


#: Dynamic shared memory opted in per kernel (keyed by the kernel object, which get_kernel keeps).
_smem_set: dict[int, tuple[Any, int]] = {}


def set_dynamic_smem(kernel: Any, nbytes: int) -> None:
    """Allow ``kernel`` up to ``nbytes`` of dynamic shared memory (raises the opt-in cap once)."""
    held = _smem_set.get(id(kernel))
    cur = held[1] if held is not None and held[0] is kernel else 48 * 1024
    if nbytes > cur:
        kernel.max_dynamic_shared_size_bytes = int(nbytes)
        _smem_set[id(kernel)] = (kernel, int(nbytes))
