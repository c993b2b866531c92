"""``DenseFfnLayer``: the dense FFN's entry points and routing, from the seed engine (arithmetic.md § layer).

Every entry point tries the W8A8 arm first. Packed-Q2 layers go to ``forward_km_q2`` (2, 3
rows) or ``q2_0_gemv_vec`` (1 row); BF16/FP8 overlays to ``forward_prefill``; NVFP4 layers to
the W4A16 fixed-row kernels or to ``forward_km``. Output is always ``output[:m]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

import numpy as np

from metrale.errors import KernelMissing, MetraleError, a_kind
from metrale.reference.backend import W4A16_TIERS, Backend, resolve_backend
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.dispatch import (
    nvfp4_proj_prefill,
    nvfp4_proj_small_m,
    q2_gemm_pair,
    quant_gemm,
    quant_gemm_pair,
    quant_gemv,
)
from metrale.reference.formats import FORMATS, Fp8Weight, Nvfp4Weight, Q2_0Weight
from metrale.reference.lora import LoraAdapter
from metrale.reference.tiers import W4a16BatchmTiers, WeightQuantTier, layer_tier, weight_quantization
from metrale.reference.w8a8_arm import W8A8_PREFILL_ROWS, W8a8Ffn, available, run_w8a8

W = TypeVar("W")

#: Plug-in point: the checkpoint reader above the reference (``metrale.checkpoint.load``),
#: installed by ``metrale/__init__`` with ``set_checkpoint_loader``; the reference never imports it.
_checkpoint_loader: Callable[..., DenseFfnLayer] | None = None


def set_checkpoint_loader(loader: Callable[..., DenseFfnLayer]) -> None:
    """Install what ``DenseFfnLayer.from_checkpoint`` calls (``load_ffn_layer``)."""
    global _checkpoint_loader
    _checkpoint_loader = loader


class FfnActivation(Enum):
    """The FFN's gate activation."""

    SiLU = "silu"
    GELU = "gelu"


@dataclass(frozen=True)
class FfnWeights(Generic[W]):
    """gate_proj, up_proj [inter, hidden] and down_proj [hidden, inter] of one format: the
    format of the ``DenseFfnLayer`` keyword it is passed as (NVFP4 ``weights``, BF16
    ``bf16_weights``, FP8 ``fp8_weights``, Q2_0 ``q2_weights``; W8A8 as ``W8a8Ffn``)."""

    gate_proj: W
    up_proj: W
    down_proj: W

    def __post_init__(self) -> None:
        for name in ("gate_proj", "up_proj", "down_proj"):
            p = getattr(self, name)
            if not isinstance(getattr(p, "format", None), str) or p.format not in FORMATS:
                kinds = ", ".join(f.weight_type.__name__ for f in FORMATS.values())
                raise MetraleError(f"FfnWeights: {name} is {a_kind(p)}, want a metrale weight ({kinds})")

    def all(self) -> tuple[W, W, W]:
        return (self.gate_proj, self.up_proj, self.down_proj)


@dataclass(frozen=True)
class FfnLora:
    """LoRA adapters per projection (any may be None)."""

    gate_proj: LoraAdapter | None = None
    up_proj: LoraAdapter | None = None
    down_proj: LoraAdapter | None = None


def native_small_batch_uses_prefill(has_bf16: bool, has_fp8: bool) -> bool:
    """A layer with a BF16 or FP8 overlay is handed to ``forward_prefill``."""
    return has_bf16 or has_fp8


def _activation(a: FfnActivation | str) -> FfnActivation:
    """An FfnActivation from itself or its name ("silu", "gelu", any case)."""
    if isinstance(a, FfnActivation):
        return a
    if isinstance(a, str) and a.strip().lower() in {v.value for v in FfnActivation}:
        return FfnActivation(a.strip().lower())
    raise MetraleError(f"DenseFfnLayer: activation={a!r}, want FfnActivation.SiLU / GELU or 'silu' / 'gelu'")


#: Where each format goes: the DenseFfnLayer keyword (or method) that takes it.
_SLOT_USE = {
    "weights": "weights=",
    "bf16_weights": "bf16_weights=",
    "fp8_weights": "fp8_weights=",
    "q2_weights": "q2_weights=",
    "w8a8": "set_w8a8_decode_weights(W8a8Ffn(gate_proj, up_proj, down_proj), hidden, inter)",
}


def _check_slot(parts: tuple[Any, ...], slot: str, where: str) -> None:
    """Each of gate_proj/up_proj/down_proj is a weight of the format ``slot`` serves; else a
    MetraleError naming the projection, its format and the slot that takes it."""
    for name, p in zip(("gate_proj", "up_proj", "down_proj"), parts, strict=True):
        stem = getattr(p, "format", None)
        spec = FORMATS.get(stem) if isinstance(stem, str) else None
        if spec is None:
            raise MetraleError(f"{where}: {name} is {a_kind(p)}, not a metrale weight")
        if spec.slot != slot:
            raise MetraleError(
                f"{where}: {name} is a {spec.label} weight; {spec.label} weights go in {_SLOT_USE[spec.slot]}"
            )


def _check_shapes(w: Any, hidden: int, inter: int, slot: str) -> None:
    what = next(f.label for f in FORMATS.values() if f.slot == slot)
    if not isinstance(w, FfnWeights):
        raise MetraleError(
            f"DenseFfnLayer: {what} weights are a {type(w).__name__}, "
            "want FfnWeights(gate_proj, up_proj, down_proj)"
        )
    _check_slot(w.all(), slot, f"DenseFfnLayer({slot}=...)")
    got = [(p.n, p.k) for p in w.all()]
    want = [(inter, hidden), (inter, hidden), (hidden, inter)]
    if got != want:
        raise MetraleError(
            f"{what} FFN shapes {got}, want gate/up [{inter}, {hidden}] and down [{hidden}, {inter}]"
        )


class DenseFfnLayer:
    """A dense FFN: down(act(gate(x)) · up(x)), with NVFP4 weights and optional overlays.

    ``weights`` NVFP4; ``bf16_weights`` / ``fp8_weights`` overlays; ``q2_weights`` packed Q2;
    ``lora`` adapters. Weights live on ``backend`` (uploaded at construction).
    ``weight_quant``: the layer's own weight-quantization tier (``w4a4``, ``w4a4-batch``,
    ``w4a16``, ``w4a4-all``); None (the seed engine's behaviour): ``METRALE_WEIGHT_QUANT``.
    """

    def __init__(
        self,
        config: FfnConfig,
        *,
        weights: FfnWeights[Nvfp4Weight] | None = None,
        bf16_weights: FfnWeights[Any] | None = None,
        fp8_weights: FfnWeights[Fp8Weight] | None = None,
        q2_weights: FfnWeights[Q2_0Weight] | None = None,
        lora: FfnLora | None = None,
        activation: FfnActivation = FfnActivation.SiLU,
        backend: Backend | str | None = None,
        weight_quant: str | None = None,
    ) -> None:
        if not isinstance(config, FfnConfig):
            raise MetraleError(f"DenseFfnLayer: config is {a_kind(config)}, want an FfnConfig")
        self.backend = resolve_backend(backend, "DenseFfnLayer")
        self.config = config
        self.activation = _activation(activation)
        h, i = config.hidden_size, config.intermediate_size
        for slot, ws in (
            ("weights", weights),
            ("bf16_weights", bf16_weights),
            ("fp8_weights", fp8_weights),
            ("q2_weights", q2_weights),
        ):
            if ws is not None:
                _check_shapes(ws, h, i, slot)
        up = self._upload
        self.weights = up(weights)
        self.bf16_weights = up(bf16_weights)
        self.fp8_weights = up(fp8_weights)
        self.q2_weights = up(q2_weights)
        self.lora = (
            None
            if lora is None
            else FfnLora(
                *(
                    None if a is None else self.backend.upload(a)
                    for a in (lora.gate_proj, lora.up_proj, lora.down_proj)
                )
            )
        )
        self.w8a8: W8a8Ffn | None = None
        self.w4a16_batchm = W4a16BatchmTiers(self.backend)
        self.set_weight_quant(weight_quant)

    def __repr__(self) -> str:
        c = self.config
        parts = [f"hidden={c.hidden_size}", f"intermediate={c.intermediate_size}", self.activation.value]
        for label, ws in (
            ("weights=NVFP4", self.weights),
            ("bf16_weights=BF16", self.bf16_weights),
            ("fp8_weights=FP8", self.fp8_weights),
            ("q2_weights=Q2_0", self.q2_weights),
        ):
            if ws is not None:
                parts.append(
                    label + (" (declares A4)" if label.endswith("NVFP4") and self.declares_a4() else "")
                )
        if self.w8a8 is not None:
            parts.append("w8a8=W8A8")
        if self.lora is not None:
            parts.append("lora")
        parts.append(f"backend={self.backend.name!r}")
        return f"DenseFfnLayer({', '.join(parts)})"

    def _upload(self, ws: FfnWeights[Any] | None) -> FfnWeights[Any] | None:
        if ws is None:
            return None
        return FfnWeights(*(self.backend.upload(p) for p in ws.all()))

    # ---- W8A8 arm (arithmetic.md § w8a8-arm) ----
    def set_w8a8_decode_weights(self, w: W8a8Ffn, hidden: int, inter: int) -> None:
        """Install the W8A8 gate, up and down; SiLU only, shapes [inter, hidden] / [hidden, inter]."""
        if self.activation != FfnActivation.SiLU:
            raise MetraleError("W8A8 FFN arm fuses SiLU only")
        if not isinstance(w, W8a8Ffn):
            raise MetraleError(
                f"set_w8a8_decode_weights: w is {a_kind(w)}, want W8a8Ffn(gate_proj, up_proj, down_proj)"
            )
        _check_slot(w.all(), "w8a8", "set_w8a8_decode_weights")
        shapes = [(p.n, p.k) for p in w.all()]
        if shapes != [(inter, hidden), (inter, hidden), (hidden, inter)]:
            raise MetraleError(
                f"W8A8 FFN shapes {shapes}, want gate/up [{inter}, {hidden}] and down [{hidden}, {inter}]"
            )
        b = self.backend
        self.w8a8 = W8a8Ffn(*(b.upload(p) for p in w.all()))

    def forward_w8a8(self, input: Any, rows: int, ctx: ForwardContext) -> bool:
        """The W8A8 FFN over ``rows`` rows; False (launching nothing) without W8A8 weights,
        with a LoRA overlay, or for a row count the kernels do not serve."""
        w = self.w8a8
        if w is None:
            return False
        b = ctx.backend
        if (
            self.lora is not None
            or not available(b, w.gate_proj, rows)
            or not available(b, w.down_proj, rows)
        ):
            return False
        bufs = ctx.buffers
        run_w8a8(b, w, input, rows, bufs.gate_out(), bufs.up_out(), bufs.output())
        return True

    # ---- tiers and switches (arithmetic.md § tier) ----
    def set_weight_quant(self, mode: str | None) -> None:
        """Give the layer its own weight-quantization tier; None: follow ``METRALE_WEIGHT_QUANT``."""
        self.own_weight_quant: WeightQuantTier | None = layer_tier(mode)

    def weight_quant(self) -> WeightQuantTier:
        """The tier this layer runs under: its own, else the process-wide one."""
        return self.own_weight_quant or weight_quantization()

    def batchm_kernel(self, m: int) -> str | None:
        """The ``w4a16_gemv_batch{M}`` kernel for m rows over the gate weight; None if none."""
        gate = self.weights.gate_proj if self.weights else None
        return self.w4a16_batchm.kernel_for(m, gate)

    def declares_a4(self) -> bool:
        """Any of gate/up/down declares FP4 activations and the W4A4 kernels are present."""
        if self.weights is None:
            return False
        return any(self.w4a16_batchm.declares_a4(p) for p in self.weights.all())

    def small_batch_w4a4(self) -> bool:
        """Whether the 2- and 3-row steps go through ``forward_km`` (A4 where admitted)."""
        return self.weight_quant().ffn_small_batch_w4a4(self.declares_a4())

    def single_row_w4a4(self) -> bool:
        """Whether the single decode row goes through ``forward_km``."""
        return self.weight_quant().ffn_single_row_w4a4(self.declares_a4())

    def prefill_w4a4(self) -> bool:
        """Whether ``forward_prefill`` runs the NVFP4 projections A4 (``w4a4-all``)."""
        return self.weight_quant().ffn_prefill_w4a4(self.declares_a4())

    def narrow_rows(self) -> int:
        """Row edge of the dense FFN's narrow arms."""
        gate = self.weights.gate_proj if self.weights else None
        return self.w4a16_batchm.ffn_edge(gate)

    def can_forward_km(self, m: int) -> bool:
        """A batchm tier resolved, and the layer has NVFP4 gate weights or an FP8 overlay."""
        return self.batchm_kernel(m) is not None and (
            self.weights is not None or self.fp8_weights is not None
        )

    # ---- helpers ----
    def _rows(self, input: Any, m: int, ctx: ForwardContext, entry: str) -> Any:
        if not isinstance(ctx, ForwardContext):
            raise MetraleError(f"{entry}: ctx is {a_kind(ctx)}, want a ForwardContext")
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)):
            raise MetraleError(f"{entry}: m={m!r}, want an int row count")
        if ctx.backend is not self.backend:
            raise MetraleError(f"{entry}: the context's backend is not the layer's backend")
        if ctx.config != self.config:
            raise MetraleError(f"{entry}: context config {ctx.config} != layer config {self.config}")
        x = ctx.backend.rows(input, self.config.hidden_size, name=f"{entry} input")
        if x.shape[0] != m:
            raise MetraleError(f"{entry}: input has {x.shape[0]} rows, want {m}")
        if m < 1:
            raise MetraleError(f"{entry}: m={m} must be >= 1")
        if m > ctx.buffers.max_rows:
            raise MetraleError(
                f"{entry}: {m} rows exceed the context's buffers ({ctx.buffers.max_rows} rows)"
            )
        return x

    def _act_mul(self, ctx: ForwardContext, m: int) -> None:
        g, u = ctx.buffers.gate_out()[:m], ctx.buffers.up_out()[:m]
        ctx.backend.launch(f"act_mul_{self.activation.value}", g, u, g)

    def _lora(self, ctx: ForwardContext, adapter: LoraAdapter | None, x: Any, out: Any) -> None:
        if adapter is not None:
            t = ctx.backend.launch("lora_shrink", x, adapter)
            ctx.backend.launch("lora_expand", t, adapter, out)

    def apply_lora_gate_up(self, ctx: ForwardContext, input: Any, m: int) -> None:
        if self.lora is not None:
            b = ctx.buffers
            self._lora(ctx, self.lora.gate_proj, input[:m], b.gate_out()[:m])
            self._lora(ctx, self.lora.up_proj, input[:m], b.up_out()[:m])

    def apply_lora_down(self, ctx: ForwardContext, m: int) -> None:
        if self.lora is not None:
            b = ctx.buffers
            self._lora(ctx, self.lora.down_proj, b.gate_out()[:m], b.output()[:m])

    def _overlay(self) -> bool:
        return native_small_batch_uses_prefill(self.bf16_weights is not None, self.fp8_weights is not None)

    def _need_nvfp4(self, entry: str) -> FfnWeights[Nvfp4Weight]:
        if self.weights is None:
            raise MetraleError(f"{entry}: the layer has no NVFP4 weights")
        return self.weights

    # ---- entry points ----
    def forward(self, input: Any, ctx: ForwardContext) -> None:
        """FFN for 1 row. W8A8 arm; packed-Q2 through ``q2_0_gemv_vec``; overlays to
        ``forward_prefill``; ``forward_km`` when ``single_row_w4a4``; else ``w4a16_gemv``."""
        x = self._rows(input, 1, ctx, "forward")
        if self.forward_w8a8(x, 1, ctx):
            return
        b, bufs = ctx.backend, ctx.buffers
        gate_out, up_out, output = bufs.gate_out(), bufs.up_out(), bufs.output()
        if self.q2_weights is not None:
            q2 = self.q2_weights
            b.launch("q2_0_gemv_vec", x, q2.gate_proj, gate_out[:1])
            b.launch("q2_0_gemv_vec", x, q2.up_proj, up_out[:1])
            self._act_mul(ctx, 1)
            b.launch("q2_0_gemv_vec", gate_out[:1], q2.down_proj, output[:1])
            return
        if self._overlay():
            return self.forward_prefill(x, 1, ctx)
        if self.single_row_w4a4() and self.can_forward_km(1):
            return self.forward_km(x, 1, ctx)
        w = self._need_nvfp4("forward")
        quant_gemv(b, x, w.gate_proj, gate_out[:1])
        quant_gemv(b, x, w.up_proj, up_out[:1])
        self.apply_lora_gate_up(ctx, x, 1)
        self._act_mul(ctx, 1)
        quant_gemv(b, gate_out[:1], w.down_proj, output[:1])
        self.apply_lora_down(ctx, 1)

    def forward_km_q2(self, input: Any, ctx: ForwardContext, m: int) -> None:
        """Packed-Q2 FFN for m rows: ``q2_0_gemv_vec_batchm`` for gate and up, ``act_mul``,
        then down; SiLU only."""
        if not ctx.backend.has("q2_0_gemv_vec_batchm"):
            raise KernelMissing(
                "q2_0_gemv_vec_batchm kernel missing in this target build — packed-Q2 "
                "batched decode (METRALE_GGUF_NATIVE_Q2, C>=2) is unavailable"
            )
        if self.activation != FfnActivation.SiLU:
            raise MetraleError(
                f"packed-Q2 FFN batched decode supports SiLU only (got {self.activation.name})"
            )
        q2 = self.q2_weights
        assert q2 is not None
        b, bufs = ctx.backend, ctx.buffers
        gate_out, up_out = bufs.gate_out()[:m], bufs.up_out()[:m]
        b.launch("q2_0_gemv_vec_batchm", input[:m], q2.gate_proj, gate_out, m)
        b.launch("q2_0_gemv_vec_batchm", input[:m], q2.up_proj, up_out, m)
        b.launch("act_mul_silu", gate_out, up_out, gate_out)
        b.launch("q2_0_gemv_vec_batchm", gate_out, q2.down_proj, bufs.output()[:m], m)

    def _forward_fixed(self, input: Any, ctx: ForwardContext, m: int) -> None:
        entry = f"forward_k{m}"
        x = self._rows(input, m, ctx, entry)
        if self.forward_w8a8(x, m, ctx):
            return
        if self.q2_weights is not None:
            return self.forward_km_q2(x, ctx, m)
        if self._overlay():
            return self.forward_prefill(x, m, ctx)
        if self.small_batch_w4a4() and self.can_forward_km(m):
            return self.forward_km(x, m, ctx)
        w = self._need_nvfp4(entry)
        b, bufs = ctx.backend, ctx.buffers
        gate_out, up_out = bufs.gate_out()[:m], bufs.up_out()[:m]
        b.launch(f"w4a16_gemv_dual_batch{m}", x, w.gate_proj, gate_out, w.up_proj, up_out)
        self.apply_lora_gate_up(ctx, x, m)
        self._act_mul(ctx, m)
        b.launch(f"w4a16_gemv_batch{m}", gate_out, w.down_proj, bufs.output()[:m])
        self.apply_lora_down(ctx, m)

    def forward_k2(self, input: Any, ctx: ForwardContext) -> None:
        """FFN for 2 rows (see ``_forward_fixed``): W8A8, Q2, overlays, ``forward_km`` when
        ``small_batch_w4a4``, else ``w4a16_gemv_dual_batch2`` + ``act_mul`` + ``w4a16_gemv_batch2``."""
        self._forward_fixed(input, ctx, 2)

    def forward_k3(self, input: Any, ctx: ForwardContext) -> None:
        """FFN for 3 rows; the same routing as ``forward_k2`` with the batch3 kernels."""
        self._forward_fixed(input, ctx, 3)

    def forward_km(self, input: Any, m: int, ctx: ForwardContext) -> None:
        """FFN for m verify rows: W8A8 arm; overlays to ``forward_prefill``; NVFP4 gate, up and
        down through ``nvfp4_proj_small_m`` with the ``batchm_kernel(m)`` tier (W4A4 where
        the tier admits it), ``act_mul`` and the LoRA deltas. No packed-Q2 arm."""
        x = self._rows(input, m, ctx, "forward_km")
        if self.forward_w8a8(x, m, ctx):
            return
        if self._overlay():
            return self.forward_prefill(x, m, ctx)
        w = self._need_nvfp4("forward_km")
        b, bufs = ctx.backend, ctx.buffers
        kh = self.batchm_kernel(m)
        gate_out, up_out = bufs.gate_out(), bufs.up_out()
        scratch, tier = bufs.scratch, self.weight_quant()
        scratch.clear()
        nvfp4_proj_small_m(b, kh, x, w.gate_proj, gate_out, m, scratch, tier=tier)
        # Same `input` as gate: the W4A4 path reuses gate's quantisation.
        nvfp4_proj_small_m(b, kh, x, w.up_proj, up_out, m, scratch, same_input=True, tier=tier)
        self.apply_lora_gate_up(ctx, x, m)
        self._act_mul(ctx, m)
        scratch.clear()
        nvfp4_proj_small_m(b, kh, gate_out, w.down_proj, bufs.output(), m, scratch, tier=tier)
        self.apply_lora_down(ctx, m)

    def forward_prefill(self, input: Any, m: int, ctx: ForwardContext) -> None:
        """FFN for m rows through the GEMMs: W8A8 arm (chunked by its row cap for a W8A8-only
        layer); BF16 overlay, then FP8 overlay, then packed Q2, then NVFP4 (A16; A4 where
        ``prefill_w4a4``, through ``_prefill_a4``)."""
        x = self._rows(input, m, ctx, "forward_prefill")
        if self.forward_w8a8(x, m, ctx):
            return
        b, bufs = ctx.backend, ctx.buffers
        gate_out, up_out = bufs.gate_out()[:m], bufs.up_out()[:m]
        output = bufs.output()[:m]
        ws: FfnWeights[Any] | None = self.bf16_weights or self.fp8_weights
        if ws is None and self.q2_weights is not None:
            q2 = self.q2_weights
            q2_gemm_pair(b, x, q2.gate_proj, gate_out, q2.up_proj, up_out)
            self._act_mul(ctx, m)
            b.launch("q2_0_gemm", gate_out, q2.down_proj, output)
            return
        if ws is None:
            ws = self.weights
        if ws is None:
            return self._w8a8_chunked(x, m, ctx)
        if ws is self.weights and self.prefill_w4a4():
            return self._prefill_a4(x, m, ctx)
        quant_gemm_pair(b, x, ws.gate_proj, gate_out, ws.up_proj, up_out)
        self.apply_lora_gate_up(ctx, x, m)
        self._act_mul(ctx, m)
        quant_gemm(b, gate_out, ws.down_proj, output)
        self.apply_lora_down(ctx, m)

    def _prefill_a4(self, x: Any, m: int, ctx: ForwardContext) -> None:
        """NVFP4 prefill under ``w4a4-all``: gate and up on one ``w4a4_quantize`` of x, then
        ``act_mul``, then down on the quantized h, as ``forward_km`` at every m (a projection
        whose weight declares no input_scale runs ``w4a16_gemm``)."""
        w = self._need_nvfp4("forward_prefill")
        b, bufs, tier = ctx.backend, ctx.buffers, self.weight_quant()
        gate_out, up_out = bufs.gate_out()[:m], bufs.up_out()[:m]
        scratch = bufs.scratch
        scratch.clear()
        nvfp4_proj_prefill(b, x, w.gate_proj, gate_out, m, scratch, tier=tier)
        nvfp4_proj_prefill(b, x, w.up_proj, up_out, m, scratch, tier=tier, same_input=True)
        self.apply_lora_gate_up(ctx, x, m)
        self._act_mul(ctx, m)
        scratch.clear()
        nvfp4_proj_prefill(b, gate_out, w.down_proj, bufs.output()[:m], m, scratch, tier=tier)
        self.apply_lora_down(ctx, m)

    def _w8a8_chunked(self, x: Any, m: int, ctx: ForwardContext) -> None:
        """A W8A8-only layer beyond the arm's row cap: the arm's kernels over chunks of
        ``W8A8_PREFILL_ROWS`` rows (the arithmetic is per row, so chunking changes no bit)."""
        w = self.w8a8
        if w is None or self.lora is not None:
            raise MetraleError(
                "forward_prefill: the layer has no weights that serve this call "
                "(W8A8 with a LoRA overlay has no arm)"
            )
        b, bufs = ctx.backend, ctx.buffers
        for r0 in range(0, m, W8A8_PREFILL_ROWS):
            r1 = min(m, r0 + W8A8_PREFILL_ROWS)
            run_w8a8(
                b,
                w,
                x[r0:r1],
                r1 - r0,
                bufs.gate_out()[r0:r1],
                bufs.up_out()[r0:r1],
                bufs.output()[r0:r1],
            )

    # ---- loading ----
    @classmethod
    def from_checkpoint(
        cls, path: Any, layer: int = 0, backend: Backend | str | None = "auto"
    ) -> DenseFfnLayer:
        """The FFN of decoder layer ``layer`` of a checkpoint metrale or another tool wrote
        (ModelOpt NVFP4, compressed-tensors FP8 / W8A8, GGUF Q2_0, or plain bf16)."""
        if _checkpoint_loader is None:  # only reachable if metrale/__init__ was bypassed
            raise MetraleError("DenseFfnLayer.from_checkpoint: no checkpoint loader (import metrale)")
        return _checkpoint_loader(path, layer=layer, backend=backend)

    # ---- convenience ----
    def route(self, m: int) -> tuple[str, Callable[[Any, ForwardContext], None]]:
        """The entry point a decoder takes for m rows, as (name, callable(x, ctx)): 1 → forward,
        2 → k2, 3 → k3, ≤ narrow_rows → forward_km, else forward_prefill."""
        if m == 1:
            return "forward", self.forward
        if m == 2:
            return "forward_k2", self.forward_k2
        if m == 3:
            return "forward_k3", self.forward_k3
        if (
            m <= self.narrow_rows()
            and self.can_forward_km(m)
            and self.q2_weights is None
            # rows past the widest W4A16 tier run only on the W4A4 path (the M=32 cap)
            and (m <= W4A16_TIERS[-1] or self.small_batch_w4a4())
        ):
            return "forward_km", lambda x, ctx: self.forward_km(x, m, ctx)
        return "forward_prefill", lambda x, ctx: self.forward_prefill(x, m, ctx)

    def __call__(self, x: Any, ctx: ForwardContext | None = None) -> np.ndarray:
        """y = bf16 [m, hidden] for bf16 rows x [m, hidden] (numpy, or a device array on CUDA):
        ``route(m)``'s entry point, then a host copy of ``output[:m]``. Errors name ``layer(x)``."""
        xs = self.backend.rows(x, self.config.hidden_size, name="layer(x)")
        m = int(xs.shape[0])
        if m < 1:
            raise MetraleError("layer(x): x has 0 rows, want at least 1")
        if ctx is None:
            ctx = ForwardContext(self.config, backend=self.backend, max_rows=max(64, m))
        entry, run = self.route(m)
        try:
            run(xs, ctx)
        except MetraleError as e:
            raise type(e)(f"layer(x) with {m} rows (via {entry}): {e}") from None
        return ctx.backend.to_numpy(ctx.buffers.output()[:m])
