"""The declared-W8A8 arm of the dense SiLU FFN (arithmetic.md § w8a8-arm).

Gate and up share one quantized input and one launch (``w8a8_gemv_dual``); the down
projection's input bf16(silu(gate)·up) is quantized in the launch that computes it
(``w8a8_silu_quant_gemv``). Where the backend has ``w8a8_gemv_dual_silu_quant`` (gate, up and
the A8 codes of h from one call, so a GPU may form h in the gate + up GEMM's epilogue) the arm
runs it and ``w8a8_gemv`` on down instead: the same steps, the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metrale.reference.backend import Backend
from metrale.reference.formats import W8a8Weight

#: Rows the W8A8 decode kernels serve (1..=W8A8_MAX_ROWS).
W8A8_MAX_ROWS = 64
#: Rows per chunk when a W8A8-only layer's prefill runs the arm's kernels past the cap (each
#: chunk is one pass over the weights; the arithmetic is per row, so no bit depends on it).
W8A8_PREFILL_ROWS = 4096
W8A8_KERNELS = ("w8a8_quantize", "w8a8_gemv_dual", "w8a8_silu_quant_gemv")
#: The arm after ``w8a8_quantize``: with the SiLU step beside gate and up (preferred), or the
#: seed engine's with it beside down.
FUSED_TAIL = ("w8a8_gemv_dual_silu_quant", "w8a8_gemv")
SEED_TAIL = W8A8_KERNELS[1:]


@dataclass(frozen=True)
class W8a8Ffn:
    """W8A8 gate_proj [inter, hidden], up_proj [inter, hidden] and down_proj [hidden, inter]:
    the names of ``FfnWeights``. ``gate`` / ``up`` / ``down`` are read-only aliases kept for
    code written against the seed engine's names."""

    gate_proj: W8a8Weight
    up_proj: W8a8Weight
    down_proj: W8a8Weight

    def all(self) -> tuple[W8a8Weight, W8a8Weight, W8a8Weight]:
        return (self.gate_proj, self.up_proj, self.down_proj)

    @property
    def gate(self) -> W8a8Weight:
        return self.gate_proj

    @property
    def up(self) -> W8a8Weight:
        return self.up_proj

    @property
    def down(self) -> W8a8Weight:
        return self.down_proj


def available(backend: Backend, w: W8a8Weight, rows: int) -> bool:
    """Whether the W8A8 kernels serve ``rows`` rows of ``w`` in this build."""
    return 1 <= rows <= W8A8_MAX_ROWS and backend.has(W8A8_KERNELS[0]) and _tail(backend) is not None


def _tail(backend: Backend) -> tuple[str, str] | None:
    """The arm's kernels after ``w8a8_quantize`` this backend has: FUSED_TAIL, else SEED_TAIL."""
    return next((t for t in (FUSED_TAIL, SEED_TAIL) if all(backend.has(k) for k in t)), None)


def run_w8a8(
    backend: Backend, w: W8a8Ffn, input: Any, rows: int, gate_out: Any, up_out: Any, output: Any
) -> None:
    """gate and up from one quantization of ``input``, then silu → quantize → down (the quantize
    step beside gate and up where the backend has FUSED_TAIL, else beside down), which leaves
    h = bf16(silu(gate)·up) in ``gate_out`` as every other route does."""
    codes = backend.launch("w8a8_quantize", input[:rows])
    if _tail(backend) == FUSED_TAIL:
        h = backend.launch(FUSED_TAIL[0], codes, w.gate_proj, gate_out[:rows], w.up_proj, up_out[:rows])
        backend.launch(FUSED_TAIL[1], h, w.down_proj, output[:rows])
        return
    # Gate and up read one quantized input (the seed engine's `up` reads the activation `gate`
    # quantized into the shared scratch), so they are one launch: § w8a8-arm.
    backend.launch("w8a8_gemv_dual", codes, w.gate_proj, gate_out[:rows], w.up_proj, up_out[:rows])
    backend.launch("w8a8_silu_quant_gemv", gate_out[:rows], up_out[:rows], w.down_proj, output[:rows])
