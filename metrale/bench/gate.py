"""The exactness gate: no time is reported for a result that is not bit-identical to the
numpy reference.

* m ≤ ``full_max`` (64): the reference layer's ``__call__`` on the same weights and rows; every
  output bit must match (``.view(np.uint16)``) and the kernels launched must be the ones the
  reference's ``__call__`` launched.
* m > ``full_max``: ``sample_rows`` picks a few rows (the first, the last, seeded others);
  each must match the reference's one-row result on that row (batch invariance, in the
  arithmetic mode of the call: a call that ran FP4 activations is compared with the one-row
  A4 result, any other with the A16/A8 one). The reference computes each sampled row once
  for all m (row r of the activation pool is the same row for every m).

The reference runs in worker processes (forked before CUDA starts) while the GPU times; a job
is a picklable tuple, its result a dict of bits and launches.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metrale.bench.cases import FORMATS, build_host, make_layer, x_rows
from metrale.bench.measure import Timing
from metrale.reference.context import FfnConfig, ForwardContext

#: Per mode, the weight-quantization tier whose one-row ``forward`` runs it.
MODE_TIER = {"A4": "w4a4", "A16": "w4a16"}
#: Reference rows per one-row job (jobs of several rows share the layer build).
ROWS_PER_JOB = 4


@dataclass
class Cell:
    """One (shape, format, m): its entry point and launches on the device, the output bits it
    produced (all rows for a full check, the sampled rows otherwise), its timing and verdict."""

    shape: str
    fmt: str
    m: int
    entry: str = ""
    launches: list[str] = field(default_factory=list)
    rows: tuple[int, ...] = ()
    bits: np.ndarray | None = None
    timing: Timing | None = None
    layers: int = 0
    error: str = ""
    exact: bool | None = None


def sample_rows(m: int, count: int, seed: int, *key: str) -> tuple[int, ...]:
    """Sorted distinct rows of an m-row call to check: row 0, row m − 1 and up to ``count`` − 2
    others drawn by a generator seeded with ``seed``, m and ``key``."""
    if m < 1 or count < 1:
        raise ValueError(f"sample_rows: m={m}, count={count}, want both >= 1")
    ends = sorted({0, m - 1})[:count]
    inner = m - 2
    extra = max(0, min(count - len(ends), inner))
    rng = np.random.default_rng([seed, m, *(sum(map(ord, k)) for k in key)])
    others = (rng.choice(inner, extra, replace=False) + 1).tolist() if extra else []
    return tuple(sorted({*ends, *others}))


def modes_of(fmt: str) -> tuple[str, ...]:
    """The arithmetic modes a call of bench format ``fmt`` can run in (A4 only where its
    weights declare FP4 activations)."""
    return ("A4", "A16") if FORMATS[fmt].input_scale is not None else ("A16",)


def call_mode(launches: list[str]) -> str:
    """ "A4" when a call launched a W4A4 kernel (FP4 activations), else "A16" (which also
    stands for the fixed modes of the other formats)."""
    return "A4" if any(k.startswith("w4a4") for k in launches) else "A16"


def full_jobs(
    shapes: dict[str, tuple[int, int]], fmts: list[str], ms: list[int], seed: int, full_max: int
) -> list[tuple[Any, ...]]:
    """("full", shape, hidden, inter, fmt, seed, ms) jobs for the m ≤ ``full_max``: FP8/BF16
    split by m (their reference is ~10× slower), the others whole."""
    small = [m for m in ms if m <= full_max]
    jobs: list[tuple[Any, ...]] = []
    if not small:
        return jobs
    for shape, (h, i) in shapes.items():
        for fmt in fmts:
            if FORMATS[fmt].stem in ("fp8", "bf16"):
                bounds = ((48, 1 << 30), (24, 48), (6, 24), (0, 6))
                groups = [tuple(m for m in small if lo <= m < hi) for lo, hi in bounds]
                jobs += [("full", shape, h, i, fmt, seed, g) for g in groups if g]
            else:
                jobs.append(("full", shape, h, i, fmt, seed, tuple(small)))
    return jobs


def row_jobs(
    shapes: dict[str, tuple[int, int]],
    fmts: list[str],
    ms: list[int],
    seed: int,
    full_max: int,
    count: int,
) -> list[tuple[Any, ...]]:
    """("rows", shape, hidden, inter, fmt, seed, mode, rows) jobs: the union over m > ``full_max``
    of the sampled rows, in each mode of the format, ``ROWS_PER_JOB`` rows a job."""
    big = [m for m in ms if m > full_max]
    jobs: list[tuple[Any, ...]] = []
    for shape, (h, i) in shapes.items():
        for fmt in fmts:
            need = sorted({r for m in big for r in sample_rows(m, count, seed, shape, fmt)})
            for mode in modes_of(fmt):
                for j in range(0, len(need), ROWS_PER_JOB):
                    jobs.append(("rows", shape, h, i, fmt, seed, mode, tuple(need[j : j + ROWS_PER_JOB])))
    return jobs


def job_cost(job: tuple[Any, ...]) -> float:
    """Relative reference time of a job: its rows (one per row job entry, m per full m) times
    the FFN's size, ten times more for FP8/BF16 (their block dot runs in float64)."""
    rows = sum(job[6]) if job[0] == "full" else len(job[7])
    return rows * job[2] * job[3] * (10 if FORMATS[job[4]].stem in ("fp8", "bf16") else 1)


_LAYER: dict[tuple[str, str], Any] = {}
#: The reference's projections: the block-value chain's (``--chain``; set before the workers fork).
CHAIN = False


def _reference_layer(shape: str, hidden: int, inter: int, fmt: str, seed: int) -> Any:
    from metrale.reference.kernels import ReferenceBackend

    key = (shape, fmt)
    if key not in _LAYER:
        _LAYER.clear()
        cfg = FfnConfig(hidden, inter)
        _LAYER[key] = make_layer(
            fmt, build_host(fmt, hidden, inter, seed, shape), cfg, ReferenceBackend(chain=CHAIN)
        )
    return _LAYER[key]


def run_job(job: tuple[Any, ...]) -> dict[str, Any]:
    """Run one reference job. "full": {m: {"bits", "launches"}} of ``layer(x[:m])``;
    "rows": {r: bits [hidden]} of the one-row ``forward`` on row r in the job's mode."""
    from metrale.reference.tiers import weight_quant_env

    kind, shape, hidden, inter, fmt, seed = job[:6]
    t0 = time.time()
    try:
        layer = _reference_layer(shape, hidden, inter, fmt, seed)
        out: dict[int, Any] = {}
        if kind == "full":
            ms = job[6]
            x = x_rows(hidden, seed, shape, max(ms))
            ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=max(ms))
            for m in ms:
                n0 = len(layer.backend.launches)
                with np.errstate(all="ignore"):
                    y = layer(x[:m], ctx)
                bits = np.ascontiguousarray(y).view(np.uint16).copy()
                out[m] = {"bits": bits, "launches": layer.backend.launches[n0:]}
        else:
            mode, rows = job[6], job[7]
            x = x_rows(hidden, seed, shape, max(rows) + 1)
            with weight_quant_env(MODE_TIER[mode]):
                ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=1)
                for r in rows:
                    with np.errstate(all="ignore"):
                        layer.forward(x[r : r + 1], ctx)
                    out[r] = np.ascontiguousarray(ctx.buffers.output()[0]).view(np.uint16).copy()
        return {"job": job, "out": out, "seconds": time.time() - t0}
    except Exception:
        return {"job": job, "error": traceback.format_exc(limit=4), "seconds": time.time() - t0}


def compare(cell: Cell, want: np.ndarray, want_launches: list[str] | None) -> str:
    """ "" when the cell's bits equal ``want`` (and its launches ``want_launches`` where given),
    else the reason, counting the differing outputs."""
    if cell.bits is None:
        return cell.error or "no output"
    got = cell.bits
    if got.shape != want.shape:
        return f"NOT EXACT: output shape {got.shape} vs the reference's {want.shape}"
    nbad = int((got != want).sum())
    if nbad:
        r, c = np.argwhere(got != want)[0]
        row = cell.rows[r] if cell.rows else int(r)
        return (
            f"NOT EXACT: {nbad} of {got.size} outputs differ from the reference "
            f"(first: row {row}, column {c}: {got[r, c]:#06x} vs {want[r, c]:#06x})"
        )
    if want_launches is not None and cell.launches != want_launches:
        return f"route differs from __call__: {cell.launches} vs {want_launches}"
    return ""


class Verdicts:
    """Collects reference results and judges the cells against them."""

    def __init__(self) -> None:
        self.full: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.rows: dict[tuple[str, str, str, int], np.ndarray] = {}
        self.errors: dict[tuple[str, str], str] = {}

    def add(self, result: dict[str, Any]) -> None:
        job = result["job"]
        kind, shape, fmt = job[0], job[1], job[4]
        if "error" in result:
            self.errors[(shape, fmt)] = result["error"].strip().splitlines()[-1]
            return
        for key, v in result["out"].items():
            if kind == "full":
                self.full[(shape, fmt, key)] = v
            else:
                self.rows[(shape, fmt, job[6], key)] = v

    def judge(self, cell: Cell) -> None:
        """Set ``cell.exact`` and ``cell.error``."""
        if cell.error:
            cell.exact = False
            return
        err = self.errors.get((cell.shape, cell.fmt))
        missing = "reference failed: " + err if err else "no reference result"
        if not cell.rows:
            full = self.full.get((cell.shape, cell.fmt, cell.m))
            cell.error = missing if full is None else compare(cell, full["bits"], full["launches"])
        else:
            mode = call_mode(cell.launches)
            wants = [self.rows.get((cell.shape, cell.fmt, mode, r)) for r in cell.rows]
            if any(w is None for w in wants):
                cell.error = f"{missing} (rows in mode {mode})"
            else:
                cell.error = compare(cell, np.stack(wants), None)
        cell.exact = not cell.error
