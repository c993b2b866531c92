"""Tensor parallel against one device: the same bits, and the time it takes.

Every rank of the ``torch.distributed`` world (its size is the TP size) builds, for each FFN
shape and format, the single-device layer (TP = 1) and its rank's tensor-parallel layer from
the same seeded random weights (``metrale.bench.cases``), runs both at each m through
``route(m)`` and compares the raw output bits; then times both (CUDA events around a loop of
calls after a warm-up, the median over samples) and the all-gathers alone (the byte counts
one call moved, replayed on their own), and writes JSON to ``--out``. Any bit mismatch, any
route or launch-log difference, or TP = 1 bits that differ between the ranks' devices, is
printed and makes the exit status 1 (after the JSON is written).

  torchrun --nproc-per-node 2 tools/tp_check.py --out tp2.json          # 2 GPUs, NCCL
  torchrun --nproc-per-node 2 tools/tp_check.py --shared-gpu --out s.json  # 2 ranks on GPU 0
  python3 tools/tp_check.py --out tp1.json                              # 1 process, TP = 1
  torchrun --nproc-per-node 2 tools/tp_check.py --device cpu --out c.json  # reference, gloo

``--shared-gpu``: every rank on GPU 0 over gloo, device arrays staged through the host (NCCL
refuses two ranks on one GPU): checks the sharded kernels' bits where two GPUs are not lent;
no timings. ``--device cpu``: the reference backend over gloo on a small shape, both splits of
the down projection (``k`` and ``n``); no timings. On GPUs the split is ``n`` (arithmetic.md
§ tp). NVLink multicast is left off (``NCCL_NVLS_ENABLE=0`` unless set).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import socket
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from metrale.reference.formats.spec import FORMAT_ALIASES, FORMAT_NAMES

SHAPES = {"qwen3-8b": (4096, 12288), "70b": (8192, 28672)}
#: The CPU mode's shape: 80 blocks of h (not a power of two), hidden 256.
CPU_SHAPES = {"tiny": (256, 1280)}
GPU_M = (1, 4, 32, 512)
CPU_M = (1, 4, 32, 80)
FORMATS = tuple(FORMAT_NAMES)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="JSON results (written by rank 0)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--shared-gpu", action="store_true", help="every rank on GPU 0 over gloo (bits only)")
    p.add_argument("--shapes", default=None, help="comma list of shape names (default: all of the mode)")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"comma list of {', '.join(FORMATS)}")
    p.add_argument("--m", default=None, help="comma list of row counts (GPU default 1,4,32,512)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--target-ms", type=float, default=5.0, help="GPU time per timing sample")
    p.add_argument("--no-time", action="store_true", help="check bits only")
    a = p.parse_args(argv)
    shapes = SHAPES if a.device == "cuda" else CPU_SHAPES
    a.shape_list = list(shapes) if a.shapes is None else a.shapes.split(",")
    for s in a.shape_list:
        if s not in shapes:
            p.error(f"--shapes: {s!r} unknown for --device {a.device} (known: {', '.join(shapes)})")
    a.shape_dims = shapes
    a.format_list = [FORMAT_ALIASES.get(f, f) for f in a.formats.split(",")]
    for f in a.format_list:
        if f not in FORMATS:
            p.error(f"--formats: {f!r} unknown (known: {', '.join(FORMATS)})")
    default_m = GPU_M if a.device == "cuda" else CPU_M
    a.m_list = list(default_m) if a.m is None else [int(v) for v in a.m.split(",")]
    if a.shared_gpu and a.device != "cuda":
        p.error("--shared-gpu runs on a GPU (--device cuda)")
    a.timed = a.device == "cuda" and not a.shared_gpu and not a.no_time
    return a


def init(a: argparse.Namespace) -> tuple[int, int, Any]:
    """(rank, size, backend) after init_process_group: torchrun's env, or a world of one."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if "RANK" in os.environ:
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        url = "env://"
    else:
        rank, size, local = 0, 1, 0
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    if a.device == "cpu":
        dist.init_process_group("gloo", init_method=url, rank=rank, world_size=size)
        from metrale.reference.kernels import ReferenceBackend

        return rank, size, ReferenceBackend()
    dev = 0 if a.shared_gpu else local
    torch.cuda.set_device(dev)
    import cupy

    cupy.cuda.Device(dev).use()
    if a.shared_gpu:
        dist.init_process_group("gloo", init_method=url, rank=rank, world_size=size)
    else:
        dist.init_process_group(
            "nccl", init_method=url, rank=rank, world_size=size, device_id=torch.device("cuda", dev)
        )
    from metrale.cuda import cuda_backend

    return rank, size, cuda_backend()


class Clock:
    """Median µs per call of ``fn``: CUDA events around ``reps`` calls per sample on torch's
    current stream (every rank agrees on ``reps``; a barrier starts each sample together)."""

    def __init__(self, a: argparse.Namespace, size: int) -> None:
        self.a, self.size = a, size

    def _agree(self, v: int) -> int:
        import torch
        import torch.distributed as dist

        t = torch.tensor([v], dtype=torch.int64, device="cuda")
        if self.size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def us(self, fn: Callable[[], None], together: bool) -> dict[str, float]:
        import torch
        import torch.distributed as dist

        for _ in range(self.a.warmup):
            fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        est = max(e0.elapsed_time(e1), 1e-3)
        reps = max(1, min(1000, int(self.a.target_ms / est)))
        if together:
            reps = self._agree(reps)
        ts = []
        for _ in range(self.a.samples):
            if together and self.size > 1:
                dist.barrier()
            torch.cuda.synchronize()
            e0.record()
            for _ in range(reps):
                fn()
            e1.record()
            e1.synchronize()
            ts.append(1e3 * e0.elapsed_time(e1) / reps)
        return {"us": statistics.median(ts), "min_us": min(ts), "max_us": max(ts), "reps": reps}


def weight_bytes(layer: Any) -> int:
    """Bytes of the weights a layer holds (every slot, the W8A8 arm included)."""
    slots = [layer.weights, layer.bf16_weights, layer.fp8_weights, layer.q2_weights]
    parts = [p for ws in slots if ws is not None for p in ws.all()]
    if layer.w8a8 is not None:
        parts += layer.w8a8.all()
    return int(sum(p.nbytes for p in parts))


def bits_of(layer: Any, ctx: Any, m: int) -> np.ndarray:
    return np.ascontiguousarray(layer.backend.to_numpy(ctx.buffers.output()[:m])).view(np.uint16)


def replay(trace: list[int], size: int) -> Callable[[], None]:
    """The all-gathers of one call (bytes per rank each), on their own."""
    import torch
    import torch.distributed as dist

    bufs = [
        (
            torch.zeros(n, dtype=torch.uint8, device="cuda"),
            torch.empty(size * n, dtype=torch.uint8, device="cuda"),
        )
        for n in trace
    ]

    def run() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the collective TpBackend calls
            for src, dst in bufs:
                dist.all_gather_into_tensor(dst, src)

    return run


def extrapolate_tp8(tp_us: float, coll_us: float, size: int) -> dict[str, float] | None:
    """A TP = 8 estimate from this run (an extrapolation, not a measurement): the non-collective
    time scaled by size/8; the all-gathers by the ring's bandwidth term (p−1)/p (low) or its
    step count p−1 (high), relative to this size."""
    if size < 2:
        return None
    rest = max(tp_us - coll_us, 0.0) * size / 8
    return {
        "low_us": rest + coll_us * (7 / 8) / ((size - 1) / size),
        "high_us": rest + coll_us * 7 / (size - 1),
    }


def check_case(
    a: argparse.Namespace, rank: int, size: int, backend: Any, shape: str, fmt: str
) -> list[dict[str, Any]]:
    from metrale.bench.cases import FORMATS as BENCH_FORMATS
    from metrale.bench.cases import build_host, x_rows
    from metrale.distributed.backend import TP_WITHOUT
    from metrale.reference.context import FfnConfig, ForwardContext
    from metrale.testing import LayerParts

    hidden, inter = a.shape_dims[shape]
    cfg = FfnConfig(hidden, inter)
    parts = LayerParts(cfg).put(BENCH_FORMATS[fmt].stem, build_host(fmt, hidden, inter, a.seed, shape))
    one = parts.layer(backend.without(TP_WITHOUT))  # the TP backend's kernels: the same routes
    splits = ("k", "n") if a.device == "cpu" else ("n",)
    tps = {sp: parts.tp_layer(rank, size, backend=backend, split=sp) for sp in splits}
    x_all = x_rows(hidden, a.seed, shape, max(a.m_list))
    clock = Clock(a, size) if a.timed else None
    out = []
    for m in a.m_list:
        xd = backend.rows(x_all[:m], hidden, "x")
        ctx1 = ForwardContext(cfg, backend=one.backend, max_rows=m)
        entry, run1 = one.route(m)
        one.backend.launches.clear()
        run1(xd, ctx1)
        want = bits_of(one, ctx1, m)
        launches = list(one.backend.launches)
        for sp, tl in tps.items():
            ctxt = ForwardContext(tl.config, backend=tl.backend, max_rows=m)
            entry_t, runt = tl.route(m)
            tl.backend.launches.clear()
            tl.backend.trace = []
            runt(xd, ctxt)
            trace, tl.backend.trace = tl.backend.trace, None
            got = bits_of(tl, ctxt, m)
            r: dict[str, Any] = {
                "shape": shape,
                "hidden": hidden,
                "intermediate": inter,
                "format": fmt,
                "split": sp,
                "m": m,
                "entry": entry,
                "launches": launches,
                "tp1_sha256": hashlib.sha256(want.tobytes()).hexdigest(),
                "weight_bytes": {"tp1": weight_bytes(one), "tp_rank": weight_bytes(tl)},
                "gathered_bytes_per_rank": trace,
                "problems": [],
            }
            if entry_t != entry or tl.backend.launches != launches:
                r["problems"].append(f"route {entry_t} {tl.backend.launches} != {entry} {launches}")
            if got.shape != want.shape or not np.array_equal(got, want):
                idx = np.argwhere(got != want)[0] if got.shape == want.shape else None
                where = (
                    ""
                    if idx is None
                    else f" first at y[{idx[0]}, {idx[1]}]: {got[tuple(idx)]:04x} != {want[tuple(idx)]:04x}"
                )
                r["problems"].append(
                    f"bits differ ({int((got != want).sum()) if idx is not None else 'shape'}){where}"
                )
            if clock is not None:
                import cupy
                import torch

                s = torch.cuda.current_stream()
                with cupy.cuda.ExternalStream(s.cuda_stream):
                    r["tp1"] = clock.us(lambda f=run1, x=xd, c=ctx1: f(x, c), together=False)
                    r["tp"] = clock.us(lambda f=runt, x=xd, c=ctxt: f(x, c), together=True)
                    r["collectives"] = clock.us(replay(trace, size), together=True) if size > 1 else None
                coll = r["collectives"]["us"] if r["collectives"] else 0.0
                r["tp_over_tp1"] = r["tp"]["us"] / r["tp1"]["us"]
                r["collective_share"] = coll / r["tp"]["us"]
                r["tp8_extrapolated"] = extrapolate_tp8(r["tp"]["us"], coll, size)
            out.append(r)
    del one, tps
    if a.device == "cuda":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    return out


def environment(a: argparse.Namespace, size: int) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "world_size": size,
        "mode": "cpu" if a.device == "cpu" else ("shared-gpu" if a.shared_gpu else "gpu"),
        "torch": torch.__version__,
        "METRALE_WEIGHT_QUANT": os.environ.get("METRALE_WEIGHT_QUANT", "w4a4 (default)"),
        "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
        "timing": "CUDA events around a loop of calls, median of samples; collectives replayed alone"
        if a.timed
        else "none",
    }
    if a.device == "cuda":
        import cupy

        env["gpu"] = torch.cuda.get_device_name()
        env["cupy"] = cupy.__version__
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if not a.shared_gpu else None
    return env


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    import torch.distributed as dist

    rank, size, backend = init(a)
    rows: list[dict[str, Any]] = []
    try:
        for shape in a.shape_list:
            for fmt in a.format_list:
                t0 = time.perf_counter()
                got = check_case(a, rank, size, backend, shape, fmt)
                rows += got
                if rank == 0:
                    bad = sum(bool(r["problems"]) for r in got)
                    took = time.perf_counter() - t0
                    print(f"{shape} {fmt}: {len(got)} cases, {bad} with problems ({took:.1f} s)", flush=True)
        every = [None] * size
        dist.all_gather_object(every, rows)
    finally:
        env = environment(a, size) if rank == 0 else None
        dist.destroy_process_group()
    problems = []
    for q, rs in enumerate(every):
        for r0, rq in zip(every[0], rs, strict=True):
            where = f"rank {q} {rq['shape']} {rq['format']} split {rq['split']} m={rq['m']}"
            problems += [f"{where}: {p}" for p in rq["problems"]]
            if rq["tp1_sha256"] != r0["tp1_sha256"]:
                problems.append(f"{where}: TP=1 bits differ from rank 0's device")
    if rank == 0:
        doc = {"environment": env, "results": every[0], "problems": problems}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(doc, indent=1))
        for r in every[0]:
            line = f"{r['shape']:9} {r['format']:12} {r['split']} m={r['m']:<4} {r['entry']:16}"
            if "tp" in r:
                line += f" tp1 {r['tp1']['us']:9.1f} us  tp{size} {r['tp']['us']:9.1f} us"
                line += f"  x{r['tp_over_tp1']:.2f}"
                line += f"  collectives {100 * r['collective_share']:.0f}%"
            print(line)
        print(f"wrote {a.out}")
    if problems:
        print(f"TP CHECK FAILED: {len(problems)} problems", file=sys.stderr)
        for p in problems[:20]:
            print(f"  {p}", file=sys.stderr)
        return 1
    if rank == 0:
        print(f"TP={size}: every output bit equals the single-device layer's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
