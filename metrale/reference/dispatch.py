"""GEMV/GEMM dispatch on the weight's format and the NVFP4 launchers (arithmetic.md § routes).

Each function launches named kernels on ``backend`` and writes ``output`` in place.
"""

from __future__ import annotations

from typing import Any

from metrale.errors import KernelMissing, MetraleError
from metrale.reference.backend import W4A16_TIERS, Backend
from metrale.reference.formats import FORMATS
from metrale.reference.tiers import W4A4_MAX_ROWS, W4a16BatchmTiers, WeightQuantTier, weight_quantization


def _kernel(weight: Any, which: str) -> str | None:
    """The format descriptor's ``gemv`` / ``gemm`` kernel (keyed by the weight's ``format``,
    which host containers and device weights both carry); None if it has none."""
    spec = FORMATS.get(_format(weight) or "")
    return None if spec is None else getattr(spec, which)


def _format(weight: Any) -> str | None:
    return getattr(weight, "format", None)


def quant_gemv(backend: Backend, input: Any, weight: Any, output: Any) -> None:
    """One-row GEMV through the kernel for the weight's format (NVFP4, FP8, BF16)."""
    if _format(weight) == "q2_0":
        raise MetraleError(
            "quant_gemv: PackedQ2 not routed through the generic dispatcher; use q2_0_gemv_vec"
        )
    kernel = _kernel(weight, "gemv")
    if kernel is None:
        raise MetraleError(f"quant_gemv: unsupported weight type {type(weight).__name__}")
    backend.launch(kernel, input, weight, output)


def quant_gemm(backend: Backend, input: Any, weight: Any, output: Any) -> None:
    """m-row GEMM through the kernel for the weight's format (NVFP4, FP8, BF16)."""
    if _format(weight) == "q2_0":
        raise MetraleError(
            "quant_gemm: PackedQ2 not routed through the generic dispatcher; "
            "use the layer's transient-dequant prefill path"
        )
    kernel = _kernel(weight, "gemm")
    if kernel is None:
        raise MetraleError(f"quant_gemm: unsupported weight type {type(weight).__name__}")
    backend.launch(kernel, input, weight, output)


def quant_gemm_pair(backend: Backend, input: Any, gate: Any, gate_out: Any, up: Any, up_out: Any) -> None:
    """Gate and up over the same rows: one ``w4a16_gemm_dual`` launch where both are NVFP4 of one
    shape and the backend has it (one activation prologue, one grid), else ``quant_gemm``
    twice. The bits are the two GEMMs' either way (each output is its own projection)."""
    if (
        _format(gate) == "nvfp4"
        and _format(up) == "nvfp4"
        and (gate.n, gate.k) == (up.n, up.k)
        and backend.has("w4a16_gemm_dual")
    ):
        backend.launch("w4a16_gemm_dual", input, gate, gate_out, up, up_out)
        return
    quant_gemm(backend, input, gate, gate_out)
    quant_gemm(backend, input, up, up_out)


def q2_gemm_pair(backend: Backend, input: Any, gate: Any, gate_out: Any, up: Any, up_out: Any) -> None:
    """The packed-Q2 prefill's gate and up: one ``q2_0_gemm_dual`` launch where their shapes
    agree and the backend has it, else ``q2_0_gemm`` twice (the same bits)."""
    if (gate.n, gate.k) == (up.n, up.k) and backend.has("q2_0_gemm_dual"):
        backend.launch("q2_0_gemm_dual", input, gate, gate_out, up, up_out)
        return
    backend.launch("q2_0_gemm", input, gate, gate_out)
    backend.launch("q2_0_gemm", input, up, up_out)


def w4a16_gemv_batchm(
    backend: Backend, kernel: str | None, input: Any, weight: Any, output: Any, m: int
) -> None:
    """m rows through the ``w4a16_gemv_batch{M}`` tier ``kernel``; refuses m > 32."""
    if m > 32:
        raise MetraleError(f"w4a16_gemv_batchm caps at M=32 (batch32; m={m})")
    if kernel is None:
        tier = next((t for t in W4A16_TIERS if m <= t), W4A16_TIERS[-1])
        raise KernelMissing(
            f"w4a16_gemv_batch{tier} kernel missing in this target build (w4a16_gemv_batchm, m={m})"
        )
    backend.launch(kernel, input, weight, output, m)


def _uses_a4(backend: Backend, weight: Any, m: int, tier: WeightQuantTier | None) -> bool:
    declares = W4a16BatchmTiers(backend).declares_a4(weight)
    return (tier or weight_quantization()).admits(m, declares)


def _a4_proj(
    backend: Backend, input: Any, weight: Any, output: Any, m: int, scratch: dict[str, Any], same_input: bool
) -> None:
    """``w4a4_quantize`` (skipped where ``same_input`` and ``scratch`` hold codes of this
    input_scale) then ``w4a4_gemv_small_m`` over m rows."""
    key = ("a4", float(weight.input_scale))
    if not (same_input and scratch.get("a4_key") == key):
        scratch["a4"] = backend.launch("w4a4_quantize", input[:m], weight.input_scale)
        scratch["a4_key"] = key
    backend.launch("w4a4_gemv_small_m", scratch["a4"], weight, output[:m])


def nvfp4_proj_small_m(
    backend: Backend,
    kernel: str | None,
    input: Any,
    weight: Any,
    output: Any,
    m: int,
    scratch: dict[str, Any],
    *,
    same_input: bool = False,
    tier: WeightQuantTier | None = None,
) -> None:
    """NVFP4 projection of m rows: W4A4 (up to 64 rows; any m under ``w4a4-all``) where the
    weight-quantization ``tier`` (None: the process-wide one) admits it, else the W4A16 tier
    ``kernel``. ``same_input`` reuses the activation codes the previous call stored in
    ``scratch`` (gate and up share one quantization of x)."""
    if _format(weight) != "nvfp4":
        raise MetraleError(f"nvfp4_proj_small_m: weight {getattr(weight, 'name', '?')} is not NVFP4")
    if _uses_a4(backend, weight, m, tier):
        if m > W4A4_MAX_ROWS and not (tier or weight_quantization()).all_rows:
            raise MetraleError(f"nvfp4_proj_small_m: W4A4 serves up to {W4A4_MAX_ROWS} rows (m={m})")
        _a4_proj(backend, input, weight, output, m, scratch, same_input)
        return
    w4a16_gemv_batchm(backend, kernel, input, weight, output, m)


def nvfp4_proj_prefill(
    backend: Backend,
    input: Any,
    weight: Any,
    output: Any,
    m: int,
    scratch: dict[str, Any],
    *,
    tier: WeightQuantTier,
    same_input: bool = False,
) -> None:
    """NVFP4 projection of m prefill rows under a tier whose prefill runs A4 (``w4a4-all``):
    W4A4 where the weight declares A4, else ``quant_gemm`` (A16)."""
    if _uses_a4(backend, weight, m, tier):
        _a4_proj(backend, input, weight, output, m, scratch, same_input)
        return
    quant_gemm(backend, input, weight, output)
