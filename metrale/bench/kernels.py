"""Single-kernel timings beside the FFN cells: one projection at a time, weights rotating over
device copies (more bytes than the L2), each checked bit for bit against the reference kernel
of the same name on its first and last row before its time is reported.

Families (``--kernels``):

* ``nvfp4``: ``w4a16_gemv`` (m = 1) over the gate [I, H] and down [H, I] shapes;
  ``w4a4_quantize`` + ``w4a4_gemv_small_m`` at m = 1, 2, 3 (input_scale of the
  ``w4a4`` format), and on CUDA the same with the fast A4 kernels off
  (``A4_FAST_MAX_ROWS`` = 0: m = 1 on the generic kernel, m = 2, 3 on the tensor cores);
* ``w8a8``: ``w8a8_quantize`` + ``w8a8_gemv`` (the backend's choice, and on CUDA each
  tensor-core CTA shape, warps 4 and 8), gate and down, m = 1..64; the fused
  ``w8a8_silu_quant_gemv`` on down;
* ``q2_0``: ``q2_0_gemv_vec_batchm``, gate at m = 1, 2, 4, 8 and down at m = 1, 4.

Sub-kernel times (the W8A8 SiLU-quantize, the Q2 A16 prologue) come from
``tools/gpu_profile.py``'s ncu summaries, which time every launch of a cell.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrale.bench.cases import FORMATS, rng_for, x_rows
from metrale.bench.measure import Plan, floor_us
from metrale.reference.backend import Backend
from metrale.testing import random_weight

FAMILIES = ("nvfp4", "w8a8", "q2_0")
W8A8_M = (1, 2, 4, 8, 16, 32, 64)
W4A4_M = (1, 2, 3)


@dataclass(frozen=True)
class KernelCase:
    """One timed kernel: label, weight format, projection (gate or down), rows, and the variant
    (``warps`` for the W8A8 tensor-core CTA shapes, ``a4_fast`` False for W4A4 with the fast A4
    kernels off; None / True: the backend's choice)."""

    label: str
    stem: str
    proj: str
    m: int
    op: str
    warps: int | None = None
    a4_fast: bool = True


def cases(families: list[str], cuda: bool) -> list[KernelCase]:
    """The kernel cases of ``families`` (the CTA-shape variants only on CUDA)."""
    out: list[KernelCase] = []
    if "nvfp4" in families:
        out += [KernelCase(f"w4a16_gemv {p}", "nvfp4", p, 1, "w4a16_gemv") for p in ("gate", "down")]
        for p in ("gate", "down"):
            for m in W4A4_M:
                out.append(KernelCase(f"w4a4_quantize + w4a4_gemv_small_m {p}", "nvfp4", p, m, "w4a4"))
                if cuda:
                    label = f"w4a4_quantize + w4a4_gemv_small_m {p} (no fast A4 kernel)"
                    out.append(KernelCase(label, "nvfp4", p, m, "w4a4", a4_fast=False))
    if "w8a8" in families:
        for p in ("gate", "down"):
            for m in W8A8_M:
                out.append(KernelCase(f"w8a8_quantize + w8a8_gemv {p}", "w8a8", p, m, "w8a8"))
                if cuda:
                    out += [
                        KernelCase(f"w8a8_quantize + w8a8_gemv {p} (mma w{w})", "w8a8", p, m, "w8a8", w)
                        for w in (4, 8)
                    ]
                if p == "down":
                    out.append(KernelCase("w8a8_silu_quant_gemv down", "w8a8", p, m, "silu"))
    if "q2_0" in families:
        for p, ms in (("gate", (1, 2, 4, 8)), ("down", (1, 4))):
            out += [KernelCase(f"q2_0_gemv_vec_batchm {p}", "q2_0", p, m, "q2_0_gemv_vec_batchm") for m in ms]
    return out


def launch(b: Backend, case: KernelCase, w: Any, ins: list[Any], out: Any) -> None:
    """Run ``case`` once on backend ``b``: weight ``w``, inputs ``ins`` (x, or gate and up),
    output ``out`` [m, n]."""
    if case.op == "w4a4":
        with _a4_fast(b, case.a4_fast):
            b.launch("w4a4_gemv_small_m", b.launch("w4a4_quantize", ins[0], w.input_scale), w, out)
    elif case.op == "w8a8":
        codes = b.launch("w8a8_quantize", ins[0])
        if case.warps is not None and b.name == "cuda":
            from metrale.cuda.w8a8 import w8a8_gemv

            w8a8_gemv(codes, w, out, warps=case.warps)
        else:
            b.launch("w8a8_gemv", codes, w, out)
    elif case.op == "silu":
        b.launch("w8a8_silu_quant_gemv", ins[0], ins[1], w, out)
    elif case.op == "q2_0_gemv_vec_batchm":
        b.launch(case.op, ins[0], w, out, int(ins[0].shape[0]))
    else:
        b.launch(case.op, ins[0], w, out)


@contextmanager
def _a4_fast(b: Backend, on: bool) -> Iterator[None]:
    """With ``on`` False and ``b`` the CUDA backend: the fast A4 kernels off (metrale/cuda/nvfp4.py
    ``A4_FAST_MAX_ROWS`` = 0) for the block."""
    if on or b.name != "cuda":
        yield
        return
    from metrale.cuda import nvfp4

    keep = nvfp4.A4_FAST_MAX_ROWS
    nvfp4.A4_FAST_MAX_ROWS = 0
    try:
        yield
    finally:
        nvfp4.A4_FAST_MAX_ROWS = keep


def run_case(
    b: Backend,
    ref: Backend,
    case: KernelCase,
    shape: tuple[int, int],
    seed: int,
    clock: Any,
    plan: Plan,
    read_Bps: float,
    copies: int,
) -> dict[str, Any]:
    """Time one case over ``copies`` device weight copies; {"label", "m", "bytes", "us",
    "x_floor", ...} or with "error" (setup failure, or output not exact on rows 0 and m − 1)."""
    hidden, inter = shape
    n, k = (inter, hidden) if case.proj == "gate" else (hidden, inter)
    res: dict[str, Any] = {"label": case.label, "m": case.m}
    try:
        a4_scale = FORMATS["w4a4"].input_scale if case.op == "w4a4" else None
        input_scale = None if a4_scale is None else np.float32(a4_scale)
        host = random_weight(case.stem, rng_for(seed, case.stem, case.proj), n, k, case.proj, input_scale)
        res["bytes"] = int(host.nbytes)
        xs = [x_rows(k, seed, f"{case.proj}-{i}", case.m) for i in range(2 if case.op == "silu" else 1)]
        ends = sorted({0, case.m - 1})
        want = ref.empty_bf16((len(ends), n))
        launch(ref, case, host, [np.ascontiguousarray(x[ends]) for x in xs], want)
        ws = [b.upload(host) for _ in range(copies)]
        ins = [b.rows(x, k, name=case.label) for x in xs]
        out = b.empty_bf16((case.m, n))
        launch(b, case, ws[0], [b.rows(x, k) for x in xs], out)  # fresh inputs (silu writes gate)
        got = b.to_numpy(out)[ends].view(np.uint16)
        bad = int((got != np.asarray(want).view(np.uint16)).sum())
        if bad:
            return {**res, "error": f"NOT EXACT: {bad} outputs of rows {ends} differ from the reference"}

        def body() -> None:
            for w in ws:
                launch(b, case, w, ins, out)

        t = clock.time(body, copies, plan)
        return {**res, **t.js(), "x_floor": round(t.us / floor_us(res["bytes"], read_Bps), 3)}
    except Exception as exc:
        return {**res, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
