"""CuPy on torch's current CUDA stream, for ``MetraleFfn`` and the distributed backend: the
launches join torch's stream (no stream of their own, nothing synchronised), so torch's ordering
and CUDA-graph capture cover them."""

from __future__ import annotations

from typing import Any


def cupy_stream(stream: Any, device: int) -> Any:
    """A ``cupy.cuda.Stream`` that is torch's ``stream`` on ``device``: through the CUDA stream
    protocol (``Stream.from_external``, CuPy 14 on; torch's streams implement
    ``__cuda_stream__``) where both have it, else ``ExternalStream`` (deprecated by CuPy 14)."""
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None and hasattr(stream, "__cuda_stream__"):
        return from_external(stream)
    return cupy.cuda.ExternalStream(stream.cuda_stream, device)
