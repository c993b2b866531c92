"""The W8A8 SiLU-quantize launch shapes (CPU): the constants metrale/cuda/w8a8.py launches with
are the ones kernels/w8a8.cu was written for, and the cluster kernel holds a row of MAX_K."""

from __future__ import annotations

import re

from metrale.cuda import w8a8
from metrale.cuda.runtime import KERNEL_DIR
from metrale.reference.formats.w8a8 import MAX_K


def _defines() -> dict[str, int]:
    text = (KERNEL_DIR / "w8a8.cu").read_text()
    return {
        name: int(v) for name, v in re.findall(r"^#define (SQ_CL|SQ_T|SQ_V|SILU_SLICE) (\d+)$", text, re.M)
    }


def test_launch_constants_match_the_kernels() -> None:
    d = _defines()
    assert d["SQ_CL"] == w8a8.SILU_QUANT_CTAS and d["SQ_T"] == w8a8.SILU_QUANT_THREADS
    assert d["SILU_SLICE"] == w8a8.SILU_SLICE


def test_cluster_kernel_registers_hold_the_longest_row() -> None:
    """Each thread keeps SQ_V groups of 8 elements: the cluster covers MAX_K exactly (a larger
    MAX_K would leave elements unprocessed; the GPU tests run K = MAX_K)."""
    d = _defines()
    assert 8 * d["SQ_V"] * d["SQ_T"] * d["SQ_CL"] == MAX_K
    assert d["SQ_CL"] <= 8  # the portable cluster size: no opt-in attribute at launch
