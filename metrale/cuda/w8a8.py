"""W8A8 launchers (kernels in ``kernels/w8a8.cu``; CONTRACT §4 A8, §5.5, §6):
``w8a8_quantize`` (vLLM per-token int8), ``w8a8_gemv`` (int32 dp4a over all of K,
y = bf16((f32(S)·s_a)·s_w[n])) and ``w8a8_silu_quant_gemv``, the fused launch of
``dense_ffn_w8a8.rs``: h = bf16(silu[gate]·f32(up)), its per-row quantization and the down
GEMV in ONE kernel launch, with the same bits as the three separate steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrale.cuda.q2 import cdiv, device_out, device_rows, tier, weight_arrays
from metrale.cuda.runtime import device_id, get_kernel, set_dynamic_smem
from metrale.cuda.weights import DeviceWeight, to_device
from metrale.errors import MetraleError
from metrale.reference.formats.w8a8 import MAX_K, W8a8Weight
from metrale.reference.tables import table

CU_FILE = "w8a8.cu"
#: GEMV row tiers (rows per warp) -> columns per warp.
W8A8_TIERS: dict[int, int] = {1: 4, 2: 4, 4: 4, 8: 4, 16: 2, 32: 1}
WARPS = 4
#: The fused kernel: 8 warps x 4 columns per CTA; up to 8 rows of int8 codes in shared memory.
FUSED_COLS = 32
FUSED_ROWS = 8
FUSED_SMEM = 200 * 1024

_tables: dict[int, Any] = {}


@dataclass(frozen=True)
class DeviceA8Codes:
    """A8 codes on the device: ``q`` CuPy int8 [m, K], ``scale`` CuPy f32 [m] (NaN for a row
    holding Inf/NaN)."""

    q: Any
    scale: Any


def upload_w8a8(w: W8a8Weight) -> DeviceWeight:
    """int8 weight [N, K] and f32 weight_scale [N] on the device."""
    return DeviceWeight(
        host=w, arrays={"weight": to_device(w.weight), "weight_scale": to_device(w.weight_scale)}
    )


def silu_table() -> Any:
    """The shipped 65,536-entry SiLU table on the current device (uploaded once)."""
    dev = device_id()
    t = _tables.get(dev)
    if t is None:
        t = _tables[dev] = to_device(np.ascontiguousarray(table("silu"), dtype=np.float32))
    return t


def w8a8_quantize(x: Any) -> DeviceA8Codes:
    """A8 codes of bf16 rows x [m, K] (CONTRACT §4)."""
    import cupy

    from metrale.cuda.backend import as_device_bits

    a = as_device_bits(x, "x")
    if a.ndim != 2 or a.shape[1] % 16 or a.shape[1] == 0:
        raise MetraleError(f"x: shape {tuple(a.shape)}, want 2-D [m, K] with K a multiple of 16")
    m, k = a.shape
    a = device_rows(a, k, m, "x")
    q = cupy.empty((m, k), dtype=cupy.int8)
    s = cupy.empty((m,), dtype=cupy.float32)
    if m:
        get_kernel(CU_FILE, "w8a8_quantize")(
            (m,), (256,), (a, np.int64(a.strides[0] // 2), np.int32(k), q, s)
        )
    return DeviceA8Codes(q=q, scale=s)


def w8a8_gemv(codes: DeviceA8Codes, w: Any, out: Any) -> None:
    """out[:m] = bf16((f32(q_a · q_w) · s_a) · s_w[n]) for the m rows of ``codes``."""
    arr = weight_arrays(w, "w8a8", "w8a8_gemv")
    if not isinstance(codes, DeviceA8Codes):
        raise MetraleError(f"w8a8_gemv: codes are {type(codes).__name__}, want w8a8_quantize's result")
    m, k = codes.q.shape
    if k != w.k:
        raise MetraleError(f"w8a8_gemv: codes have K={k}, {w.name} wants K={w.k}")
    outa, ldo = device_out(out, m, w.n, "out")
    if m == 0:
        return
    r = tier(m, W8A8_TIERS)
    nc = W8A8_TIERS[r]
    get_kernel(CU_FILE, f"w8a8_gemv_r{r}")(
        (cdiv(w.n, WARPS * nc), cdiv(m, r)),
        (32 * WARPS,),
        (
            arr["weight"],
            arr["weight_scale"],
            np.int32(w.n),
            np.int32(k),
            codes.q,
            np.int64(k),
            codes.scale,
            np.int32(m),
            outa,
            np.int64(ldo),
        ),
    )


def w8a8_silu_quant_gemv(gate: Any, up: Any, w: Any, out: Any) -> None:
    """out[:m] = down(quantize_a8(bf16(silu[gate] · f32(up)))) in one launch."""
    arr = weight_arrays(w, "w8a8", "w8a8_silu_quant_gemv")
    k = w.k
    if k > MAX_K:
        raise MetraleError(f"w8a8_silu_quant_gemv: {w.name} has K={k} > {MAX_K}")
    from metrale.cuda.backend import as_device_bits

    g = as_device_bits(gate, "gate")
    if g.ndim != 2:
        raise MetraleError(f"gate: shape {tuple(g.shape)}, want 2-D [m, K]")
    m = g.shape[0]
    g = device_rows(g, k, m, "gate")
    u = device_rows(up, k, m, "up")
    if u.shape[0] != m:
        raise MetraleError(f"act_mul: gate shape {tuple(g.shape)} != up shape {tuple(u.shape)}")
    outa, ldo = device_out(out, m, w.n, "out")
    if m == 0:
        return
    rows = max(1, min(FUSED_ROWS, FUSED_SMEM // k))
    smem = rows * k + 64
    kern = get_kernel(CU_FILE, "w8a8_silu_quant_gemv")
    set_dynamic_smem(kern, smem)
    kern(
        (cdiv(w.n, FUSED_COLS),),
        (256,),
        (
            g,
            np.int64(g.strides[0] // 2),
            u,
            np.int64(u.strides[0] // 2),
            silu_table(),
            arr["weight"],
            arr["weight_scale"],
            np.int32(w.n),
            np.int32(k),
            np.int32(m),
            outa,
            np.int64(ldo),
            np.int32(rows),
        ),
        shared_mem=smem,
    )


_KERNEL_FUNCS = ("w8a8_quantize", "w8a8_silu_quant_gemv", *(f"w8a8_gemv_r{t}" for t in W8A8_TIERS))


def kernels() -> dict[str, Callable[..., Any]]:
    """The W8A8 launchers, when ``w8a8.cu`` built on this device (else none)."""
    if any(get_kernel(CU_FILE, f) is None for f in _KERNEL_FUNCS):
        return {}
    return {
        "w8a8_quantize": w8a8_quantize,
        "w8a8_gemv": w8a8_gemv,
        "w8a8_silu_quant_gemv": w8a8_silu_quant_gemv,
    }


UPLOADERS: dict[str, Callable[[Any], DeviceWeight]] = {"w8a8": upload_w8a8}
