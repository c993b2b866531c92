#!/usr/bin/env python3
"""FFN decode benchmark on the CUDA backend, with peers and ceilings measured in the same run.

Shapes: Qwen3-8B's FFN (hidden 4096, intermediate 12288) and Llama-3-8B's (hidden 4096,
intermediate 14336); ``--shape qwen3-8b|llama3-8b|all`` (or ``--hidden/--inter``).

Formats and modes (every one metrale serves), each through the layer's real entry point for m
rows, picked exactly as ``DenseFfnLayer.__call__`` picks it (1 ``forward``, 2 ``forward_k2``,
3 ``forward_k3``, ``forward_km`` up to the narrow edge, else ``forward_prefill``; inside them
the layer's own routing: the W8A8 arm, ``forward_km_q2``, the overlays' ``forward_prefill``):

* ``nvfp4-w4a16`` NVFP4 weights without ``input_scale`` (A16 activations);
* ``nvfp4-w4a4``  NVFP4 weights with ``input_scale``, ``METRALE_WEIGHT_QUANT=w4a4`` (FP4 activations);
* ``w8a8``        int8 per-row weights through the W8A8 arm (``set_w8a8_decode_weights``);
* ``q2_0``        GGUF Q2_0 (packed-Q2 layer);
* ``fp8``         FP8 e4m3 per-row weights (W8A16, the FP8 overlay);
* ``bf16``        BF16 weights (the BF16 overlay).

Weights are built directly from random codes and scales (no quantization of float matrices).

**Exactness first.** For every (shape, format, m) it times, layer 0's CUDA output is compared bit
for bit (``.view(np.uint16)``) with the numpy reference layer's ``__call__`` on the same weights
and rows, and the kernels launched must be the ones the reference's ``__call__`` launched. The
reference runs in a pool of worker processes (forked before CUDA starts) while the GPU times;
a result that is not exact is never reported: its cell reads FAILED and the exit status is 1.

**Peers** (torch on the same GPU, same FFN math: gate, up, silu·mul, down; gate and up as one
[2I, H] weight): bf16 cuBLAS (also with two separate gate/up matmuls), int4 weight-only
tinygemm ``torch._weight_int4pack_mm`` (group 128), int8 ``torch._int_mm`` with per-token int8
quantization of x and h in torch, FP8 ``torch._scaled_mm`` (e4m3, per-row weight scales,
per-token activation scales). A peer the installed torch cannot run reads ``n/a`` with the reason.

**Ceilings**: a 1 GiB device-to-device copy (bytes read + written) and a read-only streaming
kernel (uint4 loads over 2 GiB; also ``torch.sum`` over int32). The memory floor of a format is
its FFN weight bytes / the best read-only bandwidth.

**Timing**: CUDA events around CUDA-graph replays; each graph holds several FFN steps over
several layers with distinct weight copies (together ≥ 4× the L2), so weights come from HBM;
median over ``--samples`` replays; warm-up calls precede the capture. A path whose capture
fails is timed as a Python loop between events and marked ``loop``.

Outputs (``--out DIR``): ``bench_ffn.json`` (all numbers, device, date, command),
``bench_ffn.md`` (tables), ``bench_ffn.png`` (µs against m, per format, with the peers; drawn by
``tools/plot_bench.py`` where matplotlib imports). ``--json`` / ``--md`` name the files directly.
``--dry-run`` exercises everything on the CPU (reference backend standing in for the GPU, tiny
shape, host timers) so a device run cannot die on a Python error.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from metrale.backend import get_backend
from metrale.reference.backend import Backend
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.elements import BF16, E4M3
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, W8a8Weight
from metrale.reference.layer import DenseFfnLayer, FfnWeights
from metrale.reference.w8a8_arm import W8a8Ffn

F32 = np.float32
SHAPES: dict[str, tuple[int, int]] = {"qwen3-8b": (4096, 12288), "llama3-8b": (4096, 14336)}
DRY_SHAPE = ("tiny", (128, 256))
FORMATS: dict[str, str] = {
    "nvfp4-w4a16": "NVFP4 W4A16",
    "nvfp4-w4a4": "NVFP4 W4A4",
    "w8a8": "W8A8",
    "q2_0": "Q2_0",
    "fp8": "FP8 W8A16",
    "bf16": "BF16",
}
PEERS: dict[str, str] = {
    "bf16": "bf16 cuBLAS (gate+up fused)",
    "bf16-2": "bf16 cuBLAS (gate, up separate)",
    "int4": "int4 tinygemm g128",
    "int8": "int8 _int_mm",
    "fp8": "FP8 _scaled_mm",
}
DEFAULT_M = "1,2,3,4,8,16,32,64"
#: the decode-speed targets at the Qwen3-8B shape: (format, max m, max ratio to the floor of ``floor_of``).
TARGETS: list[dict[str, Any]] = [
    {"format": "nvfp4-w4a16", "m_max": 16, "floor_ratio": 1.5, "floor_of": "nvfp4-w4a16"},
    {"format": "nvfp4-w4a16", "m_min": 32, "m_max": 32, "floor_ratio": 2.25, "floor_of": "nvfp4-w4a16"},
    {"format": "nvfp4-w4a16", "m_max": 64, "peer_speedup": 2.0},
    {"format": "nvfp4-w4a4", "m_max": 64, "floor_ratio": 2.0, "floor_of": "nvfp4-w4a16"},
    {"format": "w8a8", "m_max": 32, "floor_ratio": 1.6, "floor_of": "w8a8"},
    {"format": "q2_0", "m_max": 4, "floor_ratio": 1.8, "floor_of": "q2_0"},
]


# ---------------------------------------------------------------- weights (random codes) ----
def _rng(seed: int, *key: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(sum(ord(c) << (i % 24) for i, c in enumerate(k)) for k in key)])


def nvfp4_weight(
    rng: np.random.Generator, n: int, k: int, name: str, input_scale: np.float32 | None = None
) -> Nvfp4Weight:
    """Random NVFP4 weight: uniform nibbles, block scales around 1 (e4m3 codes 0x28..0x47)."""
    return Nvfp4Weight(
        weight=rng.integers(0, 256, (n, k // 2), dtype=np.uint8),
        weight_scale=rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8).view(E4M3),
        weight_scale_2=F32(1.0 / 2688.0),
        input_scale=input_scale,
        name=name,
    )


def _row_scales(rng: np.random.Generator, n: int, lo: float, hi: float) -> np.ndarray:
    return np.exp2(rng.uniform(lo, hi, n)).astype(F32)


def w8a8_weight(rng: np.random.Generator, n: int, k: int, name: str) -> W8a8Weight:
    """Random int8 codes in [-127, 127], per-row scales around 1/2^12."""
    q = rng.integers(-127, 128, (n, k), dtype=np.int8)
    return W8a8Weight(weight=q, weight_scale=_row_scales(rng, n, -13, -11), name=name)


def fp8_weight(rng: np.random.Generator, n: int, k: int, name: str) -> Fp8Weight:
    """Random e4m3 codes (every finite code; the NaN codes 0x7F/0xFF become 0x7E/0xFE)."""
    c = rng.integers(0, 256, (n, k), dtype=np.uint8)
    c[(c & 0x7F) == 0x7F] -= 1
    return Fp8Weight(weight=c.view(E4M3), weight_scale=_row_scales(rng, n, -10, -8), name=name)


def bf16_weight(rng: np.random.Generator, n: int, k: int, name: str) -> DenseWeight:
    """Random bf16 values with exponents 2^-8 .. 2^-1 (blocks span < 2^15: plain 24-bit codes)."""
    bits = rng.integers(0x3B80, 0x3F80, (n, k), dtype=np.uint16)
    bits |= (rng.integers(0, 2, (n, k), dtype=np.uint16) << 15).astype(np.uint16)
    return DenseWeight(weight=bits.view(BF16), name=name)


def q2_0_weight(rng: np.random.Generator, n: int, k: int, name: str) -> Q2_0Weight:
    """Random Q2_0 blocks: uniform 2-bit codes, f16 scales d ~ N(0, 0.02)."""
    blocks = rng.integers(0, 256, (n, k // 64, 18), dtype=np.uint8)
    d = (rng.standard_normal((n, k // 64)) * 0.02).astype(np.float16)
    blocks[..., :2] = d.view(np.uint8).reshape(n, k // 64, 2)
    return Q2_0Weight(blocks=blocks, name=name)


def build_host(fmt: str, hidden: int, inter: int, seed: int, shape: str) -> Any:
    """The host weights of format ``fmt``: FfnWeights, or W8a8Ffn for ``w8a8``."""
    rng = _rng(seed, shape, fmt)
    gu, dn = (inter, hidden), (hidden, inter)
    if fmt in ("nvfp4-w4a16", "nvfp4-w4a4"):
        s = F32(1.0 / 1024.0) if fmt == "nvfp4-w4a4" else None
        return FfnWeights(
            nvfp4_weight(rng, *gu, "gate", s),
            nvfp4_weight(rng, *gu, "up", s),
            nvfp4_weight(rng, *dn, "down", s),
        )
    make = {"w8a8": w8a8_weight, "fp8": fp8_weight, "bf16": bf16_weight, "q2_0": q2_0_weight}[fmt]
    parts = (make(rng, *gu, "gate"), make(rng, *gu, "up"), make(rng, *dn, "down"))
    return W8a8Ffn(*parts) if fmt == "w8a8" else FfnWeights(*parts)


def weight_bytes(host: Any) -> int:
    parts = (host.gate, host.up, host.down) if isinstance(host, W8a8Ffn) else host.all()
    return int(sum(p.nbytes for p in parts))


def make_layer(fmt: str, host: Any, cfg: FfnConfig, backend: Backend) -> DenseFfnLayer:
    """A DenseFfnLayer serving ``fmt`` (weights uploaded, or passed through when on the device)."""
    if fmt == "w8a8":
        layer = DenseFfnLayer(cfg, backend=backend)
        layer.set_w8a8_decode_weights(host, cfg.hidden_size, cfg.intermediate_size)
        return layer
    kw = {"nvfp4-w4a16": "weights", "nvfp4-w4a4": "weights", "q2_0": "q2_weights"}.get(fmt, f"{fmt}_weights")
    return DenseFfnLayer(cfg, backend=backend, **{kw: host})


def device_copy(layer: DenseFfnLayer, fmt: str) -> Any:
    """Layer's weights as a fresh set of device arrays (distinct addresses); host objects stay."""
    from metrale.cuda.weights import DeviceWeight

    def dup(w: Any) -> Any:
        return DeviceWeight(host=w.host, arrays={k: v.copy() for k, v in w.arrays.items()})

    if fmt == "w8a8":
        w = layer.w8a8
        assert w is not None
        return W8a8Ffn(dup(w.gate), dup(w.up), dup(w.down))
    ws = {"q2_0": layer.q2_weights, "fp8": layer.fp8_weights, "bf16": layer.bf16_weights}.get(
        fmt, layer.weights
    )
    assert ws is not None
    return FfnWeights(*(dup(p) for p in ws.all()))


def x_rows(hidden: int, seed: int, shape: str, rows: int = 64) -> np.ndarray:
    """Activation rows ~ N(0, 0.5²) as bf16 [rows, hidden]."""
    rng = _rng(seed, shape, "x")
    return (rng.standard_normal((rows, hidden)) * 0.5).astype(F32).astype(BF16)


# ---------------------------------------------------------------- routing ----
def route(layer: DenseFfnLayer, m: int) -> tuple[str, Callable[[Any, ForwardContext], None]]:
    """The entry point ``DenseFfnLayer.__call__`` takes for m rows (``layer.route``), as
    (name, callable(x, ctx)), without ``__call__``'s host copy (so it can be captured in a
    CUDA graph)."""
    return layer.route(m)


# ---------------------------------------------------------------- reference (worker pool) ----
_REF_CACHE: dict[tuple[str, str], tuple[DenseFfnLayer, ForwardContext]] = {}


def reference_job(job: tuple[str, int, int, str, int, tuple[int, ...]]) -> dict[str, Any]:
    """Reference ``__call__`` outputs (bf16 bits) and launches of one (shape, format) for ``ms``."""
    shape, hidden, inter, fmt, seed, ms = job
    t0 = time.time()
    try:
        key = (shape, fmt)
        if key not in _REF_CACHE:
            _REF_CACHE.clear()
            cfg = FfnConfig(hidden, inter)
            be = get_backend("reference")
            layer = make_layer(fmt, build_host(fmt, hidden, inter, seed, shape), cfg, be)
            _REF_CACHE[key] = (layer, ForwardContext(cfg, backend=be, max_rows=64))
        layer, ctx = _REF_CACHE[key]
        x = x_rows(hidden, seed, shape)
        out = {}
        for m in ms:
            n0 = len(layer.backend.launches)
            with np.errstate(all="ignore"):
                y = layer(x[:m], ctx)
            out[m] = {
                "bits": np.ascontiguousarray(y).view(np.uint16).copy(),
                "launches": layer.backend.launches[n0:],
            }
        return {"job": job, "out": out, "seconds": time.time() - t0}
    except Exception:
        return {"job": job, "error": traceback.format_exc(limit=4), "seconds": time.time() - t0}


def reference_jobs(
    shapes: dict[str, tuple[int, int]], fmts: list[str], ms: list[int], seed: int
) -> list[Any]:
    """Jobs, heaviest first: FP8/BF16 split by m (their reference is ~10x slower), the rest whole."""
    heavy, light = [], []
    for shape, (h, i) in shapes.items():
        for fmt in fmts:
            if fmt in ("fp8", "bf16"):
                groups = [[m for m in ms if m >= 48], [m for m in ms if 24 <= m < 48]]
                groups += [[m for m in ms if 6 <= m < 24], [m for m in ms if m < 6]]
                heavy += [(shape, h, i, fmt, seed, tuple(g)) for g in groups if g]
            else:
                light.append((shape, h, i, fmt, seed, tuple(ms)))
    return heavy + light


# ---------------------------------------------------------------- clocks ----
@dataclass
class Timing:
    us: float
    method: str
    reps: int
    samples: int
    spread: float = 0.0  # (max - min) / median over samples

    def js(self) -> dict[str, Any]:
        return {
            "us": round(self.us, 3),
            "method": self.method,
            "ffn_per_replay": self.reps,
            "samples": self.samples,
            "spread": round(self.spread, 3),
        }


def _summ(ts: list[float], per: int) -> tuple[float, float]:
    med = statistics.median(ts)
    return med / per * 1e3, (max(ts) - min(ts)) / med if med > 0 else 0.0


class HostClock:
    """perf_counter timing (dry run)."""

    def time(self, body: Callable[[], None], ffn_per_call: int, target_ms: float, samples: int) -> Timing:
        body()
        ts = []
        for _ in range(max(2, min(samples, 3))):
            t0 = time.perf_counter()
            body()
            ts.append((time.perf_counter() - t0) * 1e3)
        us, spread = _summ(ts, ffn_per_call)
        return Timing(us, "host", ffn_per_call, len(ts), spread)


class CupyClock:
    """CUDA events around CUDA-graph replays (CuPy stream capture); loop fallback."""

    def __init__(self) -> None:
        import cupy as cp

        self.cp = cp

    def _loop_ms(self, stream: Any, body: Callable[[], None], n: int) -> float:
        cp = self.cp
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(stream)
        for _ in range(n):
            body()
        e1.record(stream)
        e1.synchronize()
        return cp.cuda.get_elapsed_time(e0, e1) / n

    def time(self, body: Callable[[], None], ffn_per_call: int, target_ms: float, samples: int) -> Timing:
        cp = self.cp
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            body()
            body()
            stream.synchronize()
            est = self._loop_ms(stream, body, 2)
            reps = max(math.ceil(16 / ffn_per_call), math.ceil(target_ms / max(est, 1e-3)))
            reps = max(1, min(reps, max(1, 256 // ffn_per_call)))
            try:
                relaxed = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", None)
                stream.begin_capture() if relaxed is None else stream.begin_capture(mode=relaxed)
                try:
                    for _ in range(reps):
                        body()
                finally:
                    graph = stream.end_capture()
                graph.launch(stream)
                stream.synchronize()
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                ts = []
                for _ in range(samples):
                    e0.record(stream)
                    graph.launch(stream)
                    e1.record(stream)
                    e1.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(e0, e1))
                method = "graph"
            except Exception as exc:  # capture unsupported on this path: time the Python loop
                print(f"    graph capture failed ({type(exc).__name__}: {str(exc)[:120]}); loop timing")
                cp.cuda.Device().synchronize()
                stream = cp.cuda.Stream(non_blocking=True)
                with stream:
                    ts = [self._loop_ms(stream, body, reps) * reps for _ in range(samples)]
                method = "loop"
        us, spread = _summ(ts, reps * ffn_per_call)
        return Timing(us, method, reps * ffn_per_call, samples, spread)


class TorchClock:
    """CUDA events around torch CUDA-graph replays; loop fallback."""

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def time(self, body: Callable[[], None], ffn_per_call: int, target_ms: float, samples: int) -> Timing:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            body()
            body()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        body()
        body()
        e1.record()
        e1.synchronize()
        est = e0.elapsed_time(e1) / 2
        reps = max(math.ceil(16 / ffn_per_call), math.ceil(target_ms / max(est, 1e-3)))
        reps = max(1, min(reps, max(1, 256 // ffn_per_call)))
        ts = []
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(reps):
                    body()
            g.replay()
            torch.cuda.synchronize()
            for _ in range(samples):
                e0.record()
                g.replay()
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1))
            method = "graph"
            del g
        except Exception as exc:
            print(f"    torch graph capture failed ({type(exc).__name__}: {str(exc)[:120]}); loop timing")
            torch.cuda.synchronize()
            ts = []
            for _ in range(samples):
                e0.record()
                for _ in range(reps):
                    body()
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1))
            method = "loop"
        us, spread = _summ(ts, reps * ffn_per_call)
        return Timing(us, method, reps * ffn_per_call, samples, spread)


# ---------------------------------------------------------------- ceilings ----
READ_KERNEL = r"""
extern "C" __global__ void read_stream(const uint4* __restrict__ p, unsigned long long n,
                                       unsigned int* __restrict__ out) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int acc = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldg(p + i), b = __ldg(p + i + stride);
        uint4 c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9E3779B9u) out[0] = acc;
}
"""


def ceilings_gpu(samples: int) -> dict[str, Any]:
    """Copy bandwidth (read + write of 1 GiB) and read-only streaming bandwidth (2 GiB) in B/s."""
    import cupy as cp

    res: dict[str, Any] = {}
    nbytes = 1 << 30
    src = cp.empty(nbytes, dtype=cp.uint8)
    src.fill(1)
    dst = cp.empty_like(src)
    stream = cp.cuda.Stream(non_blocking=True)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    with stream:
        for i in range(samples + 3):
            e0.record(stream)
            dst.data.copy_from_device_async(src.data, nbytes, stream)
            e1.record(stream)
            e1.synchronize()
            if i >= 3:
                ts.append(cp.cuda.get_elapsed_time(e0, e1))
    res["copy_Bps"] = 2 * nbytes / (statistics.median(ts) * 1e-3)
    del src, dst
    big = 2 << 30
    buf = cp.empty(big // 4, dtype=cp.uint32)
    buf.fill(7)
    try:
        kern = cp.RawKernel(READ_KERNEL, "read_stream")
        sink = cp.zeros(1, dtype=cp.uint32)
        from metrale.cuda.runtime import sm_count

        sms = sm_count()
        ts = []
        with stream:
            for i in range(samples + 3):
                e0.record(stream)
                kern((sms * 8,), (256,), (buf, np.uint64(big // 16), sink))
                e1.record(stream)
                e1.synchronize()
                if i >= 3:
                    ts.append(cp.cuda.get_elapsed_time(e0, e1))
        res["read_kernel_Bps"] = big / (statistics.median(ts) * 1e-3)
    except Exception as exc:
        res["read_kernel_error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        import torch

        t = torch.from_dlpack(buf.view(cp.int32))
        for _ in range(3):
            t.sum()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(samples):
            a.record()
            t.sum()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        res["read_torch_sum_Bps"] = big / (statistics.median(ts) * 1e-3)
        del t
    except Exception as exc:
        res["read_torch_sum_error"] = f"{type(exc).__name__}: {exc}"[:300]
    del buf
    cp.get_default_memory_pool().free_all_blocks()
    reads = [v for k, v in res.items() if k.startswith("read_") and k.endswith("_Bps")]
    res["read_Bps"] = max(reads) if reads else res["copy_Bps"] / 2
    return res


def ceilings_host(samples: int) -> dict[str, Any]:
    a = np.ones(1 << 24, dtype=np.uint8)
    t0 = time.perf_counter()
    b = a.copy()
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()
    int(b.view(np.uint32).sum())
    dr = time.perf_counter() - t0
    return {"copy_Bps": 2 * a.nbytes / dt, "read_host_sum_Bps": a.nbytes / dr, "read_Bps": a.nbytes / dr}


# ---------------------------------------------------------------- peers (torch) ----
def _peer_layers(nbytes: int, l2: int) -> int:
    return max(2, min(16, math.ceil(4 * l2 / nbytes)))


def build_peer(kind: str, hidden: int, inter: int, ms: list[int], l2: int, device: str) -> dict[str, Any]:
    """Weights of one torch peer over enough layers to exceed the L2; returns
    {"bodies": {m: body}, "note": str, "layers": L} or {"error": reason}."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(1234)
    two_i = 2 * inter
    x = (torch.randn(max(ms), hidden, generator=g, device=dev) * 0.5).to(torch.bfloat16)
    note = ""

    if kind in ("bf16", "bf16-2"):
        nb = 3 * hidden * inter * 2
        L = _peer_layers(nb, l2)
        wgu = [(torch.randn(two_i, hidden, generator=g, device=dev) * 0.02).bfloat16() for _ in range(L)]
        wd = [(torch.randn(hidden, inter, generator=g, device=dev) * 0.02).bfloat16() for _ in range(L)]

        def ffn(i: int, xm: Any) -> Any:
            if kind == "bf16":
                gu = xm @ wgu[i].t()
                gg, uu = gu[:, :inter], gu[:, inter:]
            else:
                gg, uu = xm @ wgu[i][:inter].t(), xm @ wgu[i][inter:].t()
            return (F.silu(gg) * uu) @ wd[i].t()

        pad = dict.fromkeys(ms, 0)
    elif kind == "int4":
        nb = 3 * hidden * inter // 2 + 3 * (hidden * inter // 128) * 4
        L = _peer_layers(nb, l2)

        def pack(n: int, k: int) -> Any:
            u8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g, device=dev)
            try:
                return torch._convert_weight_to_int4pack(u8, 8)
            except Exception as exc1:  # torch < 2.5 wanted int32 [n, k] with values 0..15
                try:
                    i32 = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=g, device=dev)
                    return torch._convert_weight_to_int4pack(i32, 8)
                except Exception:
                    raise exc1 from None

        def sz(n: int, k: int) -> Any:
            s = torch.rand(k // 128, n, 2, generator=g, device=dev) * 0.01
            s[..., 1] = 0.0
            return s.bfloat16()

        try:
            wgu = [(pack(two_i, hidden), sz(two_i, hidden)) for _ in range(L)]
            wd = [(pack(hidden, inter), sz(hidden, inter)) for _ in range(L)]
            torch._weight_int4pack_mm(x[:1], wgu[0][0], 128, wgu[0][1])
        except Exception as exc:
            return {"error": f"n/a: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}

        def ffn(i: int, xm: Any) -> Any:
            gu = torch._weight_int4pack_mm(xm, wgu[i][0], 128, wgu[i][1])
            h = F.silu(gu[:, :inter]) * gu[:, inter:]
            return torch._weight_int4pack_mm(h, wd[i][0], 128, wd[i][1])

        pad = dict.fromkeys(ms, 0)
    elif kind in ("int8", "fp8"):
        nb = 3 * hidden * inter + 4 * (two_i + hidden)
        L = _peer_layers(nb, l2)
        if kind == "int8":

            def wq(n: int, k: int) -> Any:
                return torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g, device=dev)

            def quant(a: Any) -> tuple[Any, Any]:
                s = a.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-8) / 127.0
                return (a.float() / s).round().clamp(-127, 127).to(torch.int8), s

            def mm(q: Any, s: Any, w: Any, sw: Any) -> Any:
                return (torch._int_mm(q, w.t()).float() * s * sw).to(torch.bfloat16)
        else:
            e4m3 = getattr(torch, "float8_e4m3fn", None)
            if e4m3 is None:
                return {"error": "n/a: torch has no float8_e4m3fn"}

            def wq(n: int, k: int) -> Any:
                return (torch.randn(n, k, generator=g, device=dev) * 64).clamp(-448, 448).to(e4m3)

            def quant(a: Any) -> tuple[Any, Any]:
                s = a.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / 448.0
                return (a.float() / s).clamp(-448, 448).to(e4m3), s

            def mm(q: Any, s: Any, w: Any, sw: Any) -> Any:
                return torch._scaled_mm(q, w.t(), scale_a=s, scale_b=sw, out_dtype=torch.bfloat16)

        try:
            wgu = [
                (wq(two_i, hidden), torch.rand(1, two_i, generator=g, device=dev) * 1e-3) for _ in range(L)
            ]
            wd = [
                (wq(hidden, inter), torch.rand(1, hidden, generator=g, device=dev) * 1e-3) for _ in range(L)
            ]
        except Exception as exc:
            return {"error": f"n/a: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        pad = {}
        for m in ms:  # the smallest row count >= m the op accepts (torch pads nothing itself)
            errs = []
            for mp_ in sorted({m, 17 if m <= 16 else m, -(-m // 16) * 16, 32}):
                if mp_ < m:
                    continue
                try:
                    q, s = quant(torch.zeros(mp_, hidden, dtype=torch.bfloat16, device=dev) + 1)
                    mm(q, s, *wgu[0])
                    pad[m] = mp_
                    break
                except Exception as exc:
                    errs.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            if m not in pad:
                return {"error": "n/a: " + errs[0]}

        def ffn(i: int, xm: Any) -> Any:
            q, s = quant(xm)
            gu = mm(q, s, *wgu[i])
            h = F.silu(gu[:, :inter]) * gu[:, inter:]
            q2, s2 = quant(h)
            return mm(q2, s2, *wd[i])

        padded = sorted({pad[m] for m in ms if pad[m] != m})
        if padded:
            note = "rows padded to " + ", ".join(f"{m}→{pad[m]}" for m in ms if pad[m] != m)
        pad = {m: pad[m] - m for m in ms}
    else:
        raise ValueError(kind)

    bodies = {}
    for m in ms:
        xm = torch.zeros(m + pad[m], hidden, dtype=torch.bfloat16, device=dev)
        xm[:m] = x[:m]

        def body(xm: Any = xm) -> None:
            for i in range(L):
                ffn(i, xm)

        bodies[m] = body
    return {"bodies": bodies, "note": note, "layers": L, "weight_bytes": nb}


# ---------------------------------------------------------------- the run ----
@dataclass
class Cell:
    shape: str
    fmt: str
    m: int
    entry: str = ""
    launches: list[str] = field(default_factory=list)
    bits: np.ndarray | None = None
    timing: Timing | None = None
    error: str = ""
    exact: bool | None = None


def gpu_name() -> str:
    from metrale.cuda import runtime

    props = runtime.device_props(runtime.device_id())
    n = props["name"]
    return n.decode() if isinstance(n, bytes) else str(n)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--shape", default="all", help="qwen3-8b | llama3-8b | all (comma-separated)")
    ap.add_argument("--hidden", type=int, help="custom shape (with --inter) instead of --shape")
    ap.add_argument("--inter", type=int)
    ap.add_argument("--m", default=DEFAULT_M, help="row counts, comma-separated")
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: " + ", ".join(FORMATS))
    ap.add_argument(
        "--peers", default=",".join(PEERS), help="comma-separated: " + ", ".join(PEERS) + " (or none)"
    )
    ap.add_argument("--samples", type=int, default=9, help="graph replays per cell (median)")
    ap.add_argument("--target-ms", type=float, default=2.0, help="approximate duration of one graph replay")
    ap.add_argument("--layers", type=int, default=0, help="rotating layers per format (0: enough for 4x L2)")
    ap.add_argument("--workers", type=int, default=0, help="reference worker processes (0: cores - 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--floor", type=float, default=0.60, help="m=1 floor: fraction of copy bandwidth")
    ap.add_argument("--out", help="directory for bench_ffn.json / .md / .png")
    ap.add_argument("--json", help="write the JSON result here")
    ap.add_argument("--md", help="write the Markdown tables here")
    ap.add_argument("--png", help="write the plot here")
    ap.add_argument(
        "--dry-run", action="store_true", help="CPU only: reference backend, tiny shape, host timers"
    )
    ap.add_argument(
        "--profile", action="store_true", help="only launch the m=1 gate and down GEMVs a few times"
    )
    return ap.parse_args(argv)


def profile(args: argparse.Namespace) -> int:
    import cupy as cp

    rng = np.random.default_rng(args.seed)
    cuda = get_backend("cuda")
    h, i = SHAPES["qwen3-8b"]
    for n, k in ((i, h), (h, i)):
        w = cuda.upload(nvfp4_weight(rng, n, k, "w"))
        x = cuda.rows((rng.standard_normal((1, k)) * 0.5).astype(F32).astype(BF16), k)
        out = cuda.empty_bf16((1, n))
        for _ in range(3):
            cuda.launch("w4a16_gemv", x, w, out)
    cp.cuda.Device().synchronize()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        return profile(args)
    t_start = time.time()
    os.environ["METRALE_WEIGHT_QUANT"] = "w4a4"  # the W4A4 mode; weights without input_scale stay A16
    from metrale.reference.tiers import weight_quantization

    weight_quantization.cache_clear()
    ms = sorted({int(v) for v in args.m.split(",") if v.strip()})
    if not ms or ms[0] < 1 or ms[-1] > 64:
        print(f"--m {args.m}: want row counts in 1..64")
        return 2
    fmts = [f for f in args.formats.split(",") if f]
    peers = [p for p in args.peers.split(",") if p and p != "none"]
    bad = [f for f in fmts if f not in FORMATS] + [p for p in peers if p not in PEERS]
    if bad:
        print(f"unknown format/peer {bad}; formats {list(FORMATS)}, peers {list(PEERS)}")
        return 2
    if args.dry_run:
        shapes = dict([DRY_SHAPE])
    elif args.hidden or args.inter:
        if not (args.hidden and args.inter):
            print("--hidden and --inter go together")
            return 2
        shapes = {f"custom-{args.hidden}x{args.inter}": (args.hidden, args.inter)}
    else:
        names = list(SHAPES) if args.shape == "all" else args.shape.split(",")
        if any(n not in SHAPES for n in names):
            print(f"--shape {args.shape}: want one of {', '.join(SHAPES)} or all")
            return 2
        shapes = {n: SHAPES[n] for n in names}

    out_dir = Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": args.json or (out_dir / "bench_ffn.json" if out_dir else None),
        "md": args.md or (out_dir / "bench_ffn.md" if out_dir else None),
        "png": args.png or (out_dir / "bench_ffn.png" if out_dir else None),
    }

    # ---- the reference, in worker processes forked before CUDA starts ----
    jobs = reference_jobs(shapes, fmts, ms, args.seed)
    workers = args.workers or max(1, min(len(jobs), (os.cpu_count() or 2) - 2))
    pool = mp.get_context("fork").Pool(workers)
    pending = [pool.apply_async(reference_job, (j,)) for j in jobs]
    pool.close()
    print(f"reference: {len(jobs)} jobs on {workers} worker processes", flush=True)

    if args.dry_run:
        dev_backend: Backend = get_backend("reference")
        clock: Any = HostClock()
        tclock: Any = HostClock()
        gpu, l2, torch_dev = (
            f"host CPU (dry run, {platform.processor() or platform.machine()})",
            1 << 20,
            "cpu",
        )
        ceil = ceilings_host(args.samples)
    else:
        dev_backend = get_backend("cuda")
        clock = CupyClock()
        tclock = TorchClock()
        import cupy as cp

        gpu = gpu_name()
        l2 = int(cp.cuda.Device().attributes.get("L2CacheSize", 60 << 20))
        torch_dev = "cuda"
        ceil = ceilings_gpu(args.samples)
    print(
        f"{gpu}: copy {ceil['copy_Bps'] / 1e12:.3f} TB/s (read+write), "
        f"read-only {ceil['read_Bps'] / 1e12:.3f} TB/s; L2 {l2 >> 20} MiB; "
        f"{ {k: round(v / 1e12, 3) if isinstance(v, float) else v for k, v in ceil.items()} }",
        flush=True,
    )

    cells: dict[tuple[str, str, int], Cell] = {}
    fmt_info: dict[tuple[str, str], dict[str, Any]] = {}
    peer_rows: dict[tuple[str, str], dict[str, Any]] = {}
    single: list[dict[str, Any]] = []
    for shape, (hidden, inter) in shapes.items():
        cfg = FfnConfig(hidden, inter)
        ctx = ForwardContext(cfg, backend=dev_backend, max_rows=64)
        xh = x_rows(hidden, args.seed, shape)
        x = dev_backend.rows(xh, hidden)
        for fmt in fmts:
            t0 = time.time()
            try:
                host = build_host(fmt, hidden, inter, args.seed, shape)
                wb = weight_bytes(host)
                layer0 = make_layer(fmt, host, cfg, dev_backend)
                nl = args.layers or max(2, min(16, math.ceil(4 * l2 / wb)))
                layers = [layer0]
                for _ in range(nl - 1):
                    if args.dry_run:
                        layers.append(layer0)
                    else:
                        layers.append(make_layer(fmt, device_copy(layer0, fmt), cfg, dev_backend))
                del host
            except Exception:
                err = traceback.format_exc(limit=3)
                print(f"[{shape} {FORMATS[fmt]}] setup failed:\n{err}")
                for m in ms:
                    cells[(shape, fmt, m)] = Cell(shape, fmt, m, error="setup: " + err.splitlines()[-1])
                continue
            fmt_info[(shape, fmt)] = {
                "weight_bytes": wb,
                "layers": nl,
                "floor_us": wb / ceil["read_Bps"] * 1e6,
            }
            print(
                f"[{shape} {FORMATS[fmt]}] {wb / 1e6:.1f} MB/FFN, {nl} layers, setup {time.time() - t0:.1f}s",
                flush=True,
            )
            for m in ms:
                c = cells[(shape, fmt, m)] = Cell(shape, fmt, m)
                try:
                    c.entry, fn = route(layer0, m)
                    n0 = len(dev_backend.launches)
                    fn(x[:m], ctx)
                    c.launches = dev_backend.launches[n0:]
                    c.bits = dev_backend.to_numpy(ctx.buffers.moe_output()[:m]).view(np.uint16).copy()
                    fns = [route(lay, m)[1] for lay in layers]
                    xm = x[:m]

                    def body(fns: list[Any] = fns, xm: Any = xm, ctx: ForwardContext = ctx) -> None:
                        for f in fns:
                            f(xm, ctx)

                    c.timing = clock.time(body, len(layers), args.target_ms, args.samples)
                    del dev_backend.launches[n0:]
                    print(
                        f"  m={m:2d} {c.entry:15s} {c.timing.us:9.2f} us ({c.timing.method}, "
                        f"{wb / (c.timing.us * 1e-6) / 1e12:.2f} TB/s)",
                        flush=True,
                    )
                except Exception:
                    c.error = traceback.format_exc(limit=3).splitlines()[-1]
                    print(f"  m={m} ERROR {c.error}", flush=True)
            if fmt == "nvfp4-w4a16" and shape == next(iter(shapes)) and not single:
                single.extend(single_projections(dev_backend, layers, x, ctx, clock, args, hidden))
            del layers, layer0
            if not args.dry_run:
                import cupy as cp

                cp.get_default_memory_pool().free_all_blocks()
        for kind in peers:
            t0 = time.time()
            try:
                pb = build_peer(kind, hidden, inter, ms, l2, torch_dev)
            except Exception as exc:
                first = str(exc).splitlines()[0][:200] if str(exc) else ""
                pb = {"error": f"n/a: {type(exc).__name__}: {first}"}
            row: dict[str, Any] = {"label": PEERS[kind], "note": pb.get("note", ""), "times": {}}
            if "error" in pb:
                row["error"] = pb["error"]
                print(f"[{shape} peer {PEERS[kind]}] {pb['error']}", flush=True)
            else:
                row["layers"] = pb["layers"]
                for m in ms:
                    try:
                        t = tclock.time(pb["bodies"][m], pb["layers"], args.target_ms, args.samples)
                        row["times"][m] = t.js()
                    except Exception as exc:
                        row["times"][m] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
                us = {m: v.get("us") for m, v in row["times"].items()}
                print(
                    f"[{shape} peer {PEERS[kind]}] {us} {row['note']} ({time.time() - t0:.1f}s)", flush=True
                )
            peer_rows[(shape, kind)] = row
            del pb
            if not args.dry_run:
                import torch

                torch.cuda.empty_cache()

    # ---- exactness verdicts ----
    t0 = time.time()
    ref_errors = []
    for p in pending:
        r = p.get()
        shape, _, _, fmt, _, jms = r["job"]
        for m in jms:
            c = cells.get((shape, fmt, m))
            if c is None:
                continue
            if "error" in r:
                c.exact = False
                c.error = c.error or "reference failed: " + r["error"].strip().splitlines()[-1]
                continue
            want = r["out"][m]
            if c.bits is None:
                c.exact = False
                continue
            nbad = int((c.bits != want["bits"]).sum()) if c.bits.shape == want["bits"].shape else c.bits.size
            if nbad:
                c.error = f"NOT EXACT: {nbad} of {c.bits.size} outputs differ from the reference"
            elif c.launches != want["launches"]:
                c.error = f"route differs from __call__: {c.launches} vs {want['launches']}"
            c.exact = not c.error
        if "error" in r:
            ref_errors.append(r["error"])
    pool.join()
    print(f"reference results collected (waited {time.time() - t0:.1f}s after the timings)", flush=True)

    out = assemble(args, shapes, fmts, peers, ms, gpu, l2, ceil, cells, fmt_info, peer_rows, single, t_start)
    md = markdown(out)
    failed = [f"{c.shape} {FORMATS[c.fmt]} m={c.m}: {c.error}" for c in cells.values() if not c.exact]
    out["failed"] = failed
    print(md)
    if paths["json"]:
        Path(paths["json"]).write_text(json.dumps(out, indent=1))
    if paths["md"]:
        Path(paths["md"]).write_text(md + "\n")
    if paths["png"]:
        try:
            plot = _plot_module()
            plot.render(out, Path(paths["png"]))
            print(f"plot: {paths['png']}")
        except Exception as exc:
            print(f"no plot here ({type(exc).__name__}: {exc}); run tools/plot_bench.py on the JSON")
    if failed:
        print(f"FAILED ({len(failed)} cells not reported):\n  " + "\n  ".join(failed[:40]))
        return 1
    print(f"every timed result bit-exact ({len(cells)} cells); total {time.time() - t_start:.0f}s")
    return 0


def single_projections(
    b: Backend, layers: list[DenseFfnLayer], x: Any, ctx: ForwardContext, clock: Any, args: Any, hidden: int
) -> list[dict[str, Any]]:
    """The m = 1 gate and down ``w4a16_gemv`` alone, weights rotating over the layers."""
    res = []
    for nm, pick in (
        ("gate", lambda lay: lay.weights.gate_proj),
        ("down", lambda lay: lay.weights.down_proj),
    ):
        try:
            outs = [b.empty_bf16((1, pick(lay).n)) for lay in layers]
            srcs = [x[:1] if pick(lay).k == hidden else ctx.buffers.expert_gate_out()[:1] for lay in layers]

            def body(pick: Any = pick, outs: Any = outs, srcs: Any = srcs) -> None:
                for lay, o, s in zip(layers, outs, srcs, strict=True):
                    b.launch("w4a16_gemv", s, pick(lay), o)

            t = clock.time(body, len(layers), args.target_ms, args.samples)
            w = pick(layers[0])
            res.append({"projection": f"{nm} {w.n}x{w.k}", "bytes": w.nbytes, **t.js()})
        except Exception as exc:
            res.append({"projection": nm, "error": f"{type(exc).__name__}: {exc}"[:200]})
    return res


def _plot_module() -> Any:
    path = Path(__file__).resolve().parent / "plot_bench.py"
    spec = importlib.util.spec_from_file_location("metrale_plot_bench", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- report ----
def assemble(
    args: Any,
    shapes: dict[str, tuple[int, int]],
    fmts: list[str],
    peers: list[str],
    ms: list[int],
    gpu: str,
    l2: int,
    ceil: dict[str, Any],
    cells: dict[tuple[str, str, int], Cell],
    fmt_info: dict[Any, Any],
    peer_rows: dict[Any, Any],
    single: list[dict[str, Any]],
    t_start: float,
) -> dict[str, Any]:
    """The JSON document: every number, device, date, command; verdicts on the decode-speed targets."""
    read_bw, copy_bw = ceil["read_Bps"], ceil["copy_Bps"]
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": gpu,
        "host": platform.node(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "",
        "dry_run": bool(args.dry_run),
        "software": _versions(),
        "l2_bytes": l2,
        "ceilings": {
            (k[:-4] + "_GBps" if k.endswith("_Bps") else k): (round(v / 1e9, 1) if k.endswith("_Bps") else v)
            for k, v in ceil.items()
        },
        "ceilings_note": "GB/s; copy counts bytes read + written; read_* are read-only streams",
        "timing": {
            "samples": args.samples,
            "target_ms": args.target_ms,
            "method": "CUDA events around CUDA-graph "
            "replays, median; us per FFN = replay time / FFN steps in the graph",
        },
        "shapes": {},
        "single_projection_m1": single,
    }
    for shape, (hidden, inter) in shapes.items():
        sd: dict[str, Any] = {"hidden": hidden, "intermediate": inter, "formats": {}, "peers": {}}
        fastest: dict[int, float] = {}
        for kind in peers:
            row = peer_rows.get((shape, kind))
            if row is None:
                continue
            sd["peers"][kind] = row
            for m, t in row["times"].items():
                if t.get("us"):
                    fastest[m] = min(fastest.get(m, math.inf), t["us"])
        sd["fastest_peer_us"] = fastest
        for fmt in fmts:
            info = fmt_info.get((shape, fmt), {})
            fd: dict[str, Any] = {"label": FORMATS[fmt], **info, "rows": {}}
            floor = info.get("floor_us")
            for m in ms:
                c = cells.get((shape, fmt, m))
                if c is None:
                    continue
                r: dict[str, Any] = {"entry": c.entry, "launches": c.launches, "exact": bool(c.exact)}
                if c.exact and c.timing is not None:
                    us = c.timing.us
                    r.update(c.timing.js())
                    r["weight_TBps"] = round(info["weight_bytes"] / (us * 1e-6) / 1e12, 3)
                    r["of_read_bw"] = round(info["weight_bytes"] / (us * 1e-6) / read_bw, 3)
                    r["of_copy_bw"] = round(info["weight_bytes"] / (us * 1e-6) / copy_bw, 3)
                    r["x_floor"] = round(us / floor, 3) if floor else None
                    if m in fastest:
                        r["speedup_vs_fastest_peer"] = round(fastest[m] / us, 3)
                else:
                    r["status"] = "FAILED"
                    r["error"] = c.error or "not exact"
                fd["rows"][m] = r
            sd["formats"][fmt] = fd
        res["shapes"][shape] = sd
    res["targets"] = evaluate_targets(res)
    q = next(iter(res["shapes"].values()), None)
    if q and "nvfp4-w4a16" in q["formats"]:
        r1 = q["formats"]["nvfp4-w4a16"]["rows"].get(1, {})
        res["issue3_floor"] = {
            "fraction_of_copy_bw": args.floor,
            "m1_of_copy_bw": r1.get("of_copy_bw"),
            "met": None if r1.get("of_copy_bw") is None else r1["of_copy_bw"] >= args.floor,
        }
    res["seconds"] = round(time.time() - t_start, 1)
    return res


def evaluate_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    sd = res["shapes"].get("qwen3-8b")
    if sd is None:
        return []
    out = []
    for t in TARGETS:
        fd = sd["formats"].get(t["format"])
        if fd is None:
            continue
        rows = {m: r for m, r in fd["rows"].items() if t.get("m_min", 1) <= m <= t["m_max"]}
        if not rows:
            continue
        worst, met, figures = None, True, {}
        for m, r in rows.items():
            if "us" not in r:
                met, figures[m] = False, "FAILED"
                continue
            if "floor_ratio" in t:
                floor = sd["formats"].get(t["floor_of"], {}).get("floor_us")
                v = r["us"] / floor if floor else math.inf
                ok = v <= t["floor_ratio"]
            else:
                v = r.get("speedup_vs_fastest_peer", 0.0)
                ok = v >= t["peer_speedup"]
            figures[m] = round(v, 2)
            met &= ok
            worst = v if worst is None else (max(worst, v) if "floor_ratio" in t else min(worst, v))
        what = (
            f"≤ {t['floor_ratio']}× the {FORMATS[t['floor_of']]} floor"
            if "floor_ratio" in t
            else f"≥ {t['peer_speedup']}× faster than the fastest peer"
        )
        span = f"m = {min(rows)}" if min(rows) == max(rows) else f"m = {min(rows)}..{max(rows)}"
        out.append(
            {
                "format": t["format"],
                "target": f"{FORMATS[t['format']]}: {what}, {span}",
                "met": met,
                "per_m": figures,
                "worst": None if worst is None else round(worst, 2),
            }
        )
    return out


def _versions() -> dict[str, str]:
    v = {"python": sys.version.split()[0], "numpy": np.__version__}
    for mod in ("cupy", "torch"):
        m = sys.modules.get(mod)
        if m is not None:
            v[mod] = getattr(m, "__version__", "?")
    return v


def markdown(res: dict[str, Any]) -> str:
    """Per shape: µs per FFN (formats and peers against m), × floor, speed-up against the fastest peer."""
    c = res["ceilings"]
    lines = [
        f"GPU: {res['gpu']}; date {res['date']}; command `{res['command']}`",
        "",
        f"Ceilings in the same run: copy {c['copy_GBps'] / 1e3:.2f} TB/s "
        "(1 GiB device-to-device, read + write); "
        f"read-only streaming {c['read_GBps'] / 1e3:.2f} TB/s ("
        + "; ".join(
            f"{what} {c[k] / 1e3:.2f} TB/s"
            for k, what in (
                ("read_kernel_GBps", "uint4-load kernel over 2 GiB"),
                ("read_torch_sum_GBps", "torch.sum over int32"),
                ("read_host_sum_GBps", "numpy sum"),
            )
            if k in c
        )
        + "). Floor = FFN weight bytes / read-only streaming bandwidth.",
    ]
    for shape, sd in res["shapes"].items():
        ms = sorted(
            {m for fd in sd["formats"].values() for m in fd["rows"]}
            | {m for p in sd["peers"].values() for m in p["times"]}
        )
        head = "| | " + " | ".join(f"m={m}" for m in ms) + " |"
        sep = "| --- | " + " | ".join("---:" for _ in ms) + " |"
        lines += [
            "",
            f"### {shape}: hidden {sd['hidden']}, intermediate {sd['intermediate']}",
            "",
            "µs per FFN (gate + up + silu·mul + down), median; every metrale figure bit-exact against the "
            "reference (FAILED = not exact, not reported); † = timed as a Python loop (graph capture failed)",
            "",
            head,
            sep,
        ]
        for fd in sd["formats"].values():
            cells = []
            for m in ms:
                r = fd["rows"].get(m)
                cells.append(
                    ""
                    if r is None
                    else (
                        "FAILED"
                        if "us" not in r
                        else f"{r['us']:.1f}" + ("†" if r.get("method") == "loop" else "")
                    )
                )
            lines.append(
                f"| {fd['label']} ({fd.get('weight_bytes', 0) / 1e6:.1f} MB, floor "
                f"{fd.get('floor_us', 0):.1f}) | " + " | ".join(cells) + " |"
            )
        for p in sd["peers"].values():
            if "error" in p:
                lines.append(f"| peer: {p['label']} | " + " | ".join("n/a" for _ in ms) + " |")
                continue
            cells = []
            for m in ms:
                t = p["times"].get(m, {})
                cells.append(
                    f"{t['us']:.1f}" + ("†" if t.get("method") == "loop" else "") if "us" in t else "n/a"
                )
            lines.append(f"| peer: {p['label']} | " + " | ".join(cells) + " |")
        notes = [f"{p['label']}: {p['error']}" for p in sd["peers"].values() if "error" in p]
        notes += [f"{p['label']}: {p['note']}" for p in sd["peers"].values() if p.get("note")]
        if notes:
            lines += ["", "Peer notes: " + "; ".join(notes) + "."]
        lines += [
            "",
            "Ratio to the format's memory floor (× floor) / speed-up against the fastest peer at that m "
            "(fastest peer µs / metrale µs):",
            "",
            head,
            sep,
        ]
        for fd in sd["formats"].values():
            cells = []
            for m in ms:
                r = fd["rows"].get(m)
                if r is None or "us" not in r:
                    cells.append("" if r is None else "FAILED")
                else:
                    sp = r.get("speedup_vs_fastest_peer")
                    cells.append(f"{r['x_floor']:.2f} / {sp:.2f}" if sp else f"{r['x_floor']:.2f} / –")
            lines.append(f"| {fd['label']} | " + " | ".join(cells) + " |")
        fp = sd.get("fastest_peer_us", {})
        lines.append(
            "| fastest peer µs | " + " | ".join(f"{fp[m]:.1f}" if m in fp else "–" for m in ms) + " |"
        )
    if res.get("targets"):
        lines += [
            "",
            "Decode-speed targets (Qwen3-8B):",
            "",
            "| target | met | worst | per m |",
            "| --- | --- | ---: | --- |",
        ]
        for t in res["targets"]:
            per = ", ".join(f"{m}: {v}" for m, v in t["per_m"].items())
            lines.append(f"| {t['target']} | {'yes' if t['met'] else 'no'} | {t['worst']} | {per} |")
    if res.get("single_projection_m1"):
        lines += [
            "",
            "NVFP4 `w4a16_gemv` alone at m = 1: "
            + "; ".join(
                f"{s['projection']} {s['us']:.1f} µs ({s['bytes'] / (s['us'] * 1e-6) / 1e12:.2f} TB/s)"
                if "us" in s
                else f"{s['projection']}: {s.get('error')}"
                for s in res["single_projection_m1"]
            ),
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
