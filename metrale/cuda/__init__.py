"""The CUDA backend (raw kernels compiled at run time with CuPy). Stub until the CUDA issue."""

from __future__ import annotations

from metrale.backend import Backend


def cuda_unavailable_reason() -> str | None:
    """None when CuPy imports and a GPU is present, else what is missing."""
    try:
        import cupy
    except Exception as exc:  # pragma: no cover - depends on the machine
        return f"CuPy is not importable ({type(exc).__name__}: {exc}); install metrale[cuda]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # pragma: no cover
        return f"no CUDA device ({type(exc).__name__}: {exc})"
    if n == 0:  # pragma: no cover
        return "no CUDA device"
    return "the CUDA kernels are not built in this version"  # pragma: no cover


def cuda_backend() -> Backend:  # pragma: no cover - needs a GPU
    raise NotImplementedError("the CUDA backend is not built in this version")
