"""``TpBackend``: a rank's backend. Every kernel runs as on one device except those that read a
split down weight (arithmetic.md § tp). The launch log is the single-device one.

* ``"k"`` split (``KShard`` / ``LoraKShard``, reference backend): the ranks exchange subtree
  roots with one ``all_gather_into_tensor`` and finish the same tree; W8A8 all-reduces the row
  amax (max) and the int64 dot (sum).
* ``"n"`` split (``NShard`` / ``LoraNShard``, any backend, the CUDA one's): the ranks
  all-gather their h columns (W8A8: gate and up), run the single-device kernel over the full K
  for their output rows and all-gather y. W4A4 codes of the down input are computed from the
  gathered h, so every rank holds the single-device codes.

On a CUDA backend, kernels and collectives run on torch's current stream (CuPy launches on a
CuPy stream that is it, as ``MetraleFfn`` does) and arrays cross between CuPy and torch
through DLPack without copies; with a gloo group the device arrays are staged through the host
(two ranks sharing one GPU, which NCCL refuses).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metrale.distributed.agree import WHERE, agree_rows, all_gather_into
from metrale.distributed.shard import (
    BLOCK,
    SPLITS,
    KShard,
    LoraKShard,
    LoraNShard,
    NShard,
    block_ranges,
    default_split,
    row_ranges,
)
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
_SHARDS = (KShard, LoraKShard, NShard, LoraNShard)


def _a16_rows(kernel: str, args: tuple[Any, ...]) -> int:
    """The rows an A16 down kernel writes, from its name and arguments (x, w, out[, m])."""
    if kernel in _FIXED_ROWS:
        return _FIXED_ROWS[kernel]
    if kernel in _TIER_ROWS:
        cap = _TIER_ROWS[kernel]
        return int(args[3]) if cap is None else min(int(args[3]), cap)
    if kernel in _GEMM:
        return int(args[0].shape[0])
    raise MetraleError(f"tensor parallel: kernel {kernel} has no split form")


@dataclass
class _LazyA4:
    """``w4a4_quantize``'s result under the ``"n"`` split: the input and scale it was given; the
    codes are computed when a kernel other than a split down projection reads them (the down
    projection quantizes the gathered h instead)."""

    x: Any
    input_scale: Any
    quantize: Any
    _codes: Any = field(default=None, repr=False)

    def codes(self) -> Any:
        if self._codes is None:
            self._codes = self.quantize(self.x, self.input_scale)
        return self._codes


#: Kernels the tensor-parallel backend leaves out: ``w8a8_gemv_dual_silu_quant``'s h needs whole
#: rows of gate and up, which the N split gathers in ``w8a8_silu_quant_gemv``, so the W8A8 arm
#: runs the seed engine's form (the same bits: arithmetic.md § w8a8-arm). A single-device layer
#: routes as a TP one on ``backend.without(TP_WITHOUT)``.
TP_WITHOUT = ("w8a8_gemv_dual_silu_quant",)


class TpBackend(Backend):
    """The backend of rank ``rank`` of a ``torch.distributed`` group around ``inner``.

    ``split`` = ``"k"`` (reference backend only) or ``"n"``; None: ``default_split(inner)``."""

    def __init__(self, inner: Backend, group: Any = None, split: str | None = None) -> None:
        import torch.distributed as dist

        split = default_split(inner) if split is None else split
        if split not in SPLITS:
            raise MetraleError(f"tensor parallel: split={split!r}, want one of {', '.join(SPLITS)}")
        if split == "k" and not isinstance(inner, ReferenceBackend):
            raise MetraleError(
                f"tensor parallel: backend {inner.name!r} cannot split the down projection by K "
                "(split='k' needs subtree roots, which only the reference backend computes); use split='n'"
            )
        if not dist.is_initialized():
            raise MetraleError("tensor parallel: torch.distributed is not initialized (init_process_group)")
        super().__init__({k: inner._kernels[k] for k in inner.kernels if k not in TP_WITHOUT})
        self.inner = inner
        self.split = split
        self.name = f"tp-{inner.name}"
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.device: int | None = getattr(inner, "device", None) if inner.name == "cuda" else None
        #: Device arrays through the host: a CUDA backend in a gloo group.
        self.staged = self.device is not None and dist.get_backend(group) == "gloo"
        #: When a list: the bytes each rank sends to every all-gather, appended per call (what
        #: tools/tp_check.py replays to time the collectives alone).
        self.trace: list[int] | None = None

    # ---- memory helpers: the inner backend's ----
    def upload(self, weight: Any) -> Any:
        if isinstance(weight, (KShard, LoraKShard)):
            return weight
        if isinstance(weight, NShard):
            return dataclasses.replace(weight, weight=self.inner.upload(weight.weight))
        if isinstance(weight, LoraNShard):
            return dataclasses.replace(weight, adapter=self.inner.upload(weight.adapter))
        return self.inner.upload(weight)

    def empty_bf16(self, shape: tuple[int, ...]) -> Any:
        return self.inner.empty_bf16(shape)

    def rows(self, x: Any, k: int, name: str = "input") -> Any:
        """The inner backend's rows; on a host (gloo) group the ranks first agree on the row
        count (one int64 all-gather), so different inputs fail alike on every rank instead of
        in a collective of mismatched sizes. NCCL groups skip it (no host sync per call)."""
        got = self.inner.rows(x, k, name)
        if self.device is None or self.staged:
            agree_rows(self.group, int(got.shape[0]), WHERE)
        return got

    def to_numpy(self, a: Any) -> np.ndarray:
        return self.inner.to_numpy(a)

    # ---- launches ----
    def launch(self, kernel: str, *args: Any) -> Any:
        with self._stream():
            return self._launch(kernel, args)

    def _launch(self, kernel: str, args: tuple[Any, ...]) -> Any:
        shard = next((a for a in args if isinstance(a, _SHARDS)), None)
        if self.split == "n" and kernel == "w4a4_quantize" and self.has(kernel):
            self.launches.append(kernel)
            return _LazyA4(args[0], args[1], self._kernels[kernel])
        if shard is None:
            return super().launch(kernel, *(a.codes() if isinstance(a, _LazyA4) else a for a in args))
        if not self.has(kernel):
            return super().launch(kernel, *args)  # KernelMissing, as on one device
        self.launches.append(kernel)
        if isinstance(shard, (NShard, LoraNShard)):
            return self._n_split(kernel, shard, args)
        return self._k_split(kernel, shard, args)

    @contextlib.contextmanager
    def _stream(self) -> Iterator[None]:
        """CUDA: CuPy on torch's current stream of the backend's device; elsewhere nothing."""
        if self.device is None:
            yield
            return
        import cupy
        import torch

        from metrale.cuda.torch_stream import cupy_stream

        s = torch.cuda.current_stream(self.device)
        with cupy.cuda.Device(self.device), cupy_stream(s, self.device):
            yield

    # ---- the "n" split ----
    def _n_split(self, kernel: str, shard: NShard | LoraNShard, args: tuple[Any, ...]) -> Any:
        if isinstance(shard, LoraNShard):
            if kernel == "lora_shrink":
                return self._kernels[kernel](self._gather_h(args[0], shard.total_blocks), shard.adapter)
            if kernel == "lora_expand":
                t, _, out = args
                return self._kernels[kernel](t, shard.adapter, out)
            raise MetraleError(f"tensor parallel: kernel {kernel} takes no LoRA adapter")
        fn = self._kernels[kernel]
        if kernel == "w8a8_silu_quant_gemv":
            gate, up, _, out = args
            full = self._gather_h(self._xp.stack([gate, up]), shard.total_blocks)
            g, u = full[0], full[1]
            y = self.empty_bf16((g.shape[0], shard.weight.n))
            fn(g, u, shard.weight, y)
            c0, c1 = self._cols(shard)
            gate[...] = g[:, c0:c1]  # h, as the single-device kernel leaves it in gate
            self._gather_y(y, shard, out)
            return None
        if kernel == "w4a4_gemv_small_m":
            lazy, _, out = args
            if not isinstance(lazy, _LazyA4):
                raise MetraleError(
                    "tensor parallel: w4a4_gemv_small_m's codes did not come from this backend"
                )
            h = self._gather_h(lazy.x, shard.total_blocks)
            y = self.empty_bf16((h.shape[0], shard.weight.n))
            fn(lazy.quantize(h, lazy.input_scale), shard.weight, y)
            self._gather_y(y, shard, out[: h.shape[0]])
            return None
        r = _a16_rows(kernel, args)
        h = self._gather_h(args[0][:r], shard.total_blocks)
        y = self.empty_bf16((r, shard.weight.n))
        fn(h, shard.weight, y, *args[3:])
        self._gather_y(y, shard, args[2][:r])
        return None

    @property
    def _xp(self) -> Any:
        if self.device is None:
            return np
        import cupy

        return cupy

    def _cols(self, shard: NShard) -> tuple[int, int]:
        return BLOCK * shard.blocks[0], BLOCK * shard.blocks[1]

    def _gather_h(self, x: Any, total_blocks: int) -> Any:
        """[..., r, I]: the rank's h columns [..., r, 16·(b1 − b0)] gathered from every rank in
        K order (each rank's part padded to the largest block count for the collective)."""
        xp = self._xp
        ranges = [(BLOCK * a, BLOCK * b) for a, b in block_ranges(total_blocks, self.size)]
        a, b = ranges[self.rank]
        if b - a != x.shape[-1]:
            raise MetraleError(
                f"tensor parallel: rank {self.rank} holds {x.shape[-1]} h columns, its blocks {b - a}"
            )
        send = self._padded(x, max(b - a for a, b in ranges))
        got = self._all_gather(send)
        return xp.concatenate([got[q, ..., : b - a] for q, (a, b) in enumerate(ranges)], axis=-1)

    def _gather_y(self, y: Any, shard: NShard, dest: Any) -> None:
        """``dest`` [r, N] = the ranks' output rows (y columns [r, n1 − n0] each), gathered."""
        ranges = row_ranges(shard.n_total, self.size)
        if ranges[self.rank] != shard.rows:
            raise MetraleError(f"tensor parallel: {shard.name} rows {shard.rows} are not rank {self.rank}'s")
        got = self._all_gather(self._padded(y, max(b - a for a, b in ranges)))
        self._xp.concatenate([got[q, :, : b - a] for q, (a, b) in enumerate(ranges)], axis=1, out=dest)

    def _padded(self, x: Any, width: int) -> Any:
        """``x`` [..., w] as a C-contiguous [..., width] array, zero columns after w (``x``
        itself when it already is one)."""
        if x.shape[-1] == width and x.flags.c_contiguous:
            return x
        send = self._xp.zeros((*x.shape[:-1], width), dtype=x.dtype)
        send[..., : x.shape[-1]] = x
        return send

    # ---- the collectives ----
    def _all_gather(self, a: Any) -> Any:
        """all_gather_into_tensor of equal-shaped arrays (numpy or CuPy): [size, *a.shape], the
        bytes moved as uint8 (exact for every element type)."""
        import torch

        dev = self.device is not None and not self.staged
        if self.staged and torch.cuda.is_current_stream_capturing():
            raise MetraleError(
                "tensor parallel: a gloo group on a GPU stages its collectives through the host, "
                "which CUDA-graph capture cannot record (capture with an NCCL group)"
            )
        if dev:
            t = torch.from_dlpack(a.reshape(-1).view("uint8"))
        else:
            host = a.get() if self.device is not None else a
            t = torch.from_numpy(np.ascontiguousarray(host).reshape(-1).view(np.uint8))
        if self.trace is not None:
            self.trace.append(int(t.numel()))
        out = torch.empty(self.size * t.numel(), dtype=torch.uint8, device=t.device)
        all_gather_into(out, t, self.group)
        shape = (self.size, *a.shape)
        if self.device is None:
            return out.numpy().view(np.dtype(a.dtype)).reshape(shape)
        import cupy

        from metrale.cuda import pdl

        pdl.entry_start()  # the next kernel waits for the collective, not programmatically
        if dev:
            return cupy.from_dlpack(out).view(a.dtype).reshape(shape)
        return cupy.asarray(out.numpy().view(np.dtype(a.dtype)).reshape(shape))

    # ---- the "k" split (reference) ----
    def _k_split(self, kernel: str, shard: KShard | LoraKShard, args: tuple[Any, ...]) -> Any:
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
        r = _a16_rows(kernel, args)
        out[:r] = to_bf16(self._tree(quantize_a16(self._cover(x[:r], shard)), shard))
        return None

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
        got = self._all_gather(pad)
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
        """h = act_mul(gate, up, silu) on the owned columns (left in ``gate``); the row amax and
        finiteness by an all-reduce max; the exact int64 dot over K by an all-reduce sum; then
        the W8A8 output (arithmetic.md § projection)."""
        import torch
        import torch.distributed as dist

        h = act_mul(gate, up, "silu")
        gate[...] = h
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
