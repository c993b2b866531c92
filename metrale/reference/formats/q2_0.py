"""GGUF Q2_0 (ggml type 42, ``block_q2_0``) weights (arithmetic.md § q2_0-format).

Per 64 elements, 18 bytes: ``ggml_half d`` then ``uint8 qs[16]``; element j of a block is
``(qs[j/4] >> 2·(j%4)) & 3`` and stands for (q − 1)·d. Stored here as ``blocks`` uint8
[N, K/64, 18], each row of blocks exactly as a GGUF tensor's row is laid out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.reference.formats._checks import check_array, check_name, check_source, require, tensor

QK = 64
BLOCK_BYTES = 18
GGML_TYPE_Q2_0 = 42
F32 = np.float32


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``roundf``: nearest integer, ties away from zero."""
    return np.sign(x) * np.floor(np.abs(x.astype(np.float64)) + 0.5)


#: Elements of the source weight quantized per step (a row chunk that stays in cache).
_CHUNK_ELEMENTS = 1 << 18


def _levels(w32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes q uint8 [n, K] (level + 1) and block amax f32 [n, K/QK] of f32 rows [n, K]
    (``Q2_0Weight.quantize``)."""
    n, k = w32.shape
    blocks = w32.reshape(n, k // QK, QK)
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.where(amax != 0, F32(1.0) / np.where(amax != 0, amax, 1), 0).astype(F32)
    # 1/amax overflows (amax <= 2^-128): ggml's x86-64 bytes, every code 0
    # (docs/arithmetic.md, "Q2_0 blocks whose 1/amax overflows").
    overflow = np.isinf(inv)
    inv = np.where(overflow, F32(0.0), inv)
    level = np.clip(_round_half_away((blocks * inv[..., None]).astype(F32)), -1, 2)
    level = np.where(overflow[..., None], -1, level)
    return (level + 1).astype(np.uint8).reshape(n, k), amax


@dataclass(frozen=True)
class Q2_0Weight:
    """A Q2_0 weight [N, K], K a multiple of 64."""

    blocks: np.ndarray
    name: str = "weight"

    format = "q2_0"

    def __post_init__(self) -> None:
        self.validate()

    @property
    def n(self) -> int:
        return int(self.blocks.shape[0])

    @property
    def k(self) -> int:
        return int(self.blocks.shape[1]) * QK

    @property
    def nbytes(self) -> int:
        return int(self.blocks.nbytes)

    def validate(self) -> None:
        check_name("Q2_0Weight", self.name)
        nm = self.name
        require(
            isinstance(self.blocks, np.ndarray) and self.blocks.ndim == 3,
            f"{nm}: expected uint8 blocks [N, K/{QK}, {BLOCK_BYTES}]",
        )
        n, nb, _ = self.blocks.shape
        require(nb > 0, f"{nm}: K must be a positive multiple of {QK}")
        check_array(nm, self.blocks, np.dtype(np.uint8), (n, nb, BLOCK_BYTES))
        require(bool(np.isfinite(self.d().astype(F32)).all()), f"{nm}: non-finite block scale d")

    def d(self) -> np.ndarray:
        """f16 [N, K/64] block scales."""
        return np.ascontiguousarray(self.blocks[..., :2]).view(np.float16)[..., 0]

    def q(self) -> np.ndarray:
        """uint8 [N, K] 2-bit codes q ∈ {0, 1, 2, 3}."""
        qs = self.blocks[..., 2:]
        out = np.empty((*qs.shape[:-1], QK), dtype=np.uint8)
        for s in range(4):
            out[..., s::4] = (qs >> (2 * s)) & 3
        return out.reshape(self.n, self.k)

    def codes(self) -> np.ndarray:
        """int8 [N, K] weight codes q − 1 ∈ {−1, 0, 1, 2}."""
        return self.q().astype(np.int8) - 1

    def dequantize(self) -> np.ndarray:
        """f32 [N, K]: f32(q − 1) · f32(d)."""
        d = np.repeat(self.d().astype(F32), QK, axis=1)
        return self.codes().astype(F32) * d

    @classmethod
    def from_gguf_rows(cls, rows: np.ndarray, *, name: str = "weight") -> Q2_0Weight:
        """From GGUF rows of flat bytes: uint8 [N, (K/64)·18], each row the tensor's row as
        ggml lays it out (also a flat [N·(K/64)·18] buffer reshaped by the caller)."""
        r = np.asarray(rows)
        require(
            r.ndim == 2 and r.dtype == np.uint8 and r.shape[1] % BLOCK_BYTES == 0 and r.shape[1] > 0,
            f"{name}: GGUF Q2_0 rows shape {list(r.shape)} dtype {r.dtype}, "
            f"want uint8 [N, (K/{QK})·{BLOCK_BYTES}]",
        )
        n, nbytes = r.shape
        return cls(blocks=np.ascontiguousarray(r.reshape(n, nbytes // BLOCK_BYTES, BLOCK_BYTES)), name=name)

    @classmethod
    def from_tensors(cls, t: dict[str, np.ndarray], *, name: str = "weight") -> Q2_0Weight:
        """From a module's ``weight`` tensor of GGUF rows (``from_gguf_rows``)."""
        return cls.from_gguf_rows(tensor(t, "weight", name), name=name)

    def tensors(self) -> dict[str, np.ndarray]:
        """The on-disk tensor: ``weight`` uint8 [N, (K/64)·18], GGUF rows."""
        return {"weight": self.blocks.reshape(self.n, -1)}

    @classmethod
    def from_parts(cls, q: np.ndarray, d: np.ndarray, *, name: str = "weight") -> Q2_0Weight:
        """Pack codes q uint8 [N, K] ∈ 0..3 and f16 scales d [N, K/64]."""
        q = np.asarray(q, dtype=np.uint8)
        n, k = q.shape
        require(k % QK == 0, f"{name}: K={k} is not a multiple of {QK}")
        qb = q.reshape(n, k // QK, QK)
        qs = qb[..., 0::4] | (qb[..., 1::4] << 2) | (qb[..., 2::4] << 4) | (qb[..., 3::4] << 6)
        dd = np.ascontiguousarray(np.asarray(d, dtype=np.float16)).reshape(n, k // QK, 1)
        blocks = np.concatenate([dd.view(np.uint8), qs.astype(np.uint8)], axis=-1)
        return cls(blocks=np.ascontiguousarray(blocks), name=name)

    @classmethod
    def quantize(cls, w: np.ndarray, *, name: str = "weight") -> Q2_0Weight:
        """ggml's ``quantize_row_q2_0_ref``: d = amax, id = 1/d (0 if d = 0),
        q = clamp(roundf(x·id), −1, 2) + 1 with C ``roundf`` (ties away from zero), d stored f16."""
        w32 = check_source(name, w, QK)
        n, k = w32.shape
        q = np.empty((n, k), dtype=np.uint8)
        amax = np.empty((n, k // QK), dtype=F32)
        step = max(1, _CHUNK_ELEMENTS // k)  # rows are independent: a cache-sized chunk at a time
        for r in range(0, n, step):
            q[r : r + step], amax[r : r + step] = _levels(w32[r : r + step])
        with np.errstate(over="ignore"):
            d16 = amax.astype(np.float16)
        require(
            bool(np.isfinite(d16).all()),
            f"{name}: block amax {float(amax.max())} overflows Q2_0's f16 scale",
        )
        return cls.from_parts(q, d16, name=name)
