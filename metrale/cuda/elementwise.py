"""Launchers of ``kernels/elementwise.cu``: ``act_mul_silu`` / ``act_mul_gelu`` (reading the
shipped 65,536-entry tables, uploaded once per device, or from ``ST_MIN_ROWS`` rows their compact
form in shared memory: ``act_mul_st``) and the LoRA deltas ``lora_shrink`` /
``lora_expand`` (the BF16-weight rule, reference/lora.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from metrale.cuda import configs, pdl, runtime
from metrale.cuda.launch_args import mat
from metrale.cuda.weights import DeviceLora, device_table, upload_lora
from metrale.errors import MetraleError

FILE = "elementwise.cu"
THREADS = 256
MAX_K = 65536

UPLOADERS: dict[str, Callable[[Any], Any]] = {"lora": upload_lora}


def _kernel(name: str) -> Any:
    k = runtime.get_kernel(FILE, name)
    if k is None:
        raise MetraleError(f"{name} kernel missing in this target build")
    return k


#: From this many rows (None: never) act_mul takes ``act_mul_st`` (configs.ACT_MUL_ST_MIN_ROWS).
ST_MIN_ROWS = configs.ACT_MUL_ST_MIN_ROWS


def act_mul_st_grid(m: int, n: int, *arrays: tuple[Any, int]) -> int:
    """CTAs of ``act_mul_st`` for m rows of N = n over ``arrays`` ((array, row stride in
    elements) of gate, up, out), or 0 where it is not routed (ST_MIN_ROWS) or N or a row is not
    16-byte aligned: at most ACT_MUL_ST's CTAs per multiprocessor, each at least
    ACT_MUL_ST_MIN_GROUPS of the m · N / 8 groups."""
    aligned = all(a.data.ptr % 16 == 0 and (m == 1 or ld % 8 == 0) for a, ld in arrays)
    if ST_MIN_ROWS is None or m < ST_MIN_ROWS or n % 8 or not aligned:
        return 0
    minb = configs.ACT_MUL_ST[2]
    return min(minb * runtime.sm_count(), -(-m * (n // 8) // configs.ACT_MUL_ST_MIN_GROUPS))


def _act(name: str) -> Callable[..., None]:
    def kernel(gate: Any, up: Any, out: Any) -> None:
        g, ldg = mat(gate, "gate")
        u, ldu = mat(up, "up")
        o, ldo = mat(out, "act_mul output")
        if g.shape != u.shape or o.shape != g.shape:
            raise MetraleError(
                f"act_mul: gate {tuple(g.shape)}, up {tuple(u.shape)}, out {tuple(o.shape)} differ"
            )
        m, n = g.shape
        if m == 0 or n == 0:
            return
        ctas = act_mul_st_grid(m, n, (g, ldg), (u, ldu), (o, ldo))
        st = runtime.get_kernel(FILE, "act_mul_st") if ctas else None
        if st is not None:
            ctab = device_table(name, compact=True)
            args = (g, np.int64(ldg), u, np.int64(ldu), o, np.int64(ldo), np.int32(m), np.int32(n), ctab)
            pdl.launch(st, (ctas,), (configs.ACT_MUL_ST[0],), (*args, np.int32(ctab.size)), 4 * ctab.size)
            return
        tab = device_table(name)
        pdl.launch(
            _kernel("act_mul"),
            ((n + THREADS - 1) // THREADS, m),
            (THREADS,),
            (g, np.int64(ldg), u, np.int64(ldu), o, np.int64(ldo), np.int32(m), np.int32(n), tab),
        )

    return kernel


def _lora(adapter: Any) -> DeviceLora:
    if not isinstance(adapter, DeviceLora):
        raise MetraleError(
            f"LoRA: want an adapter uploaded with backend.upload, got {type(adapter).__name__}"
        )
    return adapter


def lora_shrink(x: Any, adapter: Any) -> Any:
    """t = to_bf16(x @ Aᵀ): CuPy uint16 [m, r_pad], zero beyond r."""
    import cupy

    ad = _lora(adapter)
    x, ldx = mat(x, "lora input")
    k = int(ad.a.shape[1])
    if x.shape[1] != k:
        raise MetraleError(f"lora input: K={x.shape[1]}, the adapter wants K={k}")
    if k > MAX_K:
        raise MetraleError(f"lora: the CUDA kernels serve K up to {MAX_K} (K={k})")
    m = int(x.shape[0])
    rpad = ad.padded_rank
    t = cupy.empty((m, rpad), dtype=cupy.uint16)
    if m:
        _kernel("lora_shrink")(
            ((rpad + 7) // 8, m),
            (THREADS,),
            (
                x,
                np.int64(ldx),
                np.int32(m),
                np.int32(k),
                ad.a,
                np.int32(ad.rank),
                np.int32(rpad),
                t,
                np.int64(rpad),
            ),
        )
    return t


def lora_expand(t: Any, adapter: Any, out: Any) -> None:
    """out = to_bf16(f32(out) + f32(scale)·root(t @ B_padᵀ)), in place."""
    ad = _lora(adapter)
    t, ldt = mat(t, "lora t")
    o, ldo = mat(out, "lora output")
    rpad = ad.padded_rank
    n = int(ad.b.shape[0])
    if t.shape[1] != rpad:
        raise MetraleError(f"lora t: K={t.shape[1]}, want the padded rank {rpad}")
    if o.shape != (t.shape[0], n):
        raise MetraleError(f"lora output: shape {tuple(o.shape)}, want [{t.shape[0]}, {n}]")
    m = int(t.shape[0])
    if m:
        _kernel("lora_expand")(
            ((n + 7) // 8, m),
            (THREADS,),
            (
                t,
                np.int64(ldt),
                np.int32(m),
                np.int32(rpad),
                ad.b,
                np.int32(n),
                np.float32(ad.scale),
                o,
                np.int64(ldo),
            ),
        )


_LAUNCHERS: dict[str, Callable[..., Any]] = {
    "act_mul_silu": _act("silu"),
    "act_mul_gelu": _act("gelu"),
    "lora_shrink": lora_shrink,
    "lora_expand": lora_expand,
}


def kernels() -> dict[str, Callable[..., Any]]:
    """The elementwise and LoRA kernels, when ``elementwise.cu`` built on this device."""
    if runtime.get_kernel(FILE, "act_mul") is None:
        return {}
    return dict(_LAUNCHERS)
