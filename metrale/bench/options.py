"""The benchmark's command-line options, parsed and checked into ``Options`` (bad values raise
``MetraleError`` naming the option)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from metrale.bench.cases import DECODE_M, DEFAULT_M, DRY_SHAPE, FORMATS, PREFILL_M, SHAPES
from metrale.bench.kernels import FAMILIES
from metrale.bench.measure import Plan
from metrale.bench.peers import PEERS
from metrale.bench.report import REPORT_JSON, REPORT_PAGE
from metrale.bench.variants import FAMILIES as VARIANT_FAMILIES
from metrale.errors import MetraleError
from metrale.reference.formats.spec import FORMAT_ALIASES

#: Row counts of the dry run when ``--m`` is not given (two above the full-check edge).
DRY_M = (1, 2, 3, 4, 8, 64, 65, 130)
#: Words ``--m`` accepts for groups of row counts.
M_GROUPS = {"decode": DECODE_M, "prefill": PREFILL_M}


@dataclass(frozen=True)
class Options:
    """A checked benchmark run: what to run, how to time and check it, where to write."""

    shapes: dict[str, tuple[int, int]]
    ms: list[int]
    formats: list[str]
    peers: list[str]
    kernels: list[str]
    plan: Plan
    seed: int
    workers: int
    full_max: int
    sample_rows: int
    dry_run: bool
    chain: bool
    profile: bool
    deadline_s: float
    merge: list[Path]
    compare: list[Path]
    variants: str | None
    report: Path | None
    json: Path | None
    md: Path | None
    png: Path | None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="metrale bench",
        description="Time the dense FFN of every format on the CUDA backend, bit-exact against the "
        "reference, with torch peers and bandwidth ceilings measured in the same run.",
    )
    ap.add_argument("--shape", default="all", help=f"{' | '.join(SHAPES)} | all (comma-separated)")
    ap.add_argument("--hidden", type=int, help="custom shape (with --inter) instead of --shape")
    ap.add_argument("--inter", type=int)
    ap.add_argument(
        "--m",
        default=None,
        help="row counts, comma-separated; 'decode' = "
        + ",".join(map(str, DECODE_M))
        + ", 'prefill' = "
        + ",".join(map(str, PREFILL_M))
        + " (default both)",
    )
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: " + ", ".join(FORMATS))
    ap.add_argument("--peers", default="all", help="comma-separated: " + ", ".join(PEERS) + "; all; or none")
    ap.add_argument(
        "--kernels",
        default="nvfp4",
        help="single-kernel timings, comma-separated: " + ", ".join(FAMILIES) + ", all or none",
    )
    ap.add_argument("--samples", type=int, default=9, help="graph replays per cell (median)")
    ap.add_argument("--target-ms", type=float, default=2.0, help="approximate duration of one graph replay")
    ap.add_argument(
        "--cell-seconds", type=float, default=20.0, help="replay time per cell at most (>= 3 samples)"
    )
    ap.add_argument(
        "--full-max", type=int, default=64, help="compare every row up to this m; sample rows above"
    )
    ap.add_argument("--sample-rows", type=int, default=8, help="rows checked per cell above --full-max")
    ap.add_argument(
        "--deadline",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="start no new cell after this many seconds (0: none); the reference gets 60 s more",
    )
    ap.add_argument("--workers", type=int, default=0, help="reference worker processes (0: cores - 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="directory for bench_ffn.json / .md / .png")
    ap.add_argument("--json", help="write the JSON result here")
    ap.add_argument("--md", help="write the Markdown tables here")
    ap.add_argument("--png", help="write the plot here")
    ap.add_argument(
        "--dry-run", action="store_true", help="CPU only: reference backend, tiny shape, host timers"
    )
    ap.add_argument(
        "--chain",
        action="store_true",
        help="the block-value chain's kernels (tile.CHAIN) checked against its reference "
        "(chain.project_chain): the revision's preview, docs/chain-revision.md; its formats are "
        "labelled '(chain)' and its results do not merge with the contract's",
    )
    ap.add_argument("--profile", action="store_true", help="only launch the m=1 NVFP4 gate and down GEMVs")
    ap.add_argument(
        "--merge",
        nargs="+",
        default=[],
        metavar="JSON",
        help="run nothing: merge these results (each shape from the last run that has it) into --json/--md",
    )
    ap.add_argument(
        "--compare",
        nargs="+",
        default=[],
        metavar="JSON",
        help="run nothing: every cell of these results side by side (µs, × bf16 cuBLAS of the "
        "same run, ratio to the first): variants measured in alternating runs",
    )
    ap.add_argument(
        "--variants",
        metavar="FAMILY",
        help="run nothing else: check every built variant of a kernel family against the routed "
        "kernel and time it (" + ", ".join(VARIANT_FAMILIES) + "); --json names the document",
    )
    ap.add_argument(
        "--report",
        nargs="?",
        const=str(REPORT_PAGE),
        metavar="PAGE",
        help=f"run nothing: regenerate the tables of PAGE (default {REPORT_PAGE}) from --json "
        f"(default {REPORT_JSON}) between its generated-block markers",
    )
    return ap


def _list(
    value: str, known: dict[str, str] | tuple[str, ...], option: str, aliases: Mapping[str, str] | None = None
) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    items = [(aliases or {}).get(v, v) for v in items]
    if items == ["none"]:
        return []
    if items == ["all"]:
        return list(known)
    bad = [v for v in items if v not in known]
    if bad:
        raise MetraleError(
            f"{option} {value}: unknown {', '.join(bad)}; want {', '.join(known)}, all or none"
        )
    return list(dict.fromkeys(items))


def row_counts(value: str) -> list[int]:
    """Sorted distinct row counts of ``--m`` (numbers and the words of ``M_GROUPS``)."""
    ms: set[int] = set()
    for v in (s.strip() for s in value.split(",")):
        if not v:
            continue
        if v in M_GROUPS:
            ms.update(M_GROUPS[v])
        elif v.isdigit() and int(v) >= 1:
            ms.add(int(v))
        else:
            raise MetraleError(f"--m {value}: {v!r} is not a row count >= 1 (or {', '.join(M_GROUPS)})")
    if not ms:
        raise MetraleError(f"--m {value!r}: no row counts")
    return sorted(ms)


def _shapes(a: argparse.Namespace) -> dict[str, tuple[int, int]]:
    if a.dry_run:
        return dict([DRY_SHAPE])
    if a.hidden is not None or a.inter is not None:
        if a.hidden is None or a.inter is None:
            raise MetraleError("--hidden and --inter go together")
        if a.hidden < 64 or a.inter < 64 or a.hidden % 64 or a.inter % 64:
            raise MetraleError(f"--hidden {a.hidden} --inter {a.inter}: want multiples of 64 (Q2_0 blocks)")
        return {f"custom-{a.hidden}x{a.inter}": (a.hidden, a.inter)}
    return {n: SHAPES[n] for n in _list(a.shape, tuple(SHAPES), "--shape")}


def parse(argv: list[str] | None = None) -> Options:
    """Options from ``argv``; argparse exits 2 on malformed syntax, bad values raise
    MetraleError."""
    a = parser().parse_args(argv)
    for name in ("samples", "sample_rows"):
        if getattr(a, name) < 1:
            raise MetraleError(f"--{name.replace('_', '-')} {getattr(a, name)}: want >= 1")
    for name in ("target_ms", "cell_seconds"):
        if not getattr(a, name) > 0:
            raise MetraleError(f"--{name.replace('_', '-')} {getattr(a, name)}: want > 0")
    if a.full_max < 0 or a.workers < 0 or a.deadline < 0:
        raise MetraleError("--full-max, --workers and --deadline want values >= 0")
    for option, paths in (("--merge", a.merge), ("--compare", a.compare)):
        for p in paths:
            if not Path(p).is_file():
                raise MetraleError(f"{option} {p}: no such file")
    shapes = _shapes(a)
    if not shapes:
        raise MetraleError(f"--shape {a.shape}: no shapes")
    out = Path(a.out) if a.out else None

    def path(given: str | None, name: str) -> Path | None:
        return Path(given) if given else (out / name if out else None)

    if a.variants is not None and a.variants not in VARIANT_FAMILIES:
        raise MetraleError(
            f"--variants {a.variants}: unknown family; want one of {', '.join(VARIANT_FAMILIES)}"
        )
    if a.variants is not None and a.m is None:
        ms = list(VARIANT_FAMILIES[a.variants].ms)
    else:
        ms = row_counts(a.m) if a.m is not None else list(DRY_M if a.dry_run else DEFAULT_M)
    return Options(
        shapes=shapes,
        ms=ms,
        formats=_list(a.formats, tuple(FORMATS), "--formats", FORMAT_ALIASES),
        peers=_list(a.peers, tuple(PEERS), "--peers"),
        kernels=_list(a.kernels, FAMILIES, "--kernels"),
        plan=Plan(a.target_ms, a.samples, a.cell_seconds),
        seed=a.seed,
        workers=a.workers,
        full_max=a.full_max,
        sample_rows=a.sample_rows,
        dry_run=a.dry_run,
        chain=a.chain,
        profile=a.profile,
        deadline_s=a.deadline,
        merge=[Path(p) for p in a.merge],
        compare=[Path(p) for p in a.compare],
        variants=a.variants,
        report=Path(a.report) if a.report is not None else None,
        json=path(a.json, f"variants_{a.variants}.json" if a.variants else "bench_ffn.json"),
        md=path(a.md, "bench_ffn.md"),
        png=path(a.png, "bench_ffn.png"),
    )
