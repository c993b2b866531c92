"""``TpBackend``: a rank's backend. Every kernel runs as on one device except those that read a
K-sharded down weight (``KShard`` / ``LoraKShard``): their ranks exchange subtree roots with one
``all_gather_into_tensor`` and finish the same tree (arithmetic.md § tp), or, for W8A8,
all-reduce the row amax (max) and the int64 dot (sum). The launch log is the single-device one.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from metrale.distributed.shard import BLOCK, KShard, LoraKShard, block_ranges
from metrale.errors import MetraleError
from metrale.reference.activations import A4Codes, A16Codes, a8_row_amax, quantize_a8_rows, quantize_a16
from metrale.reference.backend import W4A16_TIERS, Backend
from metrale.reference.elements import BF16, to_bf16
from metrale.reference.formats import DenseWeight
from metrale.reference.kernels import ReferenceBackend
from metrale.reference.lora import lora_expand
from metrale.reference.projection import finish_roots, project_roots, w8a8_dot, w8a8_output
from metrale.reference.tables import act_mul
from metrale.reference.tree import subtree_spans

#: Rows each A16 down kernel writes: fixed counts, or (m argument, capped by the tier).
_FIXED_ROWS = {
    "w4a16_gemv": 1,
    "w8a16_gemv": 1,
    "dense_gemv": 1,
    "q2_0_gemv_vec": 1,
    "w4a16_gemv_batch2": 2,
    "w4a16_gemv_batch3": 3,
}
_TIER_ROWS = {f"w4a16_gemv_batch{t}": t for t in W4A16_TIERS} | {"q2_0_gemv_vec_batchm": None}
_GEMM = ("w4a16_gemm", "w8a16_gemm", "dense_gemm", "q2_0_gemm")


class TpBackend(Backend):
    """The reference backend of rank ``rank`` of a ``torch.distributed`` group (gloo on CPUs).

    CUDA has no kernel that returns subtree roots; a CUDA backend is refused."""

    def __init__(self, inner: Backend, group: Any = None) -> None:
        import torch.distributed as dist

        if not isinstance(inner, ReferenceBackend):
            raise MetraleError(
                f"tensor parallel: backend {inner.name!r} is not supported (the K-split down "
                "projection needs subtree roots, which only the reference backend computes)"
            )
        if not dist.is_initialized():
            raise MetraleError("tensor parallel: torch.distributed is not initialized (init_process_group)")
        super().__init__({k: inner._kernels[k] for k in inner.kernels})
        self.inner = inner
        self.name = f"tp-{inner.name}"
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    # ---- memory helpers: the inner backend's ----
    def upload(self, weight: Any) -> Any:
        return weight if isinstance(weight, (KShard, LoraKShard)) else self.inner.upload(weight)

    def empty_bf16(self, shape: tuple[int, ...]) -> Any:
        return self.inner.empty_bf16(shape)

    def rows(self, x: Any, k: int, name: str = "input") -> Any:
        return self.inner.rows(x, k, name)

    def to_numpy(self, a: Any) -> np.ndarray:
        return self.inner.to_numpy(a)

    # ---- launches ----
    def launch(self, kernel: str, *args: Any) -> Any:
        shard = next((a for a in args if isinstance(a, (KShard, LoraKShard))), None)
        if shard is None:
            return super().launch(kernel, *args)
        if not self.has(kernel):
            return super().launch(kernel, *args)  # KernelMissing, as on one device
        self.launches.append(kernel)
        if isinstance(shard, LoraKShard):
            return self._lora(kernel, shard, args)
        if kernel == "w8a8_silu_quant_gemv":
            gate, up, _, out = args
            out[...] = self._w8a8_down(gate, up, shard)
            return None
        if kernel == "w4a4_gemv_small_m":
            codes, _, out = args
            out[...] = to_bf16(self._tree(codes, shard))
            return None
        x, out = args[0], args[2]
        if kernel in _FIXED_ROWS:
            r = _FIXED_ROWS[kernel]
        elif kernel in _TIER_ROWS:
            cap = _TIER_ROWS[kernel]
            r = args[3] if cap is None else min(args[3], cap)
        elif kernel in _GEMM:
            r = x.shape[0]
        else:
            raise MetraleError(f"tensor parallel: kernel {kernel} has no K-split form")
        out[:r] = to_bf16(self._tree(quantize_a16(self._cover(x[:r], shard)), shard))
        return None

    # ---- the exchanges ----
    def _gather(self, local: np.ndarray, rows: int) -> np.ndarray:
        """all_gather_into_tensor of equal-shaped f32/bf16-free arrays: [size, *local.shape]."""
        import torch
        import torch.distributed as dist

        t = torch.from_numpy(np.ascontiguousarray(local))
        out = torch.empty((self.size * rows, *t.shape[1:]), dtype=t.dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the name the task asks for
            dist.all_gather_into_tensor(out, t, group=self.group)
        return out.numpy().reshape(self.size, rows, *t.shape[1:])

    def _tree(self, a: A16Codes | A4Codes, shard: KShard) -> np.ndarray:
        """f32 [m, N]: this rank's subtree roots, gathered; the whole tree finished and row-scaled."""
        spans, roots = project_roots(a, shard.weight, shard.blocks, shard.first_block)
        all_spans = [subtree_spans(b0, b1) for b0, b1 in block_ranges(shard.total_blocks, self.size)]
        if all_spans[self.rank] != spans:
            raise MetraleError(
                f"tensor parallel: {shard.name} blocks {shard.blocks} are not rank {self.rank}'s"
            )
        smax = max(len(s) for s in all_spans)
        pad = np.zeros((smax, *roots.shape[1:]), dtype=np.float32)
        pad[: len(spans)] = roots
        got = self._gather(pad, smax)
        nodes = {sp: got[r, i] for r, ss in enumerate(all_spans) for i, sp in enumerate(ss)}
        return finish_roots(nodes, shard.total_blocks, shard.weight, a)

    def _cover(self, x: np.ndarray, shard: KShard) -> np.ndarray:
        """The rank's rows over the weight's K: zero columns around the owned blocks (Q2_0's
        whole 64-element groups; their block values are computed and not used)."""
        kw = shard.weight.k
        if kw == x.shape[1]:
            return x
        xp = np.zeros((x.shape[0], kw), dtype=BF16)
        o = BLOCK * (shard.blocks[0] - shard.first_block)
        xp[:, o : o + x.shape[1]] = x
        return xp

    def _w8a8_down(self, gate: np.ndarray, up: np.ndarray, shard: KShard) -> np.ndarray:
        """h = act_mul(gate, up, silu) on the owned columns; the row amax and finiteness by an
        all-reduce max; the exact int64 dot over K by an all-reduce sum; then the W8A8 output
        (arithmetic.md § projection)."""
        import torch
        import torch.distributed as dist

        h = act_mul(gate, up, "silu")
        amax, finite = a8_row_amax(h)
        red = torch.from_numpy(np.stack([amax, (~finite).astype(np.float32)], axis=1))
        dist.all_reduce(red, op=dist.ReduceOp.MAX, group=self.group)
        amax_g, finite_g = red[:, 0].numpy().astype(np.float32), red[:, 1].numpy() == 0
        codes = quantize_a8_rows(h, amax_g, finite_g)
        s = torch.from_numpy(w8a8_dot(codes, shard.weight))
        dist.all_reduce(s, op=dist.ReduceOp.SUM, group=self.group)
        return w8a8_output(s.numpy(), codes.scale, shard.weight)

    def _lora(self, kernel: str, shard: LoraKShard, args: tuple[Any, ...]) -> Any:
        ad = shard.adapter
        if kernel == "lora_shrink":
            x = args[0]
            a = DenseWeight(weight=ad.a, name="lora.a")
            w = KShard(a, shard.blocks, shard.blocks[0], shard.total_blocks)
            t = np.zeros((x.shape[0], ad.padded_rank), dtype=BF16)
            t[:, : ad.rank] = to_bf16(self._tree(quantize_a16(x), w))
            return t
        if kernel == "lora_expand":
            t, _, out = args
            out[...] = lora_expand(t, ad, out)
            return None
        raise MetraleError(f"tensor parallel: kernel {kernel} takes no LoRA adapter")
