"""Backends: registries of named kernels with a launch log, and the one plug-in point for
choosing a backend by name.

A backend maps kernel names (``KERNEL_NAMES``) to callables with the reference signatures.
A kernel can be absent ("missing in this target build"); ``launch`` then raises KernelMissing.
Selection by name (``"auto" | "reference" | "cuda"``) lives above the reference, in
``metrale.backend``, which installs itself here with ``set_backend_resolver`` when ``metrale``
is imported; ``resolve_backend`` is what the reference calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from metrale.errors import KernelMissing, MetraleError

W4A16_TIERS = (4, 8, 16, 32)

#: Every kernel a full backend provides (arithmetic.md § layer, § routes).
KERNEL_NAMES: tuple[str, ...] = (
    "w4a16_gemv",
    "w4a16_gemv_batch2",
    "w4a16_gemv_batch3",
    "w4a16_gemv_dual_batch2",
    "w4a16_gemv_dual_batch3",
    *(f"w4a16_gemv_batch{t}" for t in W4A16_TIERS),
    "w4a16_gemm",
    "w4a16_gemm_dual",
    "w4a4_quantize",
    "w4a4_gemv_small_m",
    "w8a16_gemv",
    "w8a16_gemm",
    "dense_gemv",
    "dense_gemm",
    "q2_0_gemv_vec",
    "q2_0_gemv_vec_batchm",
    "q2_0_gemm",
    "q2_0_gemm_dual",
    "w8a8_quantize",
    "w8a8_gemv",
    "w8a8_gemv_dual",
    "w8a8_gemv_dual_silu_quant",
    "w8a8_silu_quant_gemv",
    "act_mul_silu",
    "act_mul_gelu",
    "lora_shrink",
    "lora_expand",
)


class Backend:
    """A registry of named kernels plus the memory helpers the layer needs.

    ``launches`` logs every kernel launched, in order, so tests can assert routing.
    """

    name: str = "backend"

    def __init__(self, kernels: Mapping[str, Callable[..., Any]]) -> None:
        unknown = set(kernels) - set(KERNEL_NAMES)
        if unknown:
            raise MetraleError(f"unknown kernel names {sorted(unknown)}")
        self._kernels = dict(kernels)
        self.launches: list[str] = []

    def __repr__(self) -> str:
        missing = [k for k in KERNEL_NAMES if k not in self._kernels]
        gap = f", without {', '.join(missing)}" if missing else ""
        return (
            f"<{type(self).__name__} {self.name!r}: {len(self._kernels)} of {len(KERNEL_NAMES)} kernels{gap}>"
        )

    def has(self, kernel: str) -> bool:
        """Whether ``kernel`` is present in this build."""
        return kernel in self._kernels

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(k for k in KERNEL_NAMES if k in self._kernels)

    def launch(self, kernel: str, *args: Any) -> Any:
        """Run ``kernel``; raise KernelMissing if it is absent from this build."""
        fn = self._kernels.get(kernel)
        if fn is None:
            raise KernelMissing(f"{kernel} kernel missing in this target build")
        self.launches.append(kernel)
        return fn(*args)

    def without(self, names: Iterable[str]) -> Backend:
        """A copy of this backend built without the named kernels."""
        names = set(names)
        unknown = names - set(KERNEL_NAMES)
        if unknown:
            raise MetraleError(f"unknown kernel names {sorted(unknown)}")
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._kernels = {k: v for k, v in self._kernels.items() if k not in names}
        clone.launches = []
        return clone

    # Memory helpers: overridden by device backends.
    def upload(self, weight: Any) -> Any:
        """The backend's form of a weight container (identity on the host)."""
        return weight

    def empty_bf16(self, shape: tuple[int, ...]) -> Any:
        """An uninitialised bf16 buffer."""
        raise NotImplementedError

    def rows(self, x: Any, k: int, name: str = "input") -> Any:
        """Validate activation rows [m, k] (bf16) and return them in the backend's form."""
        raise NotImplementedError

    def to_numpy(self, a: Any) -> np.ndarray:
        """A host numpy copy of a bf16 buffer (dtype bfloat16)."""
        raise NotImplementedError


_resolver: Callable[[str | None], Backend] | None = None


def set_backend_resolver(resolver: Callable[[str | None], Backend]) -> None:
    """Install the function that turns a backend name into a Backend (``metrale.backend``
    installs ``get_backend`` on import of ``metrale``)."""
    global _resolver
    _resolver = resolver


def resolve_backend(backend: Backend | str | None, what: str) -> Backend:
    """``backend`` itself, or the backend named by it (None: automatic choice).

    ``what`` names the public call for the error on a wrong type."""
    if isinstance(backend, Backend):
        return backend
    if backend is not None and not isinstance(backend, str):
        raise MetraleError(
            f"{what}: backend={type(backend).__name__} — want a Backend or one of 'auto', 'reference', 'cuda'"
        )
    if _resolver is None:  # only reachable if metrale/__init__ was bypassed
        raise MetraleError(f"{what}: no backend resolver installed (import metrale first)")
    return _resolver(backend)
