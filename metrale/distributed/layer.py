"""A tensor-parallel ``DenseFfnLayer``: the rank's slices of a layer's weights on a ``TpBackend``.

The rank's layer is an ordinary ``DenseFfnLayer`` over FfnConfig(hidden, 16·(b1 − b0)): its
routing, tiers and errors are the single-device ones (they depend on m, the formats and
``input_scale``, which every slice keeps), and ``output()[:m]`` holds the whole y on every rank.
The down weight is a ``KShard`` (split ``"k"``) or an ``NShard`` (split ``"n"``), see
``metrale.distributed.shard``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from metrale.distributed.agree import WHERE, agree, failing_together, fingerprint
from metrale.distributed.backend import TpBackend
from metrale.distributed.shard import (
    BLOCK,
    LoraNShard,
    NShard,
    block_ranges,
    k_slice,
    lora_k,
    lora_rows,
    n_slice,
    row_ranges,
    rows_slice,
)
from metrale.errors import MetraleError, a_kind
from metrale.reference.backend import Backend, resolve_backend
from metrale.reference.context import FfnConfig
from metrale.reference.formats.spec import spec_of
from metrale.reference.layer import DenseFfnLayer, FfnLora, FfnWeights
from metrale.reference.w8a8_arm import W8a8Ffn


def _ffn(ws: Any, b0: int, b1: int, down_rows: tuple[int, int] | None) -> Any:
    """gate/up rows of blocks [b0, b1); down by K (``down_rows`` None) or its rows ``down_rows``."""
    if ws is None:
        return None
    down = ws.down_proj
    return FfnWeights(
        rows_slice(ws.gate_proj, BLOCK * b0, BLOCK * b1),
        rows_slice(ws.up_proj, BLOCK * b0, BLOCK * b1),
        k_slice(down, b0, b1) if down_rows is None else n_slice(down, down_rows, (b0, b1)),
    )


def tp_layer(
    config: FfnConfig,
    rank: int,
    size: int,
    *,
    weights: FfnWeights[Any] | None = None,
    bf16_weights: FfnWeights[Any] | None = None,
    fp8_weights: FfnWeights[Any] | None = None,
    q2_weights: FfnWeights[Any] | None = None,
    w8a8: W8a8Ffn | None = None,
    lora: FfnLora | None = None,
    activation: Any = "silu",
    backend: Backend | str | None = "reference",
    group: Any = None,
    sliced: bool = False,
    split: str | None = None,
    facts: dict[str, Any] | None = None,
) -> DenseFfnLayer:
    """Rank ``rank`` of ``size``'s layer. Weights are whole (``sliced=False``: this function
    takes the rank's slices) or already the rank's slices (``sliced=True``, e.g. from
    ``load_ffn_layer(..., tp_rank=, tp_size=)``). ``split``: how the down projection is split,
    ``"k"`` or ``"n"`` (None: ``default_split`` of the backend; arithmetic.md § tp).

    Every rank of the group calls it: the ranks agree on the config, TP size, split, formats,
    activation and a weights fingerprint (``facts``: more to agree on) before returning, and a
    rank's error is raised as the same TpDisagreement on every rank (``metrale.distributed.agree``)."""
    with failing_together(group, WHERE):
        for nm, v in (("rank", rank), ("size", size)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise MetraleError(f"tp_layer: {nm}={v!r}, want an int (got {type(v).__name__})")
        held = [ws for ws in (weights, bf16_weights, fp8_weights, q2_weights) if ws is not None]
        if w8a8 is not None:
            held.append(FfnWeights(*w8a8.all()))
        layer = _rank_layer(
            config,
            int(rank),
            int(size),
            weights,
            bf16_weights,
            fp8_weights,
            q2_weights,
            w8a8,
            lora,
            activation,
            backend,
            group,
            sliced,
            split,
        )
    tb = layer.backend
    mine = {
        "the FFN (hidden, intermediate)": (config.hidden_size, config.intermediate_size),
        "tp_size": int(size),
        "split": tb.split,
        "formats": sorted(spec_of(ws.gate_proj).stem for ws in held),
        "activation": layer.activation.value,
        "LoRA": lora is not None,
        "backend": tb.inner.name,
        "weights fingerprint": fingerprint([w for ws in held for w in ws.all()], whole=not sliced),
        **(facts or {}),
    }
    agree(group, WHERE, mine)
    return layer


def _rank_layer(
    config: FfnConfig,
    rank: int,
    size: int,
    weights: Any,
    bf16_weights: Any,
    fp8_weights: Any,
    q2_weights: Any,
    w8a8: W8a8Ffn | None,
    lora: FfnLora | None,
    activation: Any,
    backend: Backend | str | None,
    group: Any,
    sliced: bool,
    split: str | None,
) -> DenseFfnLayer:
    """``tp_layer``'s body: the rank's layer, before the ranks agree."""
    if not isinstance(config, FfnConfig):
        raise MetraleError(f"tp_layer: config is {a_kind(config)}, want a metrale.FfnConfig")
    inner = resolve_backend(backend, "tp_layer")
    tb = TpBackend(inner, group, split)
    if (tb.rank, tb.size) != (rank, size):
        raise MetraleError(
            f"tensor parallel: rank {rank} of {size} given, the process group says {tb.rank} of {tb.size}"
        )
    nb = config.intermediate_size // BLOCK
    b0, b1 = block_ranges(nb, size)[rank]
    down_rows = row_ranges(config.hidden_size, size)[rank] if tb.split == "n" else None
    cut = (lambda ws: ws) if sliced else (lambda ws: _ffn(ws, b0, b1, down_rows))
    lora_local = lora
    if lora is not None and not sliced:
        ld = lora.down_proj
        lora_local = FfnLora(
            lora_rows(lora.gate_proj, BLOCK * b0, BLOCK * b1),
            lora_rows(lora.up_proj, BLOCK * b0, BLOCK * b1),
            lora_k(ld, b0, b1) if down_rows is None else (None if ld is None else LoraNShard(ld, nb)),
        )
    local = FfnConfig(config.hidden_size, BLOCK * (b1 - b0))
    layer = DenseFfnLayer(
        local,
        weights=cut(weights),
        bf16_weights=cut(bf16_weights),
        fp8_weights=cut(fp8_weights),
        q2_weights=cut(q2_weights),
        lora=lora_local,
        activation=activation,
        backend=tb,
    )
    if w8a8 is not None:
        w = w8a8 if sliced else W8a8Ffn(*_ffn(FfnWeights(*w8a8.all()), b0, b1, down_rows).all())
        layer.set_w8a8_decode_weights(w, local.hidden_size, local.intermediate_size)
    return layer


def sliced_tp_layer(
    config: FfnConfig,
    rank: int,
    size: int,
    ws: list[Any],
    *,
    activation: Any,
    backend: Backend | str | None,
    group: Any = None,
    where: str = "tp_layer",
    facts: dict[str, Any] | None = None,
) -> DenseFfnLayer:
    """Rank ``rank`` of ``size``'s layer from its slices of one format: gate and up rows of its
    blocks and the down weight as a ``KShard`` (split ``"k"``) or an ``NShard`` (``"n"``)."""
    gate, up, down = ws
    kinds = {type(w).__name__ for w in (gate, up, down.weight)}
    if len(kinds) != 1:
        raise MetraleError(f"{where}: gate/up/down mix formats {sorted(kinds)}")
    split = "n" if isinstance(down, NShard) else "k"
    ffn = FfnWeights(gate, up, down)
    slot = spec_of(gate).slot
    if slot == "w8a8":
        w8 = W8a8Ffn(*ffn.all())
        return tp_layer(
            config,
            rank,
            size,
            w8a8=w8,
            activation=activation,
            backend=backend,
            group=group,
            sliced=True,
            split=split,
            facts=facts,
        )
    return tp_layer(
        config,
        rank,
        size,
        activation=activation,
        backend=backend,
        group=group,
        sliced=True,
        split=split,
        facts=facts,
        **{slot: ffn},
    )
