"""A tensor-parallel rank's layer from a checkpoint (``metrale.load_ffn_layer(path, tp_rank=,
tp_size=)``).

The rank's blocks and down rows come from ``metrale.distributed.shard``; the checkpoint floor
reads only those slices (``metrale.checkpoint.load.read_ffn_weights``), and the rank's layer
is built here (``sliced_tp_layer``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from metrale.checkpoint.gguf_q2 import find_gguf
from metrale.checkpoint.load import Part, checkpoint_path, read_ffn_weights
from metrale.distributed.agree import WHERE, failing_together, process_group
from metrale.distributed.layer import sliced_tp_layer
from metrale.distributed.shard import BLOCK, SPLITS, KShard, NShard, block_ranges, default_split, row_ranges
from metrale.errors import MetraleError
from metrale.reference.backend import Backend, resolve_backend
from metrale.reference.context import FfnConfig
from metrale.reference.layer import DenseFfnLayer


def _int_option(name: str, v: Any) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
        raise MetraleError(f"{name}={v!r}: want an int, got {type(v).__name__}")


def load_tp_layer(
    path: str | os.PathLike[str],
    layer: int = 0,
    backend: Backend | str | None = "auto",
    *,
    tp_rank: int | None = None,
    tp_size: int | None = None,
    tp_split: str | None = None,
    tp_group: Any = None,
) -> DenseFfnLayer:
    """Rank ``tp_rank`` of ``tp_size``'s tensor-parallel layer of decoder layer ``layer`` of a
    safetensors folder (torch.distributed initialized), reading only its slices: gate/up rows
    of its 16-element blocks, and down K columns of the same blocks (``tp_split="k"``) or down
    rows (``"n"``); None: the backend's split (the reference splits by K, CUDA by rows;
    arithmetic.md § tp); ``tp_group``: the process group whose rank ``tp_rank`` of ``tp_size``
    this is (None: the default group)."""
    with failing_together(process_group(tp_group), WHERE):
        _int_option("tp_rank", tp_rank)
        _int_option("tp_size", tp_size)
        if tp_rank is None and tp_size is None and tp_split is not None:
            raise MetraleError(f"tp_split={tp_split!r} without tp_rank / tp_size")
        if tp_rank is None and tp_size is None and tp_group is not None:
            raise MetraleError("tp_group without tp_rank / tp_size")
        if tp_rank is None or tp_size is None or not 0 <= tp_rank < tp_size:
            raise MetraleError(f"tp_rank={tp_rank}, tp_size={tp_size}: want both, 0 <= tp_rank < tp_size")
        p = checkpoint_path(path, layer)
        g = find_gguf(p)
        if g is not None:
            raise MetraleError(f"{g}: tensor-parallel loading reads safetensors folders, not GGUF")
        rank, size, split, group = int(tp_rank), int(tp_size), tp_split, tp_group
        backend = resolve_backend(backend, "load_ffn_layer")
        split = default_split(backend) if split is None else split
        if split not in SPLITS:
            raise MetraleError(f"tp_split={split!r}: want one of {', '.join(SPLITS)}")
        blocks: list[tuple[int, int]] = []
        rows: list[tuple[int, int] | None] = []

        def part(conf: FfnConfig) -> Part:
            b0, b1 = block_ranges(conf.intermediate_size // BLOCK, size)[rank]
            blocks.append((b0, b1))
            rows.append(row_ranges(conf.hidden_size, size)[rank] if split == "n" else None)
            return (BLOCK * b0, BLOCK * b1), rows[0]

        config, act, (gate, up, down) = read_ffn_weights(p, layer, part)
        total = config.intermediate_size // BLOCK
        shard: Any = (
            KShard(down, blocks[0], blocks[0][0], total)
            if rows[0] is None
            else NShard(down, rows[0], config.hidden_size, blocks[0], total)
        )
    return sliced_tp_layer(
        config, rank, size, [gate, up, shard], activation=act, backend=backend, group=group, where=str(p)
    )
