"""The kernel-variant harness (``metrale bench --variants FAMILY``): every built variant of one
kernel family, checked bit for bit against the routed kernel and timed, one JSON document.

A family's candidates come from ``metrale/cuda/configs.py`` (the built variant tables) and the
launcher module attributes that select them; ``plan`` lists the cells (shape, format,
projection, m) and each cell's candidates without a GPU. On the device every cell runs the
routing as shipped first (its bits are the cell's reference, and its sampled rows must equal the
numpy reference ``project``; the rows of a smaller m must equal the first rows of the largest m:
batch invariance), then each candidate with its settings applied: its output must equal the
routed bits on every row and column before its time counts. Times are µs per projection call
from ``measure.CupyClock`` (CUDA events around CUDA-graph replays), cycling through device
weight copies by ``measure.rotation`` (decode rows: copies over 4× the L2, weights stream from
HBM), floor = weight bytes / the run's read-only bandwidth (``measure.ceilings_gpu``). The
document names, per cell, the routed candidate and the fastest bit-equal one; the decision is
then an edit of ``configs.py``, whose ``VARIANT_MEASUREMENTS`` names the document it came from.

Families:

* ``fp8-dec``: FP8/BF16 decode kernels (``FP8_BF16_DEC`` and ``FP8_BF16_DEC_VARIANTS``) at
  m = 1..3 beside the GEMV tiers and, at m = 3, the K-split tensor-core kernels;
* ``fp8-gemm``: the FP8/BF16 prefill GEMM, each table entry of the projection's counter depth
  (``fp8_bf16_gemm_builds``: prefetching ``p``; ``fp8_bf16_gemm_late_builds``: ``l``) in both
  rasters, one suffix for every depth, and the K-split kernels it replaced;
* ``q2-dec``: the Q2_0 decode variants (``Q2_0_DEC_VARIANTS``) beside the GEMV and the tensor
  cores, m = 1..3;
* ``nvfp4-gemm``: the NVFP4 A16 prefill GEMM builds (``nvfp4_gemm_builds``) on any grid and the
  K-split MMA kernels, gate and up in one launch and down;
* ``w8a8-gemm``: up to the largest ``W8A8_SK_TIERS`` the split-K wgmma kernels at 1 and 2 CTAs
  per multiprocessor; the stream-K tiers (``W8A8_TMA_TIERS``) that hold m, or half of it; above
  32 rows (the largest ``W8A8_MMA_TIERS``) the prefill tiles (``W8A8_GEMM_TILES``,
  ``W8A8_WGMMA_TILES``); up to 64 rows the kernels of other GPUs (dp4a, mma.sync tiers). The
  A8 codes are made once per cell (the GEMM alone is timed).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from metrale.bench.cases import rng_for, x_rows
from metrale.bench.measure import Plan, Timing, floor_us, rotation
from metrale.cuda import configs
from metrale.errors import MetraleError

#: Rows up to this m are decode / verify rows for the L2 policy (``measure.rotation``).
DECODE_MAX = 64
#: A setting a candidate applies while it runs: (module, attribute, value).
Setting = tuple[str, str, Any]

FP8 = "metrale.cuda.fp8_bf16"
Q2 = "metrale.cuda.q2_0"
MMA = "metrale.cuda.mma"
TILE = "metrale.cuda.tile"
W8 = "metrale.cuda.w8a8"
CFG = "metrale.cuda.configs"


@dataclass(frozen=True)
class Candidate:
    """One variant of a cell: its name, the kernels that tell it apart ((kernel file, kernel
    name), one of which it launches: for the GEMMs the entry of the projection's counter depth
    in one K part), the settings that select it, the launch's keyword arguments, and whether the
    shipped routing takes it (False where the device decides: the W8A8 prefill tile)."""

    name: str
    kernels: tuple[tuple[str, str], ...]
    settings: tuple[Setting, ...] = ()
    call: tuple[tuple[str, Any], ...] = ()
    routed: bool = False


@dataclass(frozen=True)
class Cell:
    """One measured projection: shape, bench format, projection (``sets`` weights of [n, k] in
    one launch: 2 for NVFP4's gate and up), m rows, the candidates."""

    family: str
    shape: str
    fmt: str
    proj: str
    n: int
    k: int
    m: int
    sets: int
    candidates: tuple[Candidate, ...] = ()


def _p(fmt: str) -> str:
    return "fp8" if fmt == "fp8" else "bf16"


def _tier(m: int, tiers: dict[int, int]) -> int:
    from metrale.cuda.launch_args import tier

    return tier(m, tiers)


def _depth(k: int, table: dict[int, tuple[int, int]]) -> int | None:
    """The counter depth of the GEMM table entry for K = k in one part (S8 = ceil(K / 128) steps)."""
    s8 = -(-k // 128)
    kp8 = 1 << max(0, (s8 - 1).bit_length())
    return min((d for d in table if kp8 <= 1 << d), default=None)


# ---- the families: each cell's candidates -------------------------------------------------------
def _fp8_dec(fmt: str, n: int, k: int, m: int) -> list[Candidate]:
    p, routed = _p(fmt), configs.FP8_BF16_DEC.get(m)
    off = ((FP8, "DECODE", "gemv"), (FP8, "DEC_TIERS", {}))
    out = [
        Candidate(
            "gemv",
            (("fp8_bf16_gemv.cu", f"{p}_gemv_r{_tier(m, configs.FP8_BF16_TIERS)}"),),
            (*off, (FP8, "MMA_MIN_M", 1 << 30)),
        )
    ]
    if m == 3:  # the tensor cores served m = 3 before the decode kernels
        nt = configs.FP8_BF16_MMA_TILES[_tier(m, configs.FP8_BF16_MMA_TILES)]
        out.append(
            Candidate(
                "mma",
                (("fp8_bf16_gemv.cu", f"{p}_mma_nt{nt}"),),
                (*off, (FP8, "MMA_MIN_M", 1), (FP8, "GEMM_MIN_ROWS", 1 << 30)),
            )
        )
    for r, d in configs.fp8_bf16_dec_builds():
        if r == m:
            sets = ((FP8, "DECODE", "dec"), (FP8, "DEC_TIERS", {m: d}), (FP8, "MMA_MIN_M", 1 << 30))
            out.append(
                Candidate(d.name(p, m), (("fp8_bf16_gemv.cu", d.name(p, m)),), sets, routed=d == routed)
            )
    return out


def _fp8_gemm(fmt: str, n: int, k: int, m: int) -> list[Candidate]:
    p = _p(fmt)
    nt = configs.FP8_BF16_MMA_TILES[_tier(min(m, 32), configs.FP8_BF16_MMA_TILES)]
    ksplit = (("fp8_bf16_gemv.cu", f"{p}_mma_nt{nt}"),)
    routed_ksplit = m < configs.FP8_BF16_GEMM_MIN_ROWS
    out = [Candidate("k-split", ksplit, ((FP8, "GEMM_MIN_ROWS", 1 << 30),), routed=routed_ksplit)]
    attr = "FP8_BF16_GEMM_SMALL_TILES" if m <= 8 else "FP8_BF16_GEMM_TILES"
    table: dict[int, tuple[int, int]] = getattr(configs, attr)
    d = _depth(k, table)
    if d is None:
        return out
    suffix = configs.FP8_BF16_GEMM_SUFFIX
    builds = [(*v, "p") for v in configs.fp8_bf16_gemm_builds()]
    builds += [(*v, "l") for v in configs.fp8_bf16_gemm_late_builds()]
    for bd, bnt, b, sfx in builds:
        if bd != d:
            continue
        for rows_first in (False, True):
            sets = (
                (FP8, "GEMM_MIN_ROWS", 1),
                (CFG, attr, {**table, d: (bnt, b)}),
                (FP8, "GEMM_SUFFIX", {**suffix, d: sfx}),
                (FP8, "GEMM_ROWS_FIRST", rows_first),
            )
            routed = not routed_ksplit and (
                table[d] == (bnt, b) and suffix[d] == sfx and rows_first == configs.FP8_BF16_GEMM_ROWS_FIRST
            )
            name = f"d{d}_nt{bnt}_b{b}_{sfx}_{'rows' if rows_first else 'cols'}"
            kern = ("fp8_bf16_mma.cu", f"fp8_bf16_gemm_nt{bnt}_d{d}_b{b}_{sfx}")
            out.append(Candidate(name, (kern,), sets, routed=routed))
    tn, tb = table[d]
    for sfx in ("p", "l"):  # one suffix for every depth, the table's tiles
        for rows_first in (False, True):
            sets = (
                (FP8, "GEMM_MIN_ROWS", 1),
                (FP8, "GEMM_SUFFIX", dict.fromkeys(suffix, sfx)),
                (FP8, "GEMM_ROWS_FIRST", rows_first),
            )
            kern = ("fp8_bf16_mma.cu", f"fp8_bf16_gemm_nt{tn}_d{d}_b{tb}_{sfx}")
            out.append(Candidate(f"all_{sfx}_{'rows' if rows_first else 'cols'}", (kern,), sets))
    return out


def _q2_dec(fmt: str, n: int, k: int, m: int) -> list[Candidate]:
    from metrale.cuda.q2_0 import MMA_MIN_ROWS, dec_kernel_name

    route = next((v for rows, cols, v in configs.Q2_0_DEC_ROUTE if m <= rows and n <= cols), None)
    out = [
        Candidate(
            v, (("q2_0_dec.cu", dec_kernel_name(v, m, k)[0]),), ((Q2, "DEC_VARIANT", v),), routed=v == route
        )
        for v in configs.Q2_0_DEC_VARIANTS
    ]
    gemv = ("q2_0_gemv.cu", f"q2_0_gemv_r{_tier(m, configs.Q2_0_TIERS)}")
    out.append(Candidate("gemv", (gemv,), ((Q2, "DEC_VARIANT", "off"), (MMA, "ENABLED", False))))
    if m >= MMA_MIN_ROWS:
        kern = ("q2_0_mma.cu", f"q2_mma_nt{-(-m // 8)}_{'a' if (k // 16) % 8 == 0 else 'u'}")
        out.append(Candidate("mma", (kern,), ((Q2, "DEC_VARIANT", "off"), (MMA, "ENABLED", True))))
    return out


def _nvfp4_gemm(fmt: str, n: int, k: int, m: int) -> list[Candidate]:
    """Every built A16 tensor-core kernel of the cell: the tiled GEMM ("tile f{NF}" on mma.sync,
    "wgmma tile f{NF}" on sm_90a, where B % 8 == 0; routed: the wgmma one while tile.WG_ENABLED,
    as on the H200) and the mma.py kernels in both families, the s8 limbs (names as they were)
    and the f16 MMA ("f16 ..."; mma.BLOCK_DOT), each with the tiled GEMM off."""
    from metrale.cuda import tile

    out = []
    if (k // 16) % 8 == 0:
        wg = tile.WG_ENABLED
        for nf in configs.NVFP4_WGMMA_TILE_FRAGS:
            wg_on = ((TILE, "WG_ENABLED", True), (TILE, "WG_FRAGS", (nf,)))
            sets = ((TILE, "ENABLED", True), (TILE, "MIN_ROWS", 1), *wg_on)
            routed = (
                wg and tile.ENABLED and tile.takes(m, tile.NVFP4) and nf == tile.frags_for(m, tile.WG_FRAGS)
            )
            kern = ("nvfp4_wgmma.cu", f"w4a16w_gemm_f{nf}")
            out.append(Candidate(f"wgmma tile f{nf}", (kern,), sets, routed=routed))
        for nf in configs.NVFP4_TILE_FRAGS:
            wg_off = ((TILE, "WG_ENABLED", False), (TILE, "FRAGS", (nf,)))
            sets = ((TILE, "ENABLED", True), (TILE, "MIN_ROWS", 1), *wg_off)
            routed = not wg and tile.ENABLED and tile.takes(m, tile.NVFP4) and nf == tile.frags_for(m)
            kern = ("nvfp4_tile.cu", f"w4a16b_gemm_f{nf}")
            out.append(Candidate(f"tile f{nf}", (kern,), sets, routed=routed))
    tiled = bool(out) and tile.ENABLED and tile.takes(m, tile.NVFP4)
    off = ((TILE, "ENABLED", False),)
    al = "a" if (k // 16) % 8 == 0 else "u"
    nt = -(-min(m, 8 * configs.NVFP4_MMA_TILES[-1]) // 8)
    from metrale.cuda.mma import BLOCK_DOT_FAMILIES, GEMM_MIN_ROWS, family_prefix

    table = configs.NVFP4_GEMM_SMALL_TILES if m <= 8 else configs.NVFP4_GEMM_TILES
    d_routed = _depth(k, table)
    for fam in BLOCK_DOT_FAMILIES:
        prefix = family_prefix("w4a16", fam)
        tag = "" if fam == "s8" else "f16 "
        mine = fam == configs.BLOCK_DOT and not tiled
        pick = (*off, (MMA, "BLOCK_DOT", fam))
        kern = ("nvfp4_mma.cu", f"{prefix}_mma_nt{nt}_{al}")
        out.append(
            Candidate(
                f"{tag}mma",
                (kern,),
                (*pick, (MMA, "GEMM_MIN_ROWS", 1 << 30)),
                routed=mine and m < GEMM_MIN_ROWS,
            )
        )
        for d, bnt, b in configs.nvfp4_gemm_builds():
            if -(-k // 128) > 1 << d:
                continue
            sets = (
                *pick,
                (MMA, "GEMM_MIN_ROWS", 1),
                (MMA, "GEMM_ANY_GRID", True),
                (MMA, "GEMM_TILES", {d: (bnt, b)}),
            )
            routed = mine and m >= GEMM_MIN_ROWS and d == d_routed and table.get(d) == (bnt, b)
            kern = ("nvfp4_mma.cu", f"{prefix}_gemm_nt{bnt}_d{d}_b{b}_{al}")
            out.append(Candidate(f"{tag}nt{bnt}_d{d}_b{b}", (kern,), sets, routed=routed))
    return out


def _w8a8_gemm(fmt: str, n: int, k: int, m: int) -> list[Candidate]:
    out: list[Candidate] = []
    no_tma = (W8, "TMA_MIN_ROWS", 1 << 30)
    if m <= max(configs.W8A8_SK_TIERS):
        sk = configs.W8A8_SK_TIERS[_tier(m, dict.fromkeys(configs.W8A8_SK_TIERS, 0))]
        out += [
            Candidate(
                f"split-K {c} CTAs/SM",
                (("w8a8_wgmma.cu", sk.name),),
                ((W8, "SK_CTAS_PER_SM", c),),
                call=(("gemm", sk.name),),
                routed=c == configs.W8A8_SK_CTAS_PER_SM
                and configs.W8A8_SK_MIN_ROWS <= m <= configs.W8A8_SK_MAX_ROWS,
            )
            for c in (1, 2)
        ]
    lo, hi = configs.W8A8_TMA_ROWS
    # from GEMM_MIN_ROWS the device's grid decides between stream K and the tile (w8a8.tma_tier)
    tma_routed = (
        _tier(m, dict.fromkeys(configs.W8A8_TMA_TIERS, 0)) if lo <= m <= min(hi, DECODE_MAX) else None
    )
    out += [
        Candidate(
            f"stream-K n{bn}",
            (("w8a8_wgmma.cu", f"w8a8_tma_n{bn}"),),
            call=(("gemm", f"w8a8_tma_n{bn}"),),
            routed=bn == tma_routed,
        )
        for bn in configs.W8A8_TMA_TIERS
        if m // 2 <= bn and (bn >= m or bn == max(configs.W8A8_TMA_TIERS))
    ]
    if m > max(configs.W8A8_MMA_TIERS):
        mine = [(t.name, "w8a8.cu") for t in configs.W8A8_GEMM_TILES]
        mine += [(t.name, "w8a8_wgmma.cu") for t in configs.W8A8_WGMMA_TILES]
        out += [Candidate(name, ((cu, name),), call=(("gemm", name),)) for name, cu in mine]
    if m > DECODE_MAX:
        return out
    if m <= max(configs.W8A8_GEMV_TIERS):
        plain: tuple[tuple[str, str], ...] = (("w8a8.cu", f"w8a8_gemv_r{_tier(m, configs.W8A8_GEMV_TIERS)}"),)
    else:  # the tensor-core tier; its warps (4 or 8) follow the grid on the device
        r = _tier(m, dict.fromkeys(configs.W8A8_MMA_TIERS, 0))
        plain = tuple(("w8a8.cu", f"w8a8_mma_r{r}_w{w}") for w in configs.W8A8_MMA_WARPS)
    out.append(Candidate("without wgmma", plain, ((W8, "SK_MIN_ROWS", 1 << 30), no_tma)))
    return out


@dataclass(frozen=True)
class Family:
    """A kernel family: its formats, default row counts, projections ((name, N, K, weight sets)
    from (hidden, intermediate)), the reference's activation mode and the cell's candidates."""

    formats: tuple[str, ...]
    ms: tuple[int, ...]
    projections: Callable[[int, int], tuple[tuple[str, int, int, int], ...]]
    mode: str
    candidates: Callable[[str, int, int, int], list[Candidate]]


def _gate_down(h: int, i: int) -> tuple[tuple[str, int, int, int], ...]:
    return (("gate", i, h, 1), ("down", h, i, 1))


FAMILIES: dict[str, Family] = {
    "fp8-dec": Family(("fp8", "bf16"), (1, 2, 3), _gate_down, "A16", _fp8_dec),
    "fp8-gemm": Family(("fp8", "bf16"), (8, 16, 64, 512, 4096), _gate_down, "A16", _fp8_gemm),
    "q2-dec": Family(("q2_0",), (1, 2, 3), _gate_down, "A16", _q2_dec),
    "nvfp4-gemm": Family(
        ("nvfp4",),
        (64, 512, 2048),
        lambda h, i: (("gate+up", i, h, 2), ("down", h, i, 1)),
        "A16",
        _nvfp4_gemm,
    ),
    "w8a8-gemm": Family(
        ("w8a8",), (1, 2, 3, 16, 32, 64, 96, 128, 256, 512, 1024, 2048, 4096), _gate_down, "A8", _w8a8_gemm
    ),
}


def plan(
    family: str, shapes: dict[str, tuple[int, int]], ms: list[int] | None, formats: list[str]
) -> list[Cell]:
    """The cells of ``family`` at ``shapes`` (all of them), row counts ``ms`` (None: the family's),
    in the family's formats that ``formats`` lists. MetraleError for an unknown family or no cell."""
    fam = FAMILIES.get(family)
    if fam is None:
        raise MetraleError(f"--variants {family}: unknown family; want one of {', '.join(FAMILIES)}")
    fmts = [f for f in fam.formats if f in formats]
    if not fmts:
        raise MetraleError(
            f"--variants {family}: serves formats {', '.join(fam.formats)}; --formats lists none"
        )
    cells = []
    for shape, (hidden, inter) in shapes.items():
        for fmt in fmts:
            for proj, n, k, sets in fam.projections(hidden, inter):
                for m in ms or fam.ms:
                    cands = tuple(fam.candidates(fmt, n, k, m))
                    cells.append(Cell(family, shape, fmt, proj, n, k, m, sets, cands))
    return cells


@contextmanager
def applied(settings: tuple[Setting, ...]) -> Iterator[None]:
    """The module attributes of ``settings`` set for the block, the previous values back after."""
    saved = []
    try:
        for mod, attr, value in settings:
            m = importlib.import_module(mod)
            saved.append((m, attr, getattr(m, attr)))
            setattr(m, attr, value)
        yield
    finally:
        for m, attr, value in reversed(saved):
            setattr(m, attr, value)


# ---- measuring: a runner executes, the document is a pure function of what it returned ----------
class Runner(Protocol):
    """Where the cells run: ``bits`` the output of a cell under a candidate (None: the routing as
    shipped) as uint16 [sets, m, n]; ``reference`` the numpy reference on some rows; ``time`` the
    cell's timing under a candidate; ``floor_us`` and ``weight_bytes`` the cell's figures;
    ``device`` what the document records of the machine and the timing plan."""

    def bits(self, cell: Cell, cand: Candidate | None) -> np.ndarray: ...
    def reference(self, cell: Cell, rows: list[int]) -> np.ndarray: ...
    def time(self, cell: Cell, cand: Candidate | None) -> Timing: ...
    def weight_bytes(self, cell: Cell) -> int: ...
    def floor_us(self, cell: Cell) -> float: ...
    def device(self) -> dict[str, Any]: ...


def sample_rows(m: int) -> list[int]:
    """Rows compared with the reference: the first, the middle and the last."""
    return sorted({0, m // 2, m - 1})


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"


def measure_cell(cell: Cell, runner: Runner, largest: np.ndarray | None) -> tuple[dict[str, Any], np.ndarray]:
    """One cell's record (the routing's check and time, then every candidate's) and the
    routing's bits. ``largest``: the routed bits of the largest m of this projection (rows of a
    smaller m must equal its first rows), None for that largest m itself."""
    wb, fl = runner.weight_bytes(cell), runner.floor_us(cell)
    rec: dict[str, Any] = {
        "shape": cell.shape,
        "format": cell.fmt,
        "proj": cell.proj,
        "n": cell.n,
        "k": cell.k,
        "m": cell.m,
        "weight_sets": cell.sets,
        "weight_bytes": wb,
        "floor_us": round(fl, 3),
    }
    routed = runner.bits(cell, None)
    rows = sample_rows(cell.m)
    rec["reference_rows"] = rows
    rec["reference_exact"] = bool(np.array_equal(routed[:, rows], runner.reference(cell, rows)))
    rec["batch_invariant"] = True if largest is None else bool(np.array_equal(routed, largest[:, : cell.m]))
    rec["routing"] = _timed(runner, cell, None, wb, fl)
    rec["candidates"] = []
    for cand in cell.candidates:
        c: dict[str, Any] = {
            "name": cand.name,
            "kernels": [list(kk) for kk in cand.kernels],
            "routed": cand.routed,
        }
        try:
            got = runner.bits(cell, cand)
            c["bits_equal_routed"] = bool(got.shape == routed.shape and np.array_equal(got, routed))
            if c["bits_equal_routed"]:
                c.update(_timed(runner, cell, cand, wb, fl))
        except Exception as exc:  # a kernel that did not build here, a variant that does not fit
            c["error"] = _first_line(exc)
        rec["candidates"].append(c)
    timed = [c for c in rec["candidates"] if "us" in c]
    rec["fastest"] = min(timed, key=lambda c: c["us"])["name"] if timed else None
    rec["routed"] = next((c["name"] for c in rec["candidates"] if c["routed"]), None)
    return rec, routed


def block_values(cell: Cell) -> int | None:
    """The block values a cell's launch forms (m N K / 16 per weight set: one per output and
    16-element block), or None for the families without blocks (W8A8's one int32 dot)."""
    if FAMILIES[cell.family].mode == "A8":
        return None
    return cell.m * cell.n * (cell.k // 16) * cell.sets


def _timed(runner: Runner, cell: Cell, cand: Candidate | None, wb: int, fl: float) -> dict[str, Any]:
    """A candidate's timing, bandwidth, × floor and, for block formats, its epilogue rate
    (T block values per second)."""
    t = runner.time(cell, cand)
    out = {**t.js(), "GBps": round(wb / (t.us * 1e-6) / 1e9, 1), "x_floor": round(t.us / fl, 3)}
    bv = block_values(cell)
    if bv is not None:
        out["T_block_values_per_s"] = round(bv / (t.us * 1e-6) / 1e12, 3)
    return out


def measure(cells: list[Cell], runner: Runner, meta: dict[str, Any]) -> dict[str, Any]:
    """The document: ``meta`` (family, command, date, device, ceilings, timing plan), the routing
    tables it measured against, every cell, and what failed (``mismatches``; ``exact`` False)."""
    records: list[dict[str, Any]] = []
    largest: dict[tuple[str, str, str], np.ndarray] = {}
    for cell in sorted(cells, key=lambda c: (c.shape, c.fmt, c.proj, -c.m)):
        key = (cell.shape, cell.fmt, cell.proj)
        rec, bits = measure_cell(cell, runner, largest.get(key))
        largest.setdefault(key, bits)
        records.append(rec)
        print(_line(rec), flush=True)
    bad = [
        f"{r['shape']} {r['format']} {r['proj']} m={r['m']}: {what}"
        for r in records
        for what in (
            *(["routed rows differ from the reference"] if not r["reference_exact"] else []),
            *(["rows differ from the largest m's (batch invariance)"] if not r["batch_invariant"] else []),
            *(
                f"{c['name']} bits differ from the routed kernel's"
                for c in r["candidates"]
                if c.get("bits_equal_routed") is False
            ),
        )
    ]
    return {
        **meta,
        "measurement": VARIANT_DOC,
        "configs": {name: repr(getattr(configs, name)) for name in TABLES[meta["family"]]},
        "cells": records,
        "mismatches": bad,
        "exact": not bad,
    }


VARIANT_DOC = (
    "µs per projection call, median of CUDA-graph replays (CuPy stream capture, CUDA events) over "
    "device weight copies (decode rows: more bytes than 4x the L2); every candidate's output equal "
    "to the routed kernel's on every row before it is timed; the routed rows equal the numpy "
    "reference on reference_rows"
)
#: The configs.py tables each family's candidates and routing come from (recorded in the document).
TABLES: dict[str, tuple[str, ...]] = {
    "fp8-dec": ("FP8_BF16_DEC", "FP8_BF16_DEC_VARIANTS", "FP8_BF16_TIERS", "FP8_BF16_MMA_MIN_M"),
    "fp8-gemm": (
        "FP8_BF16_GEMM_TILES",
        "FP8_BF16_GEMM_SMALL_TILES",
        "FP8_BF16_GEMM_VARIANTS",
        "FP8_BF16_GEMM_LATE_VARIANTS",
        "FP8_BF16_GEMM_SUFFIX",
        "FP8_BF16_GEMM_ROWS_FIRST",
        "FP8_BF16_GEMM_MIN_ROWS",
    ),
    "q2-dec": ("Q2_0_DEC_VARIANTS", "Q2_0_DEC_ROUTE", "Q2_0_TIERS"),
    "nvfp4-gemm": ("NVFP4_GEMM_TILES", "NVFP4_GEMM_SMALL_TILES", "NVFP4_GEMM_VARIANTS", "BLOCK_DOT"),
    "w8a8-gemm": (
        "W8A8_GEMM_TILES",
        "W8A8_WGMMA_TILES",
        "W8A8_SK_TIERS",
        "W8A8_SK_CTAS_PER_SM",
        "W8A8_SK_MAX_ROWS",
        "W8A8_TMA_TIERS",
        "W8A8_TMA_ROWS",
        "W8A8_TMA_GEMM_FILL",
    ),
}


def _line(rec: dict[str, Any]) -> str:
    rate = rec["routing"].get("T_block_values_per_s")
    head = (
        f"{rec['shape']} {rec['format']} {rec['proj']} m={rec['m']}: routing {rec['routing']['us']:.2f} us"
        + (f" ({rate:.2f} T block values/s)" if rate is not None else "")
    )
    cells = [
        f"{c['name']} {c['us']:.2f}" if "us" in c else f"{c['name']} {c.get('error', 'BITS DIFFER')}"
        for c in rec["candidates"]
    ]
    return head + "; " + ", ".join(cells)


# ---- the device -------------------------------------------------------------------------------------
class CudaRunner:
    """The CUDA backend: seeded weights of the bench format (``metrale.testing.random_weight``),
    device copies for the L2 policy, the bench's activation rows."""

    def __init__(self, cells: list[Cell], plan_: Plan, seed: int) -> None:
        import cupy as cp

        from metrale.backend import get_backend
        from metrale.bench.measure import CupyClock, ceilings_gpu
        from metrale.cuda import runtime

        self.cp, self.be, self.plan, self.seed, self.cells = cp, get_backend("cuda"), plan_, seed, cells
        self.clock = CupyClock()
        self.l2 = int(cp.cuda.Device().attributes.get("L2CacheSize", 60 << 20))
        self.ceilings = ceilings_gpu(plan_.samples)
        name = runtime.device_props(runtime.device_id())["name"]
        self.gpu = name.decode() if isinstance(name, bytes) else str(name)
        self._proj: dict[tuple[str, str, str], dict[str, Any]] = {}

    def device(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "ceilings_GBps": {k: round(v / 1e9, 1) for k, v in self.ceilings.items() if k.endswith("_Bps")},
            "l2_bytes": self.l2,
            "timing": {
                "samples": self.plan.samples,
                "target_ms": self.plan.target_ms,
                "cell_seconds": self.plan.budget_s,
            },
        }

    def _setup(self, cell: Cell) -> dict[str, Any]:
        """The projection's host weights, device copies, rows and outputs (kept per projection)."""
        from metrale.bench.cases import FORMATS
        from metrale.cuda.weights import DeviceWeight
        from metrale.testing import random_weight

        key = (cell.shape, cell.fmt, cell.proj)
        if key in self._proj:
            return self._proj[key]
        self._proj.clear()
        self.cp.get_default_memory_pool().free_all_blocks()
        f = FORMATS[cell.fmt]
        scale = None if f.input_scale is None else np.float32(f.input_scale)
        rng = rng_for(self.seed, "variants", *key)
        hosts = [
            random_weight(f.stem, rng, cell.n, cell.k, f"{cell.proj}{i}", scale) for i in range(cell.sets)
        ]
        wb = sum(h.nbytes for h in hosts)
        ms = [c.m for c in self.cells if (c.shape, c.fmt, c.proj) == key]
        n_copies = max(rotation(wb, self.l2, m, DECODE_MAX) for m in ms)
        first = [self.be.upload(h) for h in hosts]
        copies = [first] + [
            [DeviceWeight(host=w.host, arrays={a: v.copy() for a, v in w.arrays.items()}) for w in first]
            for _ in range(n_copies - 1)
        ]
        x_host = x_rows(cell.k, self.seed, cell.shape, max(ms))
        self._proj[key] = {
            "hosts": hosts,
            "bytes": wb,
            "copies": copies,
            "x_host": x_host,
            "x": self.cp.asarray(np.ascontiguousarray(x_host).view(np.uint16)),
        }
        return self._proj[key]

    def weight_bytes(self, cell: Cell) -> int:
        return int(self._setup(cell)["bytes"])

    def floor_us(self, cell: Cell) -> float:
        return floor_us(self.weight_bytes(cell), float(self.ceilings["read_Bps"]))

    def _launch(self, cell: Cell, cand: Candidate | None) -> Callable[[list[Any], list[Any]], None]:
        """call(weights, outs): one projection of the cell's rows by one weight copy."""
        from metrale.cuda import fp8_bf16, nvfp4, pdl, q2_0, w8a8

        s = self._setup(cell)
        x = s["x"][: cell.m]
        kw = dict(cand.call) if cand else {}
        fam = cell.family
        if fam in ("fp8-dec", "fp8-gemm"):
            fn = fp8_bf16.w8a16_gemm if cell.fmt == "fp8" else fp8_bf16.dense_gemm
            return lambda ws, outs: fn(x, ws[0], outs[0])
        if fam == "q2-dec":

            def q2(ws: list[Any], outs: list[Any]) -> None:
                pdl.entry_start()  # a fresh launch chain, as an FFN's first projection
                q2_0.q2_0_gemv_vec_batchm(x, ws[0], outs[0], cell.m)

            return q2
        if fam == "nvfp4-gemm":
            return lambda ws, outs: nvfp4.nvfp4_a16(x, list(zip(ws, outs, strict=True)), cell.m, 4)
        codes = w8a8.w8a8_quantize(x)
        return lambda ws, outs: w8a8.w8a8_gemv(codes, ws[0], outs[0], **kw)

    def _outs(self, cell: Cell) -> list[Any]:
        return [self.cp.zeros((cell.m, cell.n), dtype=self.cp.uint16) for _ in range(cell.sets)]

    def bits(self, cell: Cell, cand: Candidate | None) -> np.ndarray:
        with applied(cand.settings if cand else ()):
            call = self._launch(cell, cand)
            outs = self._outs(cell)
            call(self._setup(cell)["copies"][0], outs)
            self.cp.cuda.Device().synchronize()
        return np.stack([o.get() for o in outs])

    def reference(self, cell: Cell, rows: list[int]) -> np.ndarray:
        from metrale.reference.projection import project

        s = self._setup(cell)
        mode = FAMILIES[cell.family].mode
        return np.stack([project(s["x_host"][rows], h, mode).view(np.uint16) for h in s["hosts"]])

    def time(self, cell: Cell, cand: Candidate | None) -> Timing:
        s = self._setup(cell)
        copies = s["copies"][: rotation(s["bytes"], self.l2, cell.m, DECODE_MAX)]
        with applied(cand.settings if cand else ()):
            call = self._launch(cell, cand)
            outs = [self._outs(cell) for _ in copies]

            def body() -> None:
                for ws, o in zip(copies, outs, strict=True):
                    call(ws, o)

            return self.clock.time(body, len(copies), self.plan)


def run(family: str, cells: list[Cell], runner: Runner, command: str, json_path: Path | None) -> int:
    """Measure ``cells`` on ``runner``, write the document to ``json_path``; 0 when every check
    held, 1 otherwise."""
    import platform

    t0 = time.time()
    meta = {
        "family": family,
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "host": platform.node(),
        **runner.device(),
    }
    doc = measure(cells, runner, meta)
    doc["seconds"] = round(time.time() - t0, 1)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(doc, indent=1))
        print(f"wrote {json_path}")
    if doc["mismatches"]:
        print("NOT EXACT:\n  " + "\n  ".join(doc["mismatches"]), file=sys.stderr)
        return 1
    print(
        f"{family}: {len(cells)} cells, every candidate bit-equal to the routed kernel ({doc['seconds']} s)"
    )
    return 0


def main(family: str, cells: list[Cell], plan_: Plan, seed: int, command: str, json_path: Path | None) -> int:
    """``metrale bench --variants FAMILY`` on the CUDA backend."""
    from metrale.backend import get_backend

    get_backend("cuda")  # BackendUnavailable naming what is missing, before any CuPy import
    return run(family, cells, CudaRunner(cells, plan_, seed), command, json_path)
