"""The rank side of tests/test_distributed.py: one gloo process group per TP size, every case
run by the rank layers and (on rank 0) by the single-device layer; mismatches written to a file.

Importable by ``torch.multiprocessing.spawn`` (a plain module, no test functions).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from metrale.reference.elements import BF16

#: hidden 64, intermediate 320 = 20 blocks (not a power of two; Q2_0's 64-groups straddle ranks
#: at TP = 8, whose ranks own 3 blocks each).
HIDDEN, INTER = 64, 320
#: The row counts: 1 … 64 as in the vectors, plus a prefill size beyond the decode arms.
MS = (1, 2, 3, 4, 5, 8, 17, 32, 33, 64, 80)


def cases() -> list[tuple[str, str, str, int]]:
    """(kind, METRALE_WEIGHT_QUANT, entry, m) for every entry point that serves the case."""
    from tests.layer_cases import A4_KINDS, LAYER_KINDS, WEIGHT_QUANT_MODES, entry_ms

    out = []
    for kind in LAYER_KINDS:
        for mode in WEIGHT_QUANT_MODES if kind in A4_KINDS else ("w4a4",):
            for entry, ms in entry_ms(kind, mode).items():
                ms = (*ms, 80) if entry in ("forward_prefill", "forward_km_q2") else ms
                out += [(kind, mode, entry, m) for m in ms if m in MS]
    return out


def f32_roots(rank: int, size: int, parts_by_kind: dict[str, Any]) -> list[str]:
    """The finished f32 tree before ``to_bf16`` (most last-bit differences of a wrong order
    vanish in bf16): the rank's split against the whole projection, bit for bit, for every
    down weight, in A16 and (NVFP4 declaring input_scale) A4, with NaN/Inf rows."""
    from metrale.distributed import TpBackend, block_ranges, k_slice
    from metrale.reference.activations import quantize_a4, quantize_a16
    from metrale.reference.kernels import ReferenceBackend
    from metrale.reference.projection import _tree_projection
    from tests.layer_cases import x_pool

    tb = TpBackend(ReferenceBackend())
    h = x_pool(13, 40, INTER)
    b0, b1 = block_ranges(INTER // 16, size)[rank]
    bad = []
    for kind, parts in parts_by_kind.items():
        for ws in (parts.weights, parts.bf16_weights, parts.fp8_weights, parts.q2_weights):
            if ws is None:
                continue
            w = ws.down_proj
            shard = k_slice(w, b0, b1)
            quants = [quantize_a16]
            if getattr(w, "input_scale", None) is not None:
                quants.append(lambda x, s=w.input_scale: quantize_a4(x, s))
            for q in quants:
                got = tb._tree(q(tb._cover(h[:, 16 * b0 : 16 * b1], shard)), shard)
                if rank == 0:
                    want = _tree_projection(q(h), w)
                    if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                        bad.append(f"TP={size} {kind} {w.name} {q.__name__}: f32 roots differ")
    return bad


def run(rank: int, size: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    from metrale.distributed import tp_layer
    from metrale.reference.kernels import ReferenceBackend
    from metrale.reference.tiers import weight_quantization
    from tests.layer_cases import make_parts, run_guarded, x_pool

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    bad: list[str] = []
    pool = x_pool(7, 96, HIDDEN)
    done = 0
    try:
        parts_by_kind: dict[str, Any] = {}
        for kind, mode, entry, m in cases():
            os.environ["METRALE_WEIGHT_QUANT"] = mode
            weight_quantization.cache_clear()
            parts = parts_by_kind.setdefault(kind, make_parts(kind, HIDDEN, INTER, seed=11))
            x = pool[:m] if m <= 48 else np.concatenate([pool[:48], pool[48 : 48 + m - 48]])
            tp = tp_layer(
                parts.config,
                rank,
                size,
                weights=parts.weights,
                bf16_weights=parts.bf16_weights,
                fp8_weights=parts.fp8_weights,
                q2_weights=parts.q2_weights,
                w8a8=parts.w8a8,
                lora=parts.lora,
                activation=parts.activation,
            )
            got = run_guarded(tp, entry, x)
            if rank == 0:
                one = parts.layer(ReferenceBackend())
                want = run_guarded(one, entry, x)
                where = f"TP={size} {kind} {mode} {entry} m={m}"
                if not np.array_equal(got, want):
                    r, c = np.argwhere(got != want)[0]
                    bad.append(f"{where}: y[{r},{c}] bits {got[r, c]:04x} != {want[r, c]:04x}")
                if tp.backend.launches != one.backend.launches:
                    bad.append(f"{where}: launches {tp.backend.launches} != {one.backend.launches}")
            done += 1
        bad += f32_roots(rank, size, parts_by_kind)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out_dir, f"tp{size}.json").write_text(json.dumps({"cases": done, "bad": bad}))


def run_load(rank: int, size: int, port: int, out_dir: str, paths: list[str]) -> None:
    """Each rank loads its slices of every checkpoint in ``paths``; rank 0 compares the bits of
    rows 1, 2, 3, 5, 70 with the whole layer loaded without tensor parallelism."""
    import torch.distributed as dist

    from metrale.checkpoint.load import load_ffn_layer
    from metrale.distributed import block_ranges

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    bad: list[str] = []
    try:
        for p in paths:
            tp = load_ffn_layer(p, layer=1, backend="reference", tp_rank=rank, tp_size=size)
            whole = load_ffn_layer(p, layer=1, backend="reference") if rank == 0 else None
            b0, b1 = block_ranges(whole.config.intermediate_size // 16 if whole else tp_inter(p), size)[rank]
            if tp.config.intermediate_size != 16 * (b1 - b0):
                bad.append(f"{p}: rank {rank} holds {tp.config.intermediate_size} columns")
            for m in (1, 2, 3, 5, 70):
                x = np.random.default_rng(m).standard_normal((m, tp.config.hidden_size)).astype(BF16)
                got = tp(x).view(np.uint16)
                if whole is not None and not np.array_equal(got, whole(x).view(np.uint16)):
                    bad.append(f"{p} m={m}: TP={size} bits differ")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out_dir, f"load{size}.json").write_text(json.dumps({"bad": bad}))


def tp_inter(path: str) -> int:
    return int(json.loads(Path(path, "config.json").read_text())["intermediate_size"]) // 16
