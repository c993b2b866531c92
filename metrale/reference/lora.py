"""LoRA deltas (arithmetic.md § lora), by the BF16 × A16 rule of § projection.

shrink: t = to_bf16(x @ Aᵀ) with A bf16 [r, K]; expand: out = to_bf16(f32(out) + f32(scale)·p)
where p is the fp32 tree root of t_pad @ B_padᵀ (B bf16 [N, r]; r padded to a multiple of 16
with zero columns in t and B).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.errors import MetraleError
from metrale.reference.activations import check_rows, quantize_a16
from metrale.reference.elements import BF16, to_bf16
from metrale.reference.formats import DenseWeight
from metrale.reference.projection import project, project_root

F32 = np.float32


@dataclass(frozen=True)
class LoraAdapter:
    """One projection's adapter: ``a`` bf16 [r, K], ``b`` bf16 [N, r], ``scale`` f32."""

    a: np.ndarray
    b: np.ndarray
    scale: np.float32

    def __post_init__(self) -> None:
        for nm, t in (("lora.a", self.a), ("lora.b", self.b)):
            if not isinstance(t, np.ndarray) or t.dtype != BF16 or t.ndim != 2:
                raise MetraleError(f"{nm}: want a 2-D bf16 array, got {getattr(t, 'dtype', t)!r}")
        if self.a.shape[0] != self.b.shape[1]:
            raise MetraleError(f"lora: rank mismatch, a {tuple(self.a.shape)} vs b {tuple(self.b.shape)}")
        if self.a.shape[1] % 16:
            raise MetraleError(f"lora.a: K={self.a.shape[1]} is not a multiple of 16")

    @property
    def rank(self) -> int:
        return int(self.a.shape[0])

    @property
    def padded_rank(self) -> int:
        return -(-self.rank // 16) * 16

    def b_padded(self) -> np.ndarray:
        """B with its r columns zero-padded to a multiple of 16."""
        out = np.zeros((self.b.shape[0], self.padded_rank), dtype=BF16)
        out[:, : self.rank] = self.b
        return out


def lora_shrink(x: np.ndarray, lora: LoraAdapter) -> np.ndarray:
    """t = to_bf16(x @ Aᵀ): bf16 [m, r_pad], zero beyond r."""
    check_rows(x, lora.a.shape[1])
    t = np.zeros((x.shape[0], lora.padded_rank), dtype=BF16)
    t[:, : lora.rank] = project(x, DenseWeight(weight=lora.a, name="lora.a"))
    return t


def lora_expand(t: np.ndarray, lora: LoraAdapter, out: np.ndarray) -> np.ndarray:
    """to_bf16(f32(out) + f32(scale)·root(t @ B_padᵀ)) as a new bf16 [m, N] array."""
    check_rows(t, lora.padded_rank, name="lora t")
    p = project_root(quantize_a16(t), DenseWeight(weight=lora.b_padded(), name="lora.b"))
    return to_bf16(out.astype(F32) + F32(lora.scale) * p)
