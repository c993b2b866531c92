"""The reference backend: every kernel of ``KERNEL_NAMES`` in numpy, on host arrays.

Signatures (the CUDA twins take the same): activations are bf16 [m, K] arrays, outputs
bf16 [m, N] arrays written in place; ``w`` is a weight container of metrale.reference.formats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from metrale.errors import MetraleError
from metrale.reference.activations import (
    A4Codes,
    A8Codes,
    check_rows,
    quantize_a4,
    quantize_a8,
    quantize_a16,
)
from metrale.reference.backend import KERNEL_NAMES, W4A16_TIERS, Backend
from metrale.reference.chain import project_chain
from metrale.reference.elements import BF16
from metrale.reference.lora import LoraAdapter, lora_expand, lora_shrink
from metrale.reference.projection import project
from metrale.reference.tables import act_mul

#: A projection: ``projection.project`` (the contract) or ``chain.project_chain`` (the revision's
#: preview, docs/chain-revision.md), the same signature.
Project = Callable[..., np.ndarray]


def _projection_kernels(project: Project) -> dict[str, Callable[..., Any]]:
    """The kernels that project, each by ``project``."""

    def proj(x: np.ndarray, w: Any, out: np.ndarray) -> None:
        out[...] = project(x, w, "A16")

    def proj_dual(x: np.ndarray, w0: Any, out0: np.ndarray, w1: Any, out1: np.ndarray) -> None:
        """Gate and up over the same rows (``w4a16_gemm_dual``, ``q2_0_gemm_dual``): one A16
        quantization of x, the projection twice."""
        if (w0.n, w0.k) != (w1.n, w1.k):
            raise MetraleError("dual launch: gate and up must have the same shape")
        codes = quantize_a16(check_rows(x, w0.k, name="gemm_dual: x"))
        out0[...] = project(None, w0, "A16", codes=codes)
        out1[...] = project(None, w1, "A16", codes=codes)

    def fixed(rows: int) -> Callable[..., None]:
        def kernel(x: np.ndarray, w: Any, out: np.ndarray) -> None:
            out[:rows] = project(x[:rows], w, "A16")

        return kernel

    def dual(rows: int) -> Callable[..., None]:
        def kernel(x: np.ndarray, w0: Any, out0: np.ndarray, w1: Any, out1: np.ndarray) -> None:
            out0[:rows] = project(x[:rows], w0, "A16")
            out1[:rows] = project(x[:rows], w1, "A16")

        return kernel

    def tier(max_m: int) -> Callable[..., None]:
        def kernel(x: np.ndarray, w: Any, out: np.ndarray, m: int) -> None:
            r = min(m, max_m)  # a tier writes only its first MAX_M rows
            out[:r] = project(x[:r], w, "A16")

        return kernel

    def batchm(x: np.ndarray, w: Any, out: np.ndarray, m: int) -> None:
        out[:m] = project(x[:m], w, "A16")

    def w4a4_gemv(codes: A4Codes, w: Any, out: np.ndarray) -> None:
        out[...] = project(None, w, "A4", codes=codes)

    def w8a8_gemv(codes: A8Codes, w: Any, out: np.ndarray) -> None:
        out[...] = project(None, w, "A8", codes=codes)

    def w8a8_gemv_dual(codes: A8Codes, w: Any, out: np.ndarray, w2: Any, out2: np.ndarray) -> None:
        """Gate and up of the W8A8 arm from one set of codes: ``w8a8_gemv`` twice."""
        w8a8_gemv(codes, w, out)
        w8a8_gemv(codes, w2, out2)

    def silu_quant(gate: np.ndarray, up: np.ndarray) -> A8Codes:
        """The W8A8 arm's SiLU step: h = bf16(silu[gate]·up) into ``gate`` (as ``act_mul``
        leaves it), and the A8 codes of h (the down projection's input)."""
        h = act_mul(gate, up, "silu")
        gate[...] = h
        return quantize_a8(h)

    def w8a8_gemv_dual_silu_quant(
        codes: A8Codes, w: Any, out: np.ndarray, w2: Any, out2: np.ndarray
    ) -> A8Codes:
        """``w8a8_gemv_dual``, then the SiLU step over ``out`` and ``out2``: h's A8 codes."""
        w8a8_gemv_dual(codes, w, out, w2, out2)
        return silu_quant(out, out2)

    def w8a8_silu_quant_gemv(gate: np.ndarray, up: np.ndarray, w: Any, out: np.ndarray) -> None:
        """The SiLU step over ``gate`` and ``up``, then out = down(A8 of h)."""
        out[...] = project(None, w, "A8", codes=silu_quant(gate, up))

    return {
        "w4a16_gemv": fixed(1),
        "w4a16_gemv_batch2": fixed(2),
        "w4a16_gemv_batch3": fixed(3),
        "w4a16_gemv_dual_batch2": dual(2),
        "w4a16_gemv_dual_batch3": dual(3),
        **{f"w4a16_gemv_batch{t}": tier(t) for t in W4A16_TIERS},
        "w4a16_gemm": proj,
        "w4a16_gemm_dual": proj_dual,
        "w4a4_gemv_small_m": w4a4_gemv,
        "w8a16_gemv": fixed(1),
        "w8a16_gemm": proj,
        "dense_gemv": fixed(1),
        "dense_gemm": proj,
        "q2_0_gemv_vec": fixed(1),
        "q2_0_gemv_vec_batchm": batchm,
        "q2_0_gemm": proj,
        "q2_0_gemm_dual": proj_dual,
        "w8a8_gemv": w8a8_gemv,
        "w8a8_gemv_dual": w8a8_gemv_dual,
        "w8a8_gemv_dual_silu_quant": w8a8_gemv_dual_silu_quant,
        "w8a8_silu_quant_gemv": w8a8_silu_quant_gemv,
    }


def _act(name: str) -> Callable[..., None]:
    def kernel(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
        out[...] = act_mul(gate, up, name)  # type: ignore[arg-type]

    return kernel


def _lora_expand(t: np.ndarray, lora: LoraAdapter, out: np.ndarray) -> None:
    out[...] = lora_expand(t, lora, out)


def _kernels(project: Project) -> dict[str, Callable[..., Any]]:
    """Every kernel of ``KERNEL_NAMES`` in the order of the catalogue, projecting by ``project``."""
    kernels = {
        **_projection_kernels(project),
        "w4a4_quantize": quantize_a4,
        "w8a8_quantize": quantize_a8,
        "act_mul_silu": _act("silu"),
        "act_mul_gelu": _act("gelu"),
        "lora_shrink": lora_shrink,
        "lora_expand": _lora_expand,
    }
    return {name: kernels[name] for name in KERNEL_NAMES}


#: The reference kernels of the contract (arithmetic.md).
REFERENCE_KERNELS: dict[str, Callable[..., Any]] = _kernels(project)
#: The same on the block-value chain (docs/chain-revision.md: ``chain.project_chain``), the
#: revision's preview: what the CUDA kernels give under ``tile.CHAIN``.
CHAIN_KERNELS: dict[str, Callable[..., Any]] = _kernels(project_chain)


class ReferenceBackend(Backend):
    """All kernels in numpy on host memory; CPU-only, always available. ``chain``: the
    block-value chain's projections (CHAIN_KERNELS), the revision's preview."""

    name = "reference"

    def __init__(self, chain: bool = False) -> None:
        super().__init__(CHAIN_KERNELS if chain else REFERENCE_KERNELS)

    def empty_bf16(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.empty(shape, dtype=BF16)

    def rows(self, x: Any, k: int, name: str = "input") -> np.ndarray:
        return check_rows(x, k, name=name)

    def to_numpy(self, a: Any) -> np.ndarray:
        return np.array(a, dtype=BF16, copy=True)
