"""Kernel tiers and the weight-quantization tier (arithmetic.md § tier).

``W4a16BatchmTiers`` picks the ``w4a16_gemv_batch{M}`` kernel for m rows; ``WeightQuantTier``
(process-wide from ``METRALE_WEIGHT_QUANT``, or a layer's own) decides which rows run A4.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

from metrale.errors import MetraleError
from metrale.reference.backend import W4A16_TIERS, Backend

#: Rows the W4A4 small-m path serves.
W4A4_MAX_ROWS = 64
W4A4_KERNELS = ("w4a4_quantize", "w4a4_gemv_small_m")


@dataclass(frozen=True)
class W4a16BatchmTiers:
    """The CUDA-core W4A16 batch tiers (4, 8, 16, 32) of one backend build."""

    backend: Backend

    def w4a4_present(self) -> bool:
        return all(self.backend.has(k) for k in W4A4_KERNELS)

    def declares_a4(self, weight: object) -> bool:
        """The weight declares FP4 activations (NVFP4 with input_scale) and the W4A4 kernels
        are present in this build."""
        return (
            getattr(weight, "format", None) == "nvfp4"
            and bool(getattr(weight, "declares_a4", False))
            and self.w4a4_present()
        )

    def ffn_edge(self, weight: object) -> int:
        """Row edge of the dense FFN's narrow arms: 64 where the weight declares A4, else 32."""
        return W4A4_MAX_ROWS if self.declares_a4(weight) else W4A16_TIERS[-1]

    def kernel_for(self, m: int, weight: object) -> str | None:
        """The smallest tier ≥ m; for a weight declaring A4 the batch-32 kernel for 33..=64
        as well; None when no tier serves m or its kernel is missing from the build."""
        tier = next((t for t in W4A16_TIERS if m <= t), None)
        if m < 1:
            tier = None
        elif tier is None and m <= W4A4_MAX_ROWS and self.declares_a4(weight):
            tier = W4A16_TIERS[-1]
        if tier is None:
            return None
        name = f"w4a16_gemv_batch{tier}"
        return name if self.backend.has(name) else None


WEIGHT_QUANT_CHOICES = ("w4a4", "w4a4-batch", "w4a16", "w4a4-all")
#: The tier MetraleFfn (and so ``replace_mlps``) gives its layers: A4 at every row count.
ALL_ROWS_TIER = "w4a4-all"


@dataclass(frozen=True)
class WeightQuantTier:
    """Which rows of a layer declaring FP4 activations run A4.

    ``w4a4`` (default): every decode row (1..64); ``w4a4-batch``: verify batches (2..64) only,
    the single decode row runs A16; ``w4a16``: never A4; ``w4a4-all``: every row count,
    prefill included (the one tier besides ``w4a16`` whose rows do not depend on m).
    """

    mode: str = "w4a4"

    def __post_init__(self) -> None:
        if self.mode not in WEIGHT_QUANT_CHOICES:
            raise MetraleError(
                f"METRALE_WEIGHT_QUANT={self.mode!r} unknown: want one of {', '.join(WEIGHT_QUANT_CHOICES)}"
            )

    def ffn_small_batch_w4a4(self, declares_a4: bool) -> bool:
        """Whether 2..64-row steps of a layer run A4."""
        return declares_a4 and self.mode in ("w4a4", "w4a4-batch", "w4a4-all")

    def ffn_single_row_w4a4(self, declares_a4: bool) -> bool:
        """Whether the single decode row runs A4."""
        return declares_a4 and self.mode in ("w4a4", "w4a4-all")

    @property
    def all_rows(self) -> bool:
        """Whether A4 holds for every row count (``w4a4-all``: prefill too, no 64-row edge)."""
        return self.mode == ALL_ROWS_TIER

    def ffn_prefill_w4a4(self, declares_a4: bool) -> bool:
        """Whether ``forward_prefill`` runs the NVFP4 projections A4."""
        return declares_a4 and self.all_rows

    def admits(self, m: int, declares_a4: bool) -> bool:
        """Whether an m-row projection runs A4 (beyond W4A4_MAX_ROWS rows the seed tiers admit
        by their small-batch flag and the launcher refuses the rows; ``w4a4-all`` serves them)."""
        if m == 1:
            return self.ffn_single_row_w4a4(declares_a4)
        return self.ffn_small_batch_w4a4(declares_a4)


def layer_tier(mode: str | None) -> WeightQuantTier | None:
    """A layer's own tier from its ``weight_quant`` argument; None: the process-wide one."""
    if mode is None:
        return None
    if not isinstance(mode, str):
        raise MetraleError(f"weight_quant={mode!r}: want one of {', '.join(WEIGHT_QUANT_CHOICES)} or None")
    t = mode.strip().lower()
    if t not in WEIGHT_QUANT_CHOICES:
        raise MetraleError(f"weight_quant={mode!r} unknown: want one of {', '.join(WEIGHT_QUANT_CHOICES)}")
    return WeightQuantTier(t)


@cache
def weight_quantization() -> WeightQuantTier:
    """The process-wide tier, read once from ``METRALE_WEIGHT_QUANT`` (default ``w4a4``).
    ``weight_quantization.cache_clear()`` re-reads it."""
    return WeightQuantTier(os.environ.get("METRALE_WEIGHT_QUANT", "w4a4").strip().lower())


@contextmanager
def weight_quant_env(mode: str | None) -> Iterator[None]:
    """Run with ``METRALE_WEIGHT_QUANT=mode`` (None: unset), re-reading the cached tier on entry
    and on exit, and the caller's setting back afterwards."""

    def set_mode(value: str | None) -> None:
        if value is None:
            os.environ.pop("METRALE_WEIGHT_QUANT", None)
        else:
            os.environ["METRALE_WEIGHT_QUANT"] = value
        weight_quantization.cache_clear()

    old = os.environ.get("METRALE_WEIGHT_QUANT")
    try:
        set_mode(mode)
        yield
    finally:
        set_mode(old)
