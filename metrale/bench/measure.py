"""How the benchmark measures: clocks (CUDA events around CUDA-graph replays, on CuPy and
torch streams; host timers for the dry run), the L2 policy (rotating weight copies) and the
bandwidth ceilings that give each format its memory floor.

Times are milliseconds per replay from the clocks and µs per FFN in ``Timing``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Most FFN steps captured in one graph.
MAX_STEPS = 256
#: Fewest FFN steps per replay where one step is short (amortizes the replay's launch).
MIN_STEPS = 16


@dataclass(frozen=True)
class Plan:
    """How long to time a cell: ``target_ms`` per replay, ``samples`` replays (median), at
    most ``budget_s`` seconds of replays (never fewer than 3 samples)."""

    target_ms: float = 2.0
    samples: int = 9
    budget_s: float = 20.0


@dataclass
class Timing:
    """One cell's time: µs per FFN (median over samples), how it was taken, the FFN steps per
    replay, the samples and their spread (max − min) / median."""

    us: float
    method: str
    reps: int
    samples: int
    spread: float = 0.0

    def js(self) -> dict[str, Any]:
        return {
            "us": round(self.us, 3),
            "method": self.method,
            "ffn_per_replay": self.reps,
            "samples": self.samples,
            "spread": round(self.spread, 3),
        }


def plan_reps(est_ms: float, ffn_per_call: int, target_ms: float) -> int:
    """Body calls per replay: enough for ``target_ms`` (and ``MIN_STEPS`` FFN steps when a call
    is shorter than the target), at most ``MAX_STEPS`` steps, at least one call."""
    reps = math.ceil(target_ms / max(est_ms, 1e-3))
    if est_ms < target_ms:
        reps = max(reps, math.ceil(MIN_STEPS / ffn_per_call))
    return max(1, min(reps, MAX_STEPS // ffn_per_call))


def plan_samples(replay_ms: float, plan: Plan) -> int:
    """Replays to time: ``plan.samples``, fewer when they would exceed ``plan.budget_s``, never
    fewer than 3."""
    fit = int(plan.budget_s * 1e3 / max(replay_ms, 1e-6))
    return max(3, min(plan.samples, fit))


def summarize(ts_ms: list[float], ffn_per_replay: int) -> tuple[float, float]:
    """(µs per FFN of the median replay, spread (max − min) / median) of replay times in ms."""
    med = statistics.median(ts_ms)
    return med / ffn_per_replay * 1e3, (max(ts_ms) - min(ts_ms)) / med if med > 0 else 0.0


def rotation(weight_bytes: int, l2_bytes: int, m: int, full_max: int) -> int:
    """Layers with distinct weight copies a graph cycles through. Decode and verify sizes
    (m ≤ ``full_max``) stream their weights once per step: enough copies to exceed 4× the L2
    (2 to 16), so weights come from HBM. Prefill steps read their weights many times over
    (compute-bound; a step's first pass is ≤ 1 % of it), so two copies alternate."""
    if m > full_max:
        return 2
    return max(2, min(16, math.ceil(4 * l2_bytes / max(weight_bytes, 1))))


def floor_us(weight_bytes: int, read_Bps: float) -> float:
    """Memory floor of an FFN: its weight bytes at the read-only streaming bandwidth, in µs."""
    return weight_bytes / read_Bps * 1e6


class HostClock:
    """perf_counter timing (the dry run, on the reference backend)."""

    def time(self, body: Callable[[], None], ffn_per_call: int, plan: Plan) -> Timing:
        body()
        ts = []
        for _ in range(max(2, min(plan.samples, 3))):
            t0 = time.perf_counter()
            body()
            ts.append((time.perf_counter() - t0) * 1e3)
        us, spread = summarize(ts, ffn_per_call)
        return Timing(us, "host", ffn_per_call, len(ts), spread)


class CupyClock:
    """CUDA events around CUDA-graph replays (CuPy stream capture); a Python loop between
    events where capture fails (method ``loop``)."""

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

    def time(self, body: Callable[[], None], ffn_per_call: int, plan: Plan) -> Timing:
        cp = self.cp
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            body()
            stream.synchronize()
            est = self._loop_ms(stream, body, 1)
            reps = plan_reps(est, ffn_per_call, plan.target_ms)
            samples = plan_samples(est * reps, plan)
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
                ts = [self._loop_ms(stream, lambda: graph.launch(stream), 1) for _ in range(samples)]
                method = "graph"
            except Exception as exc:  # capture unsupported on this path: time the Python loop
                print(f"    graph capture failed ({type(exc).__name__}: {str(exc)[:120]}); loop timing")
                cp.cuda.Device().synchronize()
                stream = cp.cuda.Stream(non_blocking=True)
                with stream:
                    ts = [self._loop_ms(stream, body, reps) * reps for _ in range(samples)]
                method = "loop"
        us, spread = summarize(ts, reps * ffn_per_call)
        return Timing(us, method, reps * ffn_per_call, samples, spread)


def torch_loop_ms(torch: Any, body: Callable[[], None], n: int) -> float:
    """Milliseconds per call of ``body`` over ``n`` calls, by CUDA events on torch's stream."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        body()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / n


class TorchClock:
    """CUDA events around torch CUDA-graph replays; a Python loop where capture fails."""

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def _loop_ms(self, body: Callable[[], None], n: int) -> float:
        return torch_loop_ms(self.torch, body, n)

    def time(self, body: Callable[[], None], ffn_per_call: int, plan: Plan) -> Timing:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture wants
            body()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        est = self._loop_ms(body, 1)
        reps = plan_reps(est, ffn_per_call, plan.target_ms)
        samples = plan_samples(est * reps, plan)
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(reps):
                    body()
            g.replay()
            torch.cuda.synchronize()
            ts = [self._loop_ms(g.replay, 1) for _ in range(samples)]
            method = "graph"
            del g
        except Exception as exc:
            print(f"    torch graph capture failed ({type(exc).__name__}: {str(exc)[:120]}); loop timing")
            torch.cuda.synchronize()
            ts = [self._loop_ms(body, reps) * reps for _ in range(samples)]
            method = "loop"
        us, spread = summarize(ts, reps * ffn_per_call)
        return Timing(us, method, reps * ffn_per_call, samples, spread)


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


def _event_ms(cp: Any, stream: Any, launch: Callable[[], None], samples: int) -> float:
    """Median ms of ``launch`` between events, after 3 unrecorded calls."""
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    with stream:
        for i in range(samples + 3):
            e0.record(stream)
            launch()
            e1.record(stream)
            e1.synchronize()
            if i >= 3:
                ts.append(cp.cuda.get_elapsed_time(e0, e1))
    return statistics.median(ts)


def _copy_Bps(cp: Any, stream: Any, samples: int) -> float:
    """Device-to-device copy of 1 GiB, bytes read + written per second."""
    nbytes = 1 << 30
    src = cp.empty(nbytes, dtype=cp.uint8)
    src.fill(1)
    dst = cp.empty_like(src)
    ms = _event_ms(cp, stream, lambda: dst.data.copy_from_device_async(src.data, nbytes, stream), samples)
    return 2 * nbytes / (ms * 1e-3)


def _read_kernel_Bps(cp: Any, stream: Any, buf: Any, samples: int) -> float:
    """``READ_KERNEL`` over ``buf``, bytes read per second."""
    from metrale.cuda.runtime import sm_count

    kern = cp.RawKernel(READ_KERNEL, "read_stream")
    sink = cp.zeros(1, dtype=cp.uint32)
    grid, n = (sm_count() * 8,), np.uint64(buf.nbytes // 16)
    ms = _event_ms(cp, stream, lambda: kern(grid, (256,), (buf, n, sink)), samples)
    return buf.nbytes / (ms * 1e-3)


def ceilings_gpu(samples: int) -> dict[str, Any]:
    """Bandwidths in B/s: ``copy_Bps`` (1 GiB device-to-device, read + write counted),
    ``read_kernel_Bps`` (uint4 loads over 2 GiB), ``read_torch_sum_Bps`` (torch.sum over the
    same 2 GiB as int32) and ``read_Bps``, the best read-only figure (the floors' divisor)."""
    import cupy as cp

    res: dict[str, Any] = {}
    stream = cp.cuda.Stream(non_blocking=True)
    res["copy_Bps"] = _copy_Bps(cp, stream, samples)
    big = 2 << 30
    buf = cp.empty(big // 4, dtype=cp.uint32)
    buf.fill(7)
    try:
        res["read_kernel_Bps"] = _read_kernel_Bps(cp, stream, buf, samples)
    except Exception as exc:
        res["read_kernel_error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        import torch

        t = torch.from_dlpack(buf.view(cp.int32))
        for _ in range(3):
            t.sum()
        torch.cuda.synchronize()
        ts = [torch_loop_ms(torch, t.sum, 1) for _ in range(samples)]
        res["read_torch_sum_Bps"] = big / (statistics.median(ts) * 1e-3)
        del t
    except Exception as exc:
        res["read_torch_sum_error"] = f"{type(exc).__name__}: {exc}"[:300]
    del buf
    cp.get_default_memory_pool().free_all_blocks()
    return {**res, "read_Bps": best_read(res)}


def best_read(res: dict[str, Any]) -> float:
    """The fastest ``read_*_Bps`` figure; half the copy bandwidth when no read figure exists."""
    reads = [v for k, v in res.items() if k.startswith("read_") and k.endswith("_Bps")]
    return max(reads) if reads else res["copy_Bps"] / 2


def ceilings_host() -> dict[str, Any]:
    """The dry run's stand-in ceilings: numpy copy and sum of 16 MiB (B/s)."""
    a = np.ones(1 << 24, dtype=np.uint8)
    t0 = time.perf_counter()
    b = a.copy()
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()
    int(b.view(np.uint32).sum())
    dr = time.perf_counter() - t0
    res = {"copy_Bps": 2 * a.nbytes / dt, "read_host_sum_Bps": a.nbytes / dr}
    return {**res, "read_Bps": best_read(res)}
