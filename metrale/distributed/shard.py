"""Which blocks a tensor-parallel rank owns, and the rank's slices of each weight format.

gate/up are split by output columns in whole 16-element blocks: rank r of ``size`` owns blocks
[⌊r·B/size⌋, ⌊(r+1)·B/size⌋) of the B = intermediate/16 blocks (sizes differ by at most one
block). The down projection is split one of two ways (arithmetic.md § tp):

* ``"k"`` (``KShard``): by K along the same blocks. A contiguous block range is a union of
  aligned subtrees of the tree, so the ranks' subtree roots finish the single-device tree.
  Needs kernels that return subtree roots: the reference backend's.
* ``"n"`` (``NShard``): by output rows (hidden columns of y) in 16-row units over the full K;
  the ranks all-gather h first, so every output is the single-device kernel over the same
  inputs. Any backend (the CUDA backend's split).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from metrale.errors import MetraleError
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, W8a8Weight
from metrale.reference.formats.w8a8 import MAX_K as W8A8_MAX_K
from metrale.reference.lora import LoraAdapter

BLOCK = 16
#: Q2_0's f16 scale covers 64 elements = 4 blocks.
Q2_BLOCKS = 4


def block_ranges(nblocks: int, size: int) -> list[tuple[int, int]]:
    """[b0, b1) per rank: ``nblocks`` blocks over ``size`` ranks, balanced to within one block."""
    if size < 1 or nblocks < size:
        raise MetraleError(
            f"tensor parallel: tp_size={size} needs 1 <= tp_size <= {nblocks} (the intermediate "
            f"size {16 * nblocks} has {nblocks} blocks of 16)"
        )
    return [(r * nblocks // size, (r + 1) * nblocks // size) for r in range(size)]


class _Shard:
    """A rank's part of a weight: attributes it does not hold are the weight's; ``k`` is the
    owned K, 16 per owned block."""

    weight: Any
    blocks: tuple[int, int]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.weight, name)

    @property
    def k(self) -> int:
        return BLOCK * (self.blocks[1] - self.blocks[0])


@dataclass(frozen=True)
class KShard(_Shard):
    """A rank's down-projection weight: ``weight`` holds blocks ``first_block`` … of the full K
    (Q2_0: whole 64-element groups around the owned range), the rank owns ``blocks`` = [b0, b1)
    of ``total_blocks``. Other attributes (format, n, name, input_scale, …) are the weight's;
    ``k`` is the owned K, 16·(b1 − b0)."""

    weight: Any
    blocks: tuple[int, int]
    first_block: int
    total_blocks: int


#: The two ways of splitting the down projection.
SPLITS = ("k", "n")


def default_split(backend: Any) -> str:
    """The split a backend runs: ``"k"`` on the reference backend, ``"n"`` elsewhere (the CUDA
    kernels output bf16 y, not subtree roots)."""
    return "k" if getattr(backend, "name", None) == "reference" else "n"


def row_ranges(n: int, size: int) -> list[tuple[int, int]]:
    """[n0, n1) per rank: ``n`` output rows (a multiple of 16) over ``size`` ranks in 16-row
    units, balanced to within 16 rows."""
    if n % BLOCK:
        raise MetraleError(f"tensor parallel: hidden size {n} is not a multiple of {BLOCK}")
    if not 1 <= size <= n // BLOCK:
        raise MetraleError(
            f"tensor parallel: tp_size={size} needs 1 <= tp_size <= {n // BLOCK} under the 'n' split "
            f"(the hidden size {n} has {n // BLOCK} row units of {BLOCK}; split='k' takes more ranks)"
        )
    return [(BLOCK * a, BLOCK * b) for a, b in block_ranges(n // BLOCK, size)]


@dataclass(frozen=True)
class NShard(_Shard):
    """A rank's down-projection weight split by output rows: ``weight`` holds rows ``rows`` =
    [n0, n1) of the full down weight over the full K; the rank's h columns are blocks
    ``blocks`` of ``total_blocks``. Other attributes are the weight's; ``n`` is the full N
    (the layer's hidden size) and ``k`` the rank's K, 16·(b1 − b0), as a K shard has."""

    weight: Any
    rows: tuple[int, int]
    n_total: int
    blocks: tuple[int, int]
    total_blocks: int

    @property
    def n(self) -> int:
        return self.n_total


@dataclass(frozen=True)
class LoraNShard:
    """A rank's down-projection LoRA adapter under the ``"n"`` split: the whole adapter (the
    shrink runs over the gathered h of ``total_blocks`` blocks, the expand over the gathered y)."""

    adapter: Any
    total_blocks: int


@dataclass(frozen=True)
class LoraKShard:
    """A rank's down-projection LoRA adapter: ``adapter.a`` holds the owned K columns
    (blocks ``blocks`` of ``total_blocks``), ``adapter.b`` is whole."""

    adapter: LoraAdapter
    blocks: tuple[int, int]
    total_blocks: int


def rows_slice(w: Any, n0: int, n1: int) -> Any:
    """Output rows n0:n1 of a weight (gate/up columns of the FFN)."""
    name = f"{w.name}[{n0}:{n1}]"
    if isinstance(w, Nvfp4Weight):
        return replace(w, weight=w.weight[n0:n1], weight_scale=w.weight_scale[n0:n1], name=name)
    if isinstance(w, (Fp8Weight, W8a8Weight)):
        return replace(w, weight=w.weight[n0:n1], weight_scale=w.weight_scale[n0:n1], name=name)
    if isinstance(w, DenseWeight):
        return replace(w, weight=w.weight[n0:n1], name=name)
    if isinstance(w, Q2_0Weight):
        return replace(w, blocks=w.blocks[n0:n1], name=name)
    raise MetraleError(f"tensor parallel: cannot shard {type(w).__name__} {getattr(w, 'name', '?')}")


def k_slice(w: Any, b0: int, b1: int) -> KShard:
    """Blocks [b0, b1) of a down weight's K as a KShard (W8A8: refuses a full K > 131072,
    the int32 bound of the whole-row dot)."""
    total = w.k // BLOCK
    name = f"{w.name}[:, {BLOCK * b0}:{BLOCK * b1}]"
    if isinstance(w, Nvfp4Weight):
        s = replace(w, weight=w.weight[:, 8 * b0 : 8 * b1], weight_scale=w.weight_scale[:, b0:b1], name=name)
        return KShard(s, (b0, b1), b0, total)
    if isinstance(w, W8a8Weight) and w.k > W8A8_MAX_K:
        raise MetraleError(f"{w.name}: W8A8 K={w.k} exceeds {W8A8_MAX_K} (the int32 dot bound)")
    if isinstance(w, (Fp8Weight, W8a8Weight, DenseWeight)):
        return KShard(replace(w, weight=w.weight[:, BLOCK * b0 : BLOCK * b1], name=name), (b0, b1), b0, total)
    if isinstance(w, Q2_0Weight):
        g0, g1 = b0 // Q2_BLOCKS, -(-b1 // Q2_BLOCKS)
        return KShard(replace(w, blocks=w.blocks[:, g0:g1], name=name), (b0, b1), Q2_BLOCKS * g0, total)
    raise MetraleError(f"tensor parallel: cannot shard {type(w).__name__} {getattr(w, 'name', '?')}")


def n_slice(w: Any, rows: tuple[int, int], blocks: tuple[int, int]) -> NShard:
    """Output rows ``rows`` of a down weight (full K) as an NShard whose rank owns h blocks
    ``blocks``."""
    total = w.k // BLOCK
    return NShard(rows_slice(w, *rows), rows, w.n, blocks, total)


def lora_rows(a: LoraAdapter | None, n0: int, n1: int) -> LoraAdapter | None:
    """A gate/up adapter for output rows n0:n1 (``a`` whole, ``b`` rows sliced)."""
    return None if a is None else LoraAdapter(a=a.a, b=np.ascontiguousarray(a.b[n0:n1]), scale=a.scale)


def lora_k(a: LoraAdapter | None, b0: int, b1: int) -> LoraKShard | None:
    """A down adapter for K blocks [b0, b1) (``a`` columns sliced, ``b`` whole)."""
    if a is None:
        return None
    part = LoraAdapter(a=np.ascontiguousarray(a.a[:, BLOCK * b0 : BLOCK * b1]), b=a.b, scale=a.scale)
    return LoraKShard(part, (b0, b1), a.a.shape[1] // BLOCK)
