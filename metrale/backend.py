"""Choosing a backend by name: ``get_backend("auto" | "reference" | "cuda")`` or
``METRALE_BACKEND``. The Backend class and the kernel catalogue are in
``metrale.reference.backend``; this module plugs the choice into it (``set_backend_resolver``).
"""

from __future__ import annotations

import os

from metrale.errors import BackendUnavailable, MetraleError
from metrale.reference.backend import Backend, set_backend_resolver

BACKEND_CHOICES = ("auto", "reference", "cuda")


def get_backend(name: str | None = None) -> Backend:
    """Select a backend: an explicit ``name`` (reference, cuda) wins; ``auto`` or None reads
    ``METRALE_BACKEND`` (default ``auto``).

    ``auto`` takes CUDA where CuPy imports and a GPU is present, else the reference.
    ``cuda`` where it cannot run raises BackendUnavailable naming what is missing.
    """
    choice = (name or "auto").strip().lower()
    given = f"backend={choice!r}"
    if choice == "auto":  # METRALE_BACKEND overrides the automatic choice, not an explicit one
        env = os.environ.get("METRALE_BACKEND") or ""
        if env.strip():
            choice, given = env.strip().lower(), f"METRALE_BACKEND={env!r}"
        else:
            choice = "auto"
    if choice not in BACKEND_CHOICES:
        raise MetraleError(f"{given}: unknown backend, want one of {', '.join(BACKEND_CHOICES)}")
    if choice == "reference":
        from metrale.reference.kernels import ReferenceBackend

        return ReferenceBackend()
    from metrale.cuda import cuda_backend, cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is None:
        return cuda_backend()
    if choice == "cuda":
        raise BackendUnavailable(f"{given}: the CUDA backend cannot run here: {reason}")
    from metrale.reference.kernels import ReferenceBackend

    return ReferenceBackend()


set_backend_resolver(get_backend)
