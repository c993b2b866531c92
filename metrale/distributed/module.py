"""``TpMetraleFfn``: a tensor-parallel ``MetraleFfn`` over a ``torch.distributed`` group.

Every rank of the group holds one ``TpMetraleFfn``: its registered buffers are only the rank's
slices (gate and up rows of its 16-column blocks, the down weight's rows (split ``"n"``) or K
columns (split ``"k"``)), so weight memory and ``state_dict()`` are ≈ 1/TP of the module's.
``forward`` takes the whole bf16 ``[..., hidden]`` input on every rank and returns the whole
output on every rank, bit for bit the single-device ``MetraleFfn``'s for every TP size
(arithmetic.md § tp). It runs through the same ``metrale::dense_ffn`` operator (so
``torch.compile(fullgraph=True)`` traces it); on CUDA the kernels run on torch's current stream
and the collectives are ordered on it (NCCL, or gloo with the device arrays staged through the
host, which CUDA-graph capture refuses).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed.nn.functional  # before any process group: see below

from metrale.distributed.agree import (
    WHERE,
    agree_rows,
    all_gather_into,
    failing_together,
    fingerprint,
    process_group,
)
from metrale.distributed.layer import sliced_tp_layer
from metrale.distributed.shard import (
    BLOCK,
    SPLITS,
    KShard,
    NShard,
    block_ranges,
    k_slice,
    n_slice,
    row_ranges,
    rows_slice,
)
from metrale.errors import MetraleError
from metrale.ffn_module import MetraleFfn, check_input, check_weights, set_tensor_parallel
from metrale.reference.context import FfnConfig
from metrale.reference.layer import DenseFfnLayer, FfnActivation

# torch.distributed.nn.functional binds ``group.WORLD`` as default arguments when it is first
# imported, and torch._dynamo (which the first metrale::dense_ffn call imports) imports it:
# imported after init_process_group, it would keep the world group alive past
# destroy_process_group, and gloo's worker threads would then free Python-owned tensors while
# the interpreter exits (SIGABRT). Imported here, before a TP script creates its group, it binds None.

_NO_COPY = (
    "TpMetraleFfn: a rank's module holds a process group and cannot be copied or pickled "
    "(save and load its state_dict on the same rank instead)"
)


def _rank_and_size(group: Any) -> tuple[int, int]:
    import torch.distributed as dist

    if not dist.is_initialized():
        raise MetraleError("TpMetraleFfn: torch.distributed is not initialized (init_process_group)")
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise MetraleError(f"TpMetraleFfn: this process (global rank {dist.get_rank()}) is not in the group")
    return rank, size


def rank_slices(config: FfnConfig, weights: Sequence[Any], rank: int, size: int, split: str) -> list[Any]:
    """gate, up and down of the whole layer cut to rank ``rank`` of ``size``: gate/up rows of
    the rank's blocks, down as a ``KShard`` (``split="k"``) or an ``NShard`` (``"n"``)."""
    if split not in SPLITS:
        raise MetraleError(f"TpMetraleFfn: split={split!r}, want one of {', '.join(SPLITS)}")
    if config.intermediate_size % BLOCK:
        raise MetraleError(
            f"TpMetraleFfn: intermediate size {config.intermediate_size} is not a multiple of {BLOCK}"
        )
    b0, b1 = block_ranges(config.intermediate_size // BLOCK, size)[rank]
    gate, up, down = weights
    if split == "k":
        shard: Any = k_slice(down, b0, b1)
    else:
        shard = n_slice(down, row_ranges(config.hidden_size, size)[rank], (b0, b1))
    return [rows_slice(gate, BLOCK * b0, BLOCK * b1), rows_slice(up, BLOCK * b0, BLOCK * b1), shard]


class TpMetraleFfn(MetraleFfn):
    """Rank r's part of a tensor-parallel dense FFN: bf16 ``[..., hidden]`` in and out, whole on
    every rank, with the single-device ``MetraleFfn`` bits.

    Build it on every rank of ``group`` with ``MetraleFfn.tensor_parallel(group)`` /
    ``TpMetraleFfn.from_module(ffn, group)`` (cuts a whole module), ``from_weights(config,
    [gate, up, down], activation, group)`` or ``from_checkpoint(path, layer, group)`` (reads
    only the rank's slices). ``split``: ``"n"`` (default; down by output rows after an
    all-gather of h; CPU and CUDA) or ``"k"`` (down by K along subtrees; the reference backend,
    CPU only). ``config`` is the whole layer's; ``local_config`` the rank's (its columns).
    """

    def __init__(
        self,
        config: FfnConfig,
        slices: Sequence[Any],
        activation: FfnActivation | str,
        *,
        group: Any = None,
        whole_fingerprint: str | None = None,
    ) -> None:
        with failing_together(process_group(group), WHERE):
            if len(slices) != 3 or not isinstance(slices[2], (KShard, NShard)):
                raise MetraleError(
                    "TpMetraleFfn: want the rank's [gate, up, down] with down a KShard or NShard "
                    "(use from_weights / from_module / from_checkpoint for whole weights)"
                )
            group = process_group(group)
            rank, size = _rank_and_size(group)
            down = slices[2]
            # Plain attributes first: the base constructor builds (and so validates) the rank's layer.
            self.group = group
            self.tp_rank, self.tp_size = rank, size
            self.split = "n" if isinstance(down, NShard) else "k"
            self.blocks: tuple[int, int] = tuple(down.blocks)  # type: ignore[assignment]
            self.down_rows: tuple[int, int] | None = tuple(down.rows) if isinstance(down, NShard) else None  # type: ignore[assignment]
            self._whole_fingerprint = whole_fingerprint
            self._first_block = down.first_block if isinstance(down, KShard) else down.blocks[0]
            want = block_ranges(config.intermediate_size // BLOCK, size)[rank]
            if self.blocks != want or down.total_blocks != config.intermediate_size // BLOCK:
                raise MetraleError(
                    f"TpMetraleFfn: down slice holds blocks {self.blocks} of {down.total_blocks}; "
                    f"rank {rank} of {size} owns {want} of {config.intermediate_size // BLOCK}"
                )
            super().__init__(config, [slices[0], slices[1], down.weight], activation)
        self.local_config = FfnConfig(config.hidden_size, BLOCK * (self.blocks[1] - self.blocks[0]))

    # ---- construction ----
    @classmethod
    def from_weights(  # type: ignore[override]
        cls,
        config: FfnConfig,
        weights: Sequence[Any],
        activation: FfnActivation | str = "silu",
        group: Any = None,
        split: str = "n",
    ) -> TpMetraleFfn:
        """This rank's module from the whole layer's gate, up and down containers (every rank
        agrees on their fingerprint)."""
        group = process_group(group)
        with failing_together(group, WHERE):
            check_weights(config, weights, "TpMetraleFfn")
            rank, size = _rank_and_size(group)
            slices = rank_slices(config, weights, rank, size, split)
            whole = fingerprint(list(weights), whole=True)
        return cls(config, slices, activation, group=group, whole_fingerprint=whole)

    @classmethod
    def from_module(cls, ffn: MetraleFfn, group: Any = None, split: str = "n") -> TpMetraleFfn:
        """This rank's module cut from a whole ``MetraleFfn``, on that module's device."""
        with failing_together(process_group(group), WHERE):
            if isinstance(ffn, TpMetraleFfn):
                raise MetraleError("TpMetraleFfn.from_module: the module is already tensor parallel")
            if not isinstance(ffn, MetraleFfn):
                raise MetraleError(f"TpMetraleFfn.from_module: a {type(ffn).__name__}, want a MetraleFfn")
            dev = ffn._buffer_device()
        tp = cls.from_weights(ffn.config, ffn.host_weights(), ffn.activation, group, split)
        tp.weight_quant = ffn.weight_quant  # the rank's layers run the module's tier
        return tp.to(dev)

    @classmethod
    def from_layer(cls, layer: DenseFfnLayer) -> TpMetraleFfn:
        """The module of a rank's reference-backed tensor-parallel ``DenseFfnLayer`` (from
        ``tp_layer`` or ``load_ffn_layer(..., tp_rank=, tp_size=, backend="reference")``)."""
        from metrale.distributed.backend import TpBackend
        from metrale.reference.kernels import ReferenceBackend

        tb = layer.backend
        if not isinstance(tb, TpBackend):
            raise MetraleError(
                "TpMetraleFfn.from_layer: not a tensor-parallel layer "
                "(tp_layer or load_ffn_layer(..., tp_rank=, tp_size=))"
            )
        if not isinstance(tb.inner, ReferenceBackend):
            raise MetraleError("TpMetraleFfn.from_layer: load the layer with backend='reference'")
        if layer.lora is not None:
            raise MetraleError("MetraleFfn: a layer with LoRA adapters is not supported")
        slots = (layer.weights, layer.bf16_weights, layer.fp8_weights, layer.q2_weights)
        held = [ws.all() for ws in slots if ws is not None]
        if layer.w8a8 is not None:
            held.append(layer.w8a8.all())
        if len(held) != 1:
            raise MetraleError(f"TpMetraleFfn: the layer holds {len(held)} weight sets, want one format")
        total = layer.config.hidden_size, BLOCK * held[0][2].total_blocks
        return cls(FfnConfig(*total), list(held[0]), layer.activation, group=tb.group)

    @classmethod
    def from_checkpoint(  # type: ignore[override]
        cls, path: Any, layer: int = 0, group: Any = None, split: str = "n"
    ) -> TpMetraleFfn:
        """Decoder layer ``layer``'s FFN of a safetensors checkpoint folder, reading only this
        rank's slices (``load_ffn_layer(..., tp_rank=, tp_size=, tp_split=)``)."""
        from metrale.distributed.load import load_tp_layer

        group = process_group(group)
        with failing_together(group, WHERE):
            rank, size = _rank_and_size(group)
            if split not in SPLITS:
                raise MetraleError(f"TpMetraleFfn: split={split!r}, want one of {', '.join(SPLITS)}")
        tl = load_tp_layer(
            path, layer=layer, backend="reference", tp_rank=rank, tp_size=size, tp_split=split, tp_group=group
        )
        return cls.from_layer(tl)

    # ---- the rank's layer ----
    def _layer_of(self, weights: list[Any], backend: str) -> DenseFfnLayer:
        if backend != "reference" and self.split == "k":
            raise MetraleError(
                "TpMetraleFfn: split 'k' runs on the reference backend (CPU) only; "
                "build the module with split='n' to run it on CUDA"
            )
        gate, up, down = weights
        nb = self.config.intermediate_size // BLOCK
        if self.down_rows is None:
            shard: Any = KShard(down, self.blocks, self._first_block, nb)
        else:
            shard = NShard(down, self.down_rows, self.config.hidden_size, self.blocks, nb)
        return sliced_tp_layer(
            self.config,
            self.tp_rank,
            self.tp_size,
            [gate, up, shard],
            activation=self.activation,
            backend=backend,
            group=self.group,
            where="TpMetraleFfn",
            facts={"the whole weights' fingerprint": self._whole_fingerprint},
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():  # compiled: the operator's body (run) checks x
            self._check_input_with_the_group(x)
        return torch.ops.metrale.dense_ffn(x, self._handle)

    def _check_input_with_the_group(self, x: Any) -> bool:
        """check_input, and x on the weights' device; returns whether the group agrees on row
        counts on the host (gloo). Host groups agree on every call's row count inside the
        backend: a rank that refuses its input (or, in ``run``, has no rows) launches nothing,
        so it builds the layer (the agreement any rank's first call runs) and agrees here:
        every rank then fails alike instead of leaving the others in a collective."""
        import torch.distributed as dist

        dev = self._buffer_device()
        name = dist.get_backend(self.group)
        synced = "gloo" in name if dev.type == "cpu" else name == "gloo"  # the backend's rule
        try:
            check_input(x, self.config.hidden_size, "MetraleFfn input")
            if x.device != dev:
                raise MetraleError(
                    f"MetraleFfn: input on {x.device}, the module's weights on {dev} (use .to())"
                )
        except MetraleError as e:
            if synced:
                self._agree_on_the_build(dev)
                self.layer_for(dev, 1)
                agree_rows(self.group, -1, WHERE, error=str(e))
            raise
        return synced

    def _agree_on_the_build(self, dev: torch.device) -> None:
        """Host groups, before a call's first collective: whether every rank holds its layer for
        ``dev`` (one int64 all-gather). A rank that dropped its layer alone (``load_state_dict``,
        ``.to()``) would enter the construction agreement while the others enter the forward's
        collectives; where the ranks differ, every rank drops its layer and all build together
        (the construction agreement then compares what each rank now holds)."""
        import torch.distributed as dist

        size = dist.get_world_size(self.group)
        built = str(dev) in self._built
        out = torch.empty(size, dtype=torch.int64)
        all_gather_into(out, torch.tensor([int(built)], dtype=torch.int64), self.group)
        if built and not all(int(v) for v in out.tolist()):
            self._built.pop(str(dev))

    def run(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        if x.device.type == "cpu" and "gloo" not in dist.get_backend(self.group):
            raise MetraleError(
                f"TpMetraleFfn: input on cpu, the group's backend {dist.get_backend(self.group)} moves "
                "CUDA tensors only (use a gloo group, or move the module to cuda)"
            )
        synced = self._check_input_with_the_group(x)
        if synced:
            self._agree_on_the_build(x.device)
        if x.numel() == 0 and synced:
            self.layer_for(x.device, 1)
            agree_rows(self.group, 0, WHERE)
        return super().run(x)

    # ---- state: which rank's slices ----
    def _identity(self) -> torch.Tensor:
        c = self.config
        return torch.tensor(
            [self.tp_rank, self.tp_size, SPLITS.index(self.split), c.hidden_size, c.intermediate_size],
            dtype=torch.int64,
        )

    def get_extra_state(self) -> torch.Tensor:
        """[rank, size, split (0 = k, 1 = n), hidden, intermediate]: whose slices the buffers hold."""
        return self._identity()

    def set_extra_state(self, state: Any) -> None:
        got = [int(v) for v in torch.as_tensor(state).reshape(-1).tolist()]
        want = [int(v) for v in self._identity().tolist()]
        if got != want:
            raise MetraleError(
                f"TpMetraleFfn.load_state_dict: the state holds the slices of rank {got[0]} of {got[1]}, "
                f"split {SPLITS[got[2]] if 0 <= got[2] < len(SPLITS) else got[2]!r}, FFN {got[3]}x{got[4]}; "
                f"this module is rank {want[0]} of {want[1]}, split {self.split!r}, FFN {want[3]}x{want[4]}"
            )

    def __getstate__(self) -> dict[str, Any]:
        raise MetraleError(_NO_COPY)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise MetraleError(_NO_COPY)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tp_rank={self.tp_rank}, tp_size={self.tp_size}, split={self.split}"


set_tensor_parallel(TpMetraleFfn.from_module)
