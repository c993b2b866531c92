"""One benchmark run: the reference starts in worker processes; per shape the device times the
torch peers and every (shape, format, m) cell through the layer's own entry point, then the
single kernels; the verdicts come in last and decide what is reported.

Each cell calls the entry ``DenseFfnLayer.route(m)`` picks (1 ``forward``, 2 ``forward_k2``,
3 ``forward_k3``, ``forward_km`` up to the narrow edge, else ``forward_prefill``; inside them
the layer's own routing), without ``__call__``'s host copy so it can be captured in a graph.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import platform
import sys
import time
import traceback
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metrale.bench import gate, report
from metrale.bench import kernels as kern
from metrale.bench.cases import FORMATS, SHAPES, build_host, device_copy, make_layer, x_rows
from metrale.bench.gate import Cell, Verdicts, full_jobs, job_cost, row_jobs, run_job, sample_rows
from metrale.bench.measure import HostClock, ceilings_gpu, ceilings_host, rotation
from metrale.bench.options import Options, parse
from metrale.bench.peers import GEMLITE_BITS, PEERS, build_peer
from metrale.errors import MetraleError
from metrale.reference.backend import Backend
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.testing import ffn_bytes


@dataclass
class Device:
    """Where the cells run: the metrale backend and its clock, torch's device and clock, the
    device name, its L2 size and the ceilings measured at the start."""

    backend: Backend
    clock: Any
    torch_clock: Any
    torch_device: str
    name: str
    l2: int
    ceilings: dict[str, Any]
    dry: bool
    #: time.time() after which no new cell starts (inf: none), and what was left out.
    deadline: float = math.inf
    skipped: list[str] = field(default_factory=list)

    def late(self, what: str) -> bool:
        """Past the deadline: record ``what`` as not measured."""
        if time.time() <= self.deadline:
            return False
        self.skipped.append(what)
        return True

    @classmethod
    def open(cls, opts: Options) -> Device:
        from metrale.backend import get_backend

        if opts.dry_run:
            from metrale.reference.kernels import ReferenceBackend

            name = f"host CPU (dry run, {platform.processor() or platform.machine()})"
            clock = HostClock()
            ref = ReferenceBackend(chain=opts.chain)
            return cls(ref, clock, clock, "cpu", name, 1 << 20, ceilings_host(), True)
        get_backend("cuda")  # BackendUnavailable naming what is missing, before any CuPy import
        import cupy as cp

        from metrale.bench.measure import CupyClock, TorchClock
        from metrale.cuda import runtime, tile

        tile.CHAIN = opts.chain  # the bench decides: its reference is the contract's or the chain's

        props = runtime.device_props(runtime.device_id())
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        l2 = int(cp.cuda.Device().attributes.get("L2CacheSize", 60 << 20))
        ceil = ceilings_gpu(opts.plan.samples)
        return cls(get_backend("cuda"), CupyClock(), TorchClock(), "cuda", name, l2, ceil, False)

    def release(self) -> None:
        """Give cached device memory back between formats."""
        if not self.dry:
            import cupy as cp
            import torch

            cp.get_default_memory_pool().free_all_blocks()
            torch.cuda.empty_cache()


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"


def time_format(
    dev: Device, opts: Options, shape: str, fmt: str, ctx: ForwardContext, x: Any
) -> tuple[dict[str, Any], list[Cell]]:
    """Build one format's layers (copies enough for the L2 policy), run and time every m."""
    cfg = ctx.config
    t0 = time.time()
    try:
        host = build_host(fmt, cfg.hidden_size, cfg.intermediate_size, opts.seed, shape)
        wb = ffn_bytes(host)
        layer0 = make_layer(fmt, host, cfg, dev.backend)
        need = max(rotation(wb, dev.l2, m, opts.full_max) for m in opts.ms)
        copies = [layer0] * need if dev.dry else [layer0]
        while len(copies) < need:
            copies.append(make_layer(fmt, device_copy(layer0, fmt), cfg, dev.backend))
        del host
    except Exception:
        err = traceback.format_exc(limit=3)
        print(f"[{shape} {FORMATS[fmt].label}] setup failed:\n{err}", flush=True)
        return {}, [Cell(shape, fmt, m, error="setup: " + err.strip().splitlines()[-1]) for m in opts.ms]
    print(
        f"[{shape} {FORMATS[fmt].label}] {wb / 1e6:.1f} MB/FFN, {need} copies, setup {time.time() - t0:.1f}s"
    )
    cells = []
    for m in opts.ms:
        if dev.late(f"{shape} {FORMATS[fmt].label} m={m}"):
            continue
        rows = () if m <= opts.full_max else sample_rows(m, opts.sample_rows, opts.seed, shape, fmt)
        c = Cell(shape, fmt, m, rows=rows, layers=rotation(wb, dev.l2, m, opts.full_max))
        cells.append(c)
        try:
            c.entry, fn = layer0.route(m)
            n0 = len(dev.backend.launches)
            fn(x[:m], ctx)
            c.launches = dev.backend.launches[n0:]
            out = dev.backend.to_numpy(ctx.buffers.output()[:m]).view(np.uint16)
            c.bits = (out[list(rows)] if rows else out).copy()
            fns = [lay.route(m)[1] for lay in copies[: c.layers]]
            xm = x[:m]

            def body(fns: list[Any] = fns, xm: Any = xm) -> None:
                for f in fns:
                    f(xm, ctx)

            c.timing = dev.clock.time(body, len(fns), opts.plan)
            del dev.backend.launches[n0:]
            tb = wb / (c.timing.us * 1e-6) / 1e12
            print(
                f"  m={m:5d} {c.entry:15s} {c.timing.us:11.2f} us ({c.timing.method}, {tb:.2f} TB/s)",
                flush=True,
            )
        except Exception:
            c.error = traceback.format_exc(limit=3).strip().splitlines()[-1]
            print(f"  m={m} ERROR {c.error}", flush=True)
    return {"weight_bytes": wb, "layers": need}, cells


def time_peer(dev: Device, opts: Options, shape: str, kind: str) -> dict[str, Any]:
    """One torch peer's times at every m (or its ``error``)."""
    hidden, inter = opts.shapes[shape]
    t0 = time.time()
    try:
        pb = build_peer(kind, hidden, inter, opts.ms, dev.l2, dev.torch_device, opts.full_max)
    except Exception as exc:
        pb = {"error": "n/a: " + _first_line(exc)}
    row: dict[str, Any] = {"label": PEERS[kind], "note": pb.get("note", ""), "times": {}}
    if "error" in pb:
        row["error"] = pb["error"]
        print(f"[{shape} peer {PEERS[kind]}] {pb['error']}", flush=True)
        return row
    row["layers"] = pb["layers"]
    for m in opts.ms:
        if dev.late(f"{shape} peer {PEERS[kind]} m={m}"):
            continue
        try:
            row["times"][m] = dev.torch_clock.time(pb["bodies"][m], pb["layers"][m], opts.plan).js()
        except Exception as exc:
            row["times"][m] = {"error": _first_line(exc)}
    us = {m: v.get("us") for m, v in row["times"].items()}
    print(f"[{shape} peer {PEERS[kind]}] {us} {row['note']} ({time.time() - t0:.1f}s)", flush=True)
    return row


def time_kernels(dev: Device, opts: Options) -> list[dict[str, Any]]:
    """The single-kernel cases of ``opts.kernels`` at the first shape."""
    from metrale.reference.kernels import ReferenceBackend

    if not opts.kernels:
        return []
    shape = next(iter(opts.shapes.values()))
    ref = ReferenceBackend(chain=opts.chain)
    out = []
    for case in kern.cases(opts.kernels, cuda=not dev.dry):
        if dev.late(f"kernel {case.label} m={case.m}"):
            continue
        copies = 1 if dev.dry else 8
        r = kern.run_case(
            dev.backend, ref, case, shape, opts.seed, dev.clock, opts.plan, dev.ceilings["read_Bps"], copies
        )
        print(f"[kernel] {case.label} m={case.m}: {r.get('us', r.get('error'))}", flush=True)
        out.append(r)
    dev.release()
    return out


def start_reference(opts: Options) -> tuple[Any, list[Any]]:
    """The reference jobs in a pool forked before CUDA starts (largest first)."""
    jobs = full_jobs(opts.shapes, opts.formats, opts.ms, opts.seed, opts.full_max)
    jobs += row_jobs(opts.shapes, opts.formats, opts.ms, opts.seed, opts.full_max, opts.sample_rows)
    jobs.sort(key=job_cost, reverse=True)
    workers = opts.workers or max(1, min(len(jobs), (os.cpu_count() or 2) - 2))
    pool = mp.get_context("fork").Pool(workers)
    pending = [pool.apply_async(run_job, (j,)) for j in jobs]
    pool.close()
    print(f"reference: {len(jobs)} jobs on {workers} worker processes", flush=True)
    return pool, pending


#: How long past ``--deadline`` the run waits for the reference.
REFERENCE_GRACE_S = 60.0


def collect(pool: Any, pending: list[Any], until: float) -> Verdicts:
    """The reference results, waiting until ``until`` at most (then the pool is stopped and
    the cells without a result fail)."""
    verdicts = Verdicts()
    try:
        for p in pending:
            verdicts.add(p.get(timeout=None if math.isinf(until) else max(1.0, until - time.time())))
        pool.join()
    except mp.TimeoutError:
        print("reference not finished by the deadline: its cells fail", flush=True)
        pool.terminate()
    return verdicts


def write(doc: dict[str, Any], md: str, opts: Options) -> None:
    """The JSON, Markdown and (where matplotlib imports) PNG outputs that ``opts`` names."""
    for p in (opts.json, opts.md, opts.png):
        if p is not None:
            p.parent.mkdir(parents=True, exist_ok=True)
    if opts.json:
        opts.json.write_text(json.dumps(doc, indent=1))
    if opts.md:
        opts.md.write_text(md + "\n")
    if opts.png:
        try:
            from metrale.bench.plot import render

            render(doc, opts.png)
            print(f"plot: {opts.png}")
        except Exception as exc:
            print(f"no plot here ({_first_line(exc)}); python -m metrale.bench.plot JSON PNG redraws it")


def w4a4_tier() -> AbstractContextManager[None]:
    """``METRALE_WEIGHT_QUANT=w4a4-all`` for the run, the caller's setting back afterwards: the
    tier ``MetraleFfn`` gives its layers (A4 at every row count where the weights declare FP4
    activations, prefill included; weights without ``input_scale`` stay A16)."""
    from metrale.reference.tiers import ALL_ROWS_TIER, weight_quant_env

    return weight_quant_env(ALL_ROWS_TIER)


def run(opts: Options, command: str) -> int:
    """Run the benchmark ``opts`` describes; 0 when every cell is exact, else 1."""
    with w4a4_tier():
        return _run(opts, command)


def _run(opts: Options, command: str) -> int:
    t_start = time.time()
    gate.CHAIN = opts.chain  # before the reference workers fork
    pool, pending = start_reference(opts)
    dev = Device.open(opts)
    if opts.deadline_s:
        dev.deadline = t_start + opts.deadline_s
    c = dev.ceilings
    tb = {k: round(v / 1e12, 3) for k, v in c.items() if k.endswith("_Bps")}
    print(f"{dev.name}: TB/s {tb}; L2 {dev.l2 >> 20} MiB", flush=True)
    cells: dict[tuple[str, str, int], Cell] = {}
    fmt_info: dict[tuple[str, str], dict[str, Any]] = {}
    peer_rows: dict[tuple[str, str], dict[str, Any]] = {}
    # torch peers first (quick, and the targets compare against them); gemlite's last: its Triton
    # kernels compile for minutes per kind, which a --deadline must not take from the formats
    late_peers = [k for k in opts.peers if k in GEMLITE_BITS]
    for shape, (hidden, inter) in opts.shapes.items():
        for kind in (k for k in opts.peers if k not in late_peers):
            peer_rows[(shape, kind)] = time_peer(dev, opts, shape, kind)
            dev.release()
        cfg = FfnConfig(hidden, inter)
        ctx = ForwardContext(cfg, backend=dev.backend, max_rows=max(opts.ms))
        x = dev.backend.rows(x_rows(hidden, opts.seed, shape, max(opts.ms)), hidden)
        for fmt in opts.formats:
            fmt_info[(shape, fmt)], done = time_format(dev, opts, shape, fmt, ctx, x)
            cells.update({(shape, fmt, cell.m): cell for cell in done})
            dev.release()
        del ctx, x
        dev.release()
        for kind in late_peers:
            peer_rows[(shape, kind)] = time_peer(dev, opts, shape, kind)
            dev.release()
    kernel_rows = time_kernels(dev, opts)
    t0 = time.time()
    verdicts = collect(pool, pending, dev.deadline + REFERENCE_GRACE_S)
    print(f"reference results collected (waited {time.time() - t0:.1f}s after the timings)", flush=True)
    for cell in cells.values():
        verdicts.judge(cell)
    meta = {
        "gpu": dev.name,
        "command": command,
        "dry_run": opts.dry_run,
        "revision": "chain" if opts.chain else "contract",
        "l2_bytes": dev.l2,
        "options": {"full_max": opts.full_max, "sample_rows": opts.sample_rows, "seed": opts.seed},
        "timing": {
            "samples": opts.plan.samples,
            "target_ms": opts.plan.target_ms,
            "cell_seconds": opts.plan.budget_s,
            "method": "CUDA events around CUDA-graph replays, median; µs per FFN = replay time / FFN "
            "steps in the graph",
        },
    }
    doc = report.assemble(meta, opts.shapes, dev.ceilings, cells, fmt_info, peer_rows, kernel_rows)
    doc["seconds"] = round(time.time() - t_start, 1)
    doc["skipped"] = dev.skipped
    md = report.markdown(doc)
    print(md)
    write(doc, md, opts)
    if doc["failed"]:
        print(f"FAILED ({len(doc['failed'])} cells not reported):\n  " + "\n  ".join(doc["failed"][:40]))
        return 1
    if dev.skipped:
        print(f"not measured (--deadline): {len(dev.skipped)}: " + "; ".join(dev.skipped[:20]))
    print(f"every timed result bit-exact ({len(cells)} cells); total {time.time() - t_start:.0f}s")
    return 0


def merge(opts: Options) -> int:
    """Write the merge of ``opts.merge``'s documents; 1 when a kept cell failed."""
    try:
        doc = report.merge([report.load(p) for p in opts.merge])
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: --merge: {_first_line(exc)}", file=sys.stderr)
        return 2
    md = report.markdown(doc)
    print(md)
    write(doc, md, opts)
    return 1 if doc["failed"] else 0


def compare(opts: Options) -> int:
    """Print ``opts.compare``'s cells side by side (report.compare); 2 when a file is unreadable."""
    try:
        docs = [report.load(p) for p in opts.compare]
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: --compare: {_first_line(exc)}", file=sys.stderr)
        return 2
    print(report.compare(docs, [p.stem for p in opts.compare]))
    return 0


def profile(opts: Options) -> int:
    """Launch the m = 1 NVFP4 gate and down GEMVs a few times (for a profiler to attach)."""
    import cupy as cp

    from metrale.backend import get_backend
    from metrale.bench.cases import rng_for
    from metrale.testing import random_weight

    cuda = get_backend("cuda")
    h, i = SHAPES["qwen3-8b"]
    rng = rng_for(opts.seed, "profile")
    for n, k in ((i, h), (h, i)):
        w = cuda.upload(random_weight("nvfp4", rng, n, k, "w"))
        x = cuda.rows(x_rows(k, opts.seed, "profile", 1), k)
        out = cuda.empty_bf16((1, n))
        for _ in range(3):
            cuda.launch("w4a16_gemv", x, w, out)
    cp.cuda.Device().synchronize()
    return 0


def main(argv: list[str] | None = None, prog: str = "metrale bench") -> int:
    """Entry of ``metrale bench`` and ``tools/bench_ffn.py``: 0 all exact, 1 a cell not exact,
    2 bad options."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse(args)
    except MetraleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if opts.profile:
        return profile(opts)
    if opts.merge:
        return merge(opts)
    if opts.compare:
        return compare(opts)
    if opts.report is not None:
        return report_page(opts)
    if opts.variants is not None:
        from metrale.bench import variants

        cells = variants.plan(opts.variants, opts.shapes, opts.ms, opts.formats)
        return variants.main(opts.variants, cells, opts.plan, opts.seed, " ".join([prog, *args]), opts.json)
    return run(opts, " ".join([prog, *args]))


def report_page(opts: Options) -> int:
    """Rewrite the generated tables of ``opts.report`` from ``opts.json`` (default the committed
    result); 2 when a file is missing or the page has no markers."""
    src = opts.json or report.REPORT_JSON
    try:
        doc = report.load(src)
        page = opts.report.read_text()
        new = report.regenerate(page, doc, src.as_posix())
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: --report {opts.report} from {src}: {_first_line(exc)}", file=sys.stderr)
        return 2
    if new != page:
        opts.report.write_text(new)
    print(f"{opts.report}: tables from {src} ({'rewritten' if new != page else 'unchanged'})")
    return 0
