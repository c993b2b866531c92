"""The CUDA backend: raw kernels (``kernels/*.cu``) compiled at run time with CuPy, with the
reference's kernel signatures, bit-identical to it (arithmetic.md § rule).

``cuda_unavailable_reason()`` says why the backend cannot run here (None when CuPy imports
and a GPU is present); ``cuda_backend()`` is the per-process, per-device ``CudaBackend``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from metrale.cuda.backend import CudaBackend

_backends: dict[int, CudaBackend] = {}


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
    return None  # pragma: no cover


def cuda_backend() -> CudaBackend:  # pragma: no cover - needs a GPU
    """The CudaBackend of the current device (built once per process and device)."""
    import cupy

    from metrale.cuda.backend import CudaBackend

    dev = int(cupy.cuda.runtime.getDevice())
    be = _backends.get(dev)
    if be is None:
        be = _backends[dev] = CudaBackend(dev)
    return be
