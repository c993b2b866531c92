"""The ``metrale`` command line: convert, inspect, verify, demo, generate, bench.

Every command reports bad input as one line ``error: ...`` naming the file, tensor or option
and exits 1 (2 for usage errors, from typer; 130 after Ctrl-C). ``convert`` never leaves a
partial DST or temporary folder behind, and never writes into SRC.
"""

from __future__ import annotations

import contextlib
import inspect as _inspect
import json
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from metrale.errors import BackendUnavailable, MetraleError
from metrale.reference.formats import CONVERT_FORMATS
from metrale.reference.formats.spec import FORMAT_NAMES


def _plain_flags(params: list[Any]) -> list[Any]:
    """Flags (--help, --force, ...) show no value type in the help (typer would print <bool>)."""
    for p in params:
        if getattr(p, "is_flag", False) and getattr(p, "metavar", None) is None:
            p.metavar = ""
    return params


def _reflow(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line: rich keeps the line breaks of every paragraph
    after the first, which at 80 columns leaves lines broken half-way."""
    return None if text is None else "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


class _Command(typer.core.TyperCommand):
    def __init__(self, *args: Any, help: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, help=_reflow(help), **kwargs)

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


class _Group(typer.core.TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


app = typer.Typer(
    cls=_Group,
    name="metrale",
    help="Quantize Hugging Face checkpoints (NVFP4, FP8, W8A8, Q2_0) and run their FFN layers with metrale.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from metrale.checkpoint.layouts import metrale_version

        typer.echo(f"metrale {metrale_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print metrale's version and exit."),
    ] = False,
) -> None:
    """Quantize Hugging Face checkpoints (NVFP4, FP8, W8A8, Q2_0) and run their FFN layers with metrale."""


def _out() -> Console:
    return Console(highlight=False)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def _fail(msg: str, code: int = 1) -> typer.Exit:
    from metrale.checkpoint.io import bounded

    _err().print(f"[bold red]error:[/] {escape(bounded(msg))}", markup=True, soft_wrap=True)
    return typer.Exit(code)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB" if n >= 1e5 else f"{n / 1e3:,.1f} kB"


def _report_table(report: Any, limit: int) -> Table:
    t = Table(title=f"{report.format}: quantized tensors", title_justify="left")
    for c, j in (
        ("tensor", "left"),
        ("format", "left"),
        ("shape", "left"),
        ("source", "right"),
        ("bytes", "right"),
        ("ratio", "right"),
        ("rel. error", "right"),
    ):
        t.add_column(c, justify=j, overflow="fold")
    rows = report.quantized
    for r in rows[:limit]:
        t.add_row(
            r.name,
            r.format,
            "×".join(map(str, r.shape)),
            _mb(r.source_bytes),
            _mb(r.bytes),
            f"{r.source_bytes / r.bytes:.2f}",
            f"{r.rel_error:.3e}",
        )
    if len(rows) > limit:
        t.add_row(f"… {len(rows) - limit} more (see conversion_report.json)", "", "", "", "", "", "")
    return t


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[list[int]]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt like SIGINT while the block runs (so the
    conversion cleans up the same way); the list holds the signal that arrived."""
    got: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        got.append(signum)
        raise KeyboardInterrupt

    sigs = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    old = {sg: signal.signal(sg, handler) for sg in sigs}
    try:
        yield got
    finally:
        for sg, h in old.items():
            signal.signal(sg, h)


@app.command(cls=_Command)
def convert(
    src: Annotated[Path, typer.Argument(help="Hugging Face model folder (config.json + safetensors).")],
    dst: Annotated[Path, typer.Argument(help="Output folder (must not exist unless --force).")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help="nvfp4 (ModelOpt), fp8 or w8a8 (compressed-tensors), q2_0 (GGUF type 42): "
            + " | ".join(CONVERT_FORMATS),
        ),
    ] = "nvfp4",
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", "-x", help="Glob of module/tensor names to keep unquantized (repeat)."),
    ] = None,
    ffn_only: Annotated[
        bool,
        typer.Option(
            "--ffn-only",
            help="Quantize only the FFN projections (gate_proj, up_proj, down_proj); "
            "default: every Linear except lm_head, as ModelOpt and llm-compressor do.",
        ),
    ] = False,
    no_default_exclude: Annotated[
        bool, typer.Option("--no-default-exclude", help="Drop the default excludes (lm_head, embeddings).")
    ] = False,
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="safetensors of per-module activation amax (NVFP4 input_scale)."),
    ] = None,
    calibrate: Annotated[
        Path | None,
        typer.Option(
            "--calibrate",
            help="Text file: run SRC with transformers (CPU) over its lines and write NVFP4 input_scale "
            "= amax/(6·448) from the measured activation amax (as ModelOpt does).",
        ),
    ] = None,
    calibration_samples: Annotated[
        int, typer.Option("--calibration-samples", help="Lines of the --calibrate text to run.")
    ] = 64,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing DST.")] = False,
    workers: Annotated[int, typer.Option("--workers", "-j", help="Quantize in a pool of N processes.")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or table.")] = False,
    show: Annotated[int, typer.Option("--show", help="Rows of the report table to print.")] = 30,
) -> None:
    """Quantize SRC's Linear layers (all but lm_head and embeddings; --ffn-only: the FFN) into DST.
    Output goes to a hidden folder beside DST, renamed to DST when complete; each run also
    removes the temporary folders (.NAME.metrale-tmp-*) that killed conversions left in DST's
    parent once the process recorded inside is gone (same host; a live one's is kept)."""
    from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
    from metrale.reference.formats.spec import CONVERT_SERVES, pick_format

    try:
        format = pick_format(format, CONVERT_SERVES, "--format")
    except MetraleError as e:
        raise _fail(str(e)) from None
    opts = ConvertOptions(
        format=format,
        exclude=tuple(exclude or ()),
        ffn_only=ffn_only,
        default_exclude=not no_default_exclude,
        calibration=calibration,
        calibrate=calibrate,
        calibration_samples=calibration_samples,
        force=force,
        workers=workers,
    )
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=_err(),
        transient=False,
        disable=quiet,
    )
    task: list[Any] = []

    def on_start(total: int) -> None:
        task.append(progress.add_task(f"convert → {opts.format}", total=total))
        progress.start()

    def on_tensor(name: str, nbytes: int) -> None:
        progress.advance(task[0], nbytes)

    try:
        with _signals_interrupt() as got:
            try:
                report = convert_checkpoint(src, dst, opts, progress=on_tensor, on_start=on_start)
            finally:
                progress.stop()
    except MetraleError as e:
        raise _fail(str(e)) from None
    except OSError as e:
        raise _fail(f"{e.filename or dst}: {e.strerror or e}") from None
    except KeyboardInterrupt:
        what = signal.Signals(got[0]).name if got else "SIGINT"
        raise _fail(
            f"interrupted ({what}); DST was not written and no temporary files remain",
            128 + (got[0] if got else 2),
        ) from None
    if not quiet:
        out = _out()
        out.print(_report_table(report, show))
        errs = [t.rel_error for t in report.quantized]
        out.print(
            f"wrote [bold]{dst}[/] ({report.layout}): {len(report.quantized)} tensors quantized, "
            f"{len(report.tensors) - len(report.quantized)} copied; {_mb(report.source_bytes)} → "
            f"{_mb(report.output_bytes)} in {report.seconds:.2f} s "
            f"({report.source_bytes / 1e6 / max(report.seconds, 1e-9):.1f} MB/s); "
            f"max rel. error {max(errs):.3e}"
        )


@app.command(cls=_Command)
def inspect(
    path: Annotated[Path, typer.Argument(help="Model folder or .gguf file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Tensors, formats, shapes, bytes and compression ratio (vs bf16) of a checkpoint."""
    from metrale.checkpoint.inspect import scan

    try:
        s = scan(path)
    except MetraleError as e:
        raise _fail(str(e)) from None
    if as_json:
        rows = [
            {"tensor": r.name, "format": r.format, "shape": r.shape, "bytes": r.bytes, "ratio": r.ratio}
            for r in s.rows
        ]
        typer.echo(
            json.dumps(
                {"path": str(s.path), "layout": s.layout, "detail": s.detail, "tensors": rows}, indent=2
            )
        )
        _flag_violations(path)
        return
    t = Table(title=f"{s.path} — {s.layout}{' (' + s.detail + ')' if s.detail else ''}", title_justify="left")
    for c, j in (
        ("tensor", "left"),
        ("format", "left"),
        ("shape", "left"),
        ("bytes", "right"),
        ("ratio", "right"),
    ):
        t.add_column(c, justify=j, overflow="fold")
    for r in s.rows:
        t.add_row(r.name, r.format, "×".join(map(str, r.shape)), f"{r.bytes:,}", f"{r.ratio:.2f}")
    out = _out()
    out.print(t)
    ratio = s.logical_bf16_bytes / s.total_bytes if s.total_bytes else 0.0
    out.print(f"{len(s.rows)} tensors, {s.total_bytes:,} bytes, {ratio:.2f}× smaller than bf16")
    _flag_violations(path)


def _flag_violations(path: Path) -> None:
    """inspect prints what verify (without --against) would reject, as warnings."""
    from metrale.checkpoint.verify import verify_path

    v = verify_path(path).violations
    if v:
        err = _err()
        err.print(
            f"[bold yellow]warning:[/] verify would reject this checkpoint: {len(v)} problem(s)",
            soft_wrap=True,
        )
        from metrale.checkpoint.io import bounded

        for line in v:
            err.print(f"  {bounded(line)}", soft_wrap=True, markup=False)


@app.command(cls=_Command)
def verify(
    path: Annotated[Path, typer.Argument(help="Model folder or .gguf file to check.")],
    against: Annotated[Path | None, typer.Option("--against", help="Source folder to compare with.")] = None,
    max_rel_error: Annotated[
        float | None, typer.Option("--max-rel-error", help="Bound on ‖ŵ−w‖/‖w‖ (default: per format).")
    ] = None,
    exact: Annotated[
        bool, typer.Option("--exact", help="Require metrale's bit-exact quantization of SRC.")
    ] = False,
) -> None:
    """Check layout invariants (and error statistics against SRC); exit 1 on any violation."""
    from metrale.checkpoint.verify import verify_path

    try:
        res = verify_path(path, against, max_rel_error=max_rel_error, exact=exact)
    except MetraleError as e:
        raise _fail(str(e)) from None
    out = _out()
    if res.stats:
        t = Table(title="error against SRC", title_justify="left")
        for c, j in (
            ("tensor", "left"),
            ("format", "left"),
            ("rel. error", "right"),
            ("max |err|", "right"),
            ("bit-exact", "left"),
        ):
            t.add_column(c, justify=j, overflow="fold")
        for st in res.stats:
            t.add_row(
                st.name,
                st.format,
                f"{st.rel_error:.3e}",
                f"{st.max_abs_error:.3e}",
                "yes" if st.bit_exact else "no",
            )
        out.print(t)
        errs = np.array([st.rel_error for st in res.stats])
        out.print(f"rel. error: mean {errs.mean():.3e}, max {errs.max():.3e} over {len(errs)} tensors")
    if res.violations:
        from metrale.checkpoint.io import bounded

        for v in res.violations:
            _err().print(f"[bold red]violation:[/] {escape(bounded(v))}", soft_wrap=True)
        raise typer.Exit(1)
    quantized = sorted({r.format for r in res.scan.rows} - {"bf16", "f16", "f32"})
    if not quantized:
        out.print(
            f"nothing quantized: {res.scan.path} holds {res.checked} tensors, none in a metrale format "
            f"({', '.join(CONVERT_FORMATS)}); nothing to verify (metrale convert writes them)"
        )
        return
    out.print(
        f"[green]OK[/]: {res.checked} tensors checked in {res.scan.path} "
        f"({res.scan.layout}: {', '.join(quantized)})"
    )


#: What the demo's columns mean (printed under its table).
DEMO_COLUMNS = (
    "bytes: the converted folder's safetensors or GGUF size; FFN ratio: the FFN weights' bf16 bytes "
    "over their bytes in the format; max weight err: the largest ||w_q - w|| / ||w|| over the "
    "quantized tensors; verify: `metrale verify DST --against SRC` (layout, and each tensor's error "
    "bound for its format: Q2_0's is 1.0); FFN rel. error: ||y - y_bf16|| / ||y_bf16|| of the "
    "layer's output on 4 random rows, the weights' error carried through the FFN (on this tiny random "
    "model Q2_0's ternary weights give more than 1: verify bounds weights, not outputs)."
)


@app.command(cls=_Command)
def demo(
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Keep the files in this (new) folder.")
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="auto | reference | cuda")] = "auto",
    layer: Annotated[int, typer.Option("--layer", help="Decoder layer whose FFN runs.")] = 0,
) -> None:
    """Convert a generated tiny Llama to all four formats, inspect, verify and run its FFNs.

    The checkpoint is written locally (no download); every Linear but lm_head is converted,
    and the FFN of one layer of each runs through DenseFfnLayer.from_checkpoint."""
    import ml_dtypes

    from metrale.checkpoint.convert import FFN_RE, ConvertOptions, convert_checkpoint, module_of
    from metrale.checkpoint.example import make_example_checkpoint
    from metrale.checkpoint.inspect import scan
    from metrale.checkpoint.verify import verify_path
    from metrale.reference.formats import CONVERT_FORMATS as FORMATS
    from metrale.reference.layer import DenseFfnLayer

    out = _out()
    tmp = None
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="metrale-demo-")
        root = Path(tmp.name)
    else:
        if out_dir.exists():
            raise _fail(f"{out_dir}: exists; give a new folder to --out")
        root = out_dir
    try:
        src = make_example_checkpoint(root / "llama-tiny", hidden=64, intermediate=128, layers=2)
        out.print("example checkpoint: Llama, hidden 64, intermediate 128, 2 layers, bf16")
        x = np.random.default_rng(0).standard_normal((4, 64), dtype=np.float32).astype(ml_dtypes.bfloat16)
        ref = DenseFfnLayer.from_checkpoint(src, layer=layer, backend=backend)(x).astype(np.float64)
        t = Table(title=f"FFN of layer {layer}, 4 rows, vs the bf16 source layer", title_justify="left")
        for c in ("format", "layout", "bytes", "FFN ratio", "max weight err", "verify", "FFN rel. error"):
            t.add_column(c, overflow="fold")
        ok = True
        for fmt in FORMATS:
            dst = root / f"llama-tiny-{fmt}"
            rep = convert_checkpoint(src, dst, ConvertOptions(fmt))
            s = scan(dst)
            v = verify_path(dst, src)
            ok &= v.ok
            y = DenseFfnLayer.from_checkpoint(dst, layer=layer, backend=backend)(x).astype(np.float64)
            err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
            fq = [q for q in rep.quantized if FFN_RE.search(module_of(q.name))]
            ffn = sum(q.source_bytes for q in fq) / sum(q.bytes for q in fq)
            t.add_row(
                fmt,
                s.layout,
                f"{s.total_bytes:,}",
                f"{ffn:.2f}",
                f"{max(q.rel_error for q in rep.quantized):.3f}",
                "OK" if v.ok else "; ".join(v.violations[:2]),
                f"{err:.3f}",
            )
        out.print(t)
        out.print(DEMO_COLUMNS)
        if out_dir is None:
            out.print("files: written to a temporary folder, removed now (--out DIR keeps them)")
        else:
            names = ", ".join(p.name for p in sorted(root.iterdir()))
            out.print(f"files kept in [bold]{escape(str(root))}[/]: {escape(names)}")
        out.print(
            "next: [bold]metrale convert SRC DST --format nvfp4[/], [bold]metrale inspect DST[/], "
            "[bold]metrale verify DST --against SRC[/]"
        )
    except (MetraleError, BackendUnavailable) as e:
        msg = str(e).replace(f"backend={backend.strip().lower()!r}", f"--backend {backend}", 1)
        kept = (
            f" (the files written so far are kept in {out_dir})"
            if out_dir is not None
            else " (its temporary folder was removed)"
        )
        raise _fail(msg + kept) from None
    finally:
        if tmp is not None:
            tmp.cleanup()
    if not ok:
        raise typer.Exit(1)


@app.command(cls=_Command)
def generate(
    model_dir: Annotated[
        Path, typer.Argument(help="Hugging Face model folder (config, weights, tokenizer).")
    ],
    format: Annotated[
        str, typer.Option("--format", "-f", help=" | ".join(FORMAT_NAMES) + " (on the fly)")
    ] = "nvfp4",
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="Prompt text.")] = "The capital of France is",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Tokens to generate.")] = 32,
    compare: Annotated[
        bool, typer.Option("--compare", help="Also run the original MLPs and report where tokens diverge.")
    ] = False,
    checkpoint: Annotated[
        Path | None, typer.Option("--checkpoint", help="FFNs from this converted checkpoint instead.")
    ] = None,
    device: Annotated[str | None, typer.Option("--device", help="cuda | cpu (default: cuda if any)")] = None,
) -> None:
    """Greedy generation with transformers for everything but the FFNs, metrale for the FFNs."""
    try:
        from metrale.generate import generate as run_generate

        r = run_generate(
            model_dir, format, prompt, max_new_tokens, compare=compare, checkpoint=checkpoint, device=device
        )
    except MetraleError as e:
        raise _fail(str(e)) from None
    out = _out()
    src = str(checkpoint) if checkpoint is not None else format
    out.print(f"[bold]{prompt}[/]{r.text}", markup=True, soft_wrap=True)
    out.print(
        f"{len(r.ids)} tokens on {r.device}, FFNs {src}: {r.tokens_per_s:.1f} tokens/s, "
        f"FFN {100 * r.ffn_share:.0f} % of the step time"
    )
    if r.reference_ids is not None:
        if r.first_divergence is None:
            out.print(f"--compare: the original MLPs give the same {len(r.ids)} tokens")
        else:
            i = r.first_divergence
            out.print(
                f"--compare: tokens diverge at generated token {i} "
                f"(metrale {r.ids[i]}, original {r.reference_ids[i]}); {i} tokens agree before it"
            )


def _bench_options() -> list[_inspect.Parameter]:
    """The typer parameters of ``metrale bench``, one per option of the benchmark's argparse
    parser (``metrale.bench.options.parser``, which ``python -m metrale.bench`` uses): the
    options are stated once, and both front ends validate through ``options.parse``."""
    from metrale.bench.options import parser

    params = []
    for a in parser()._actions:
        if not a.option_strings or "--help" in a.option_strings:
            continue
        flag, helptext = a.option_strings[-1], " ".join((a.help or "").split())
        if a.nargs == 0:
            ann: Any = Annotated[bool, typer.Option(flag, help=helptext, metavar="")]
            default: Any = False
        elif a.nargs == "+":
            ann = Annotated[
                list[str] | None,
                typer.Option(flag, help=helptext + " (repeat the option for each)", metavar=a.metavar or "X"),
            ]
            default = None
        else:
            kind = a.type or str
            metavar = a.metavar or a.dest.upper()
            ann = Annotated[
                kind if a.default is not None else kind | None,
                typer.Option(
                    flag,
                    help=helptext,
                    metavar=f"[{metavar}]" if a.nargs == "?" else metavar,
                    show_default=True,
                ),
            ]
            default = a.default
        params.append(
            _inspect.Parameter(a.dest, _inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
        )
    return params


def _bench_argv(values: dict[str, Any]) -> list[str]:
    """The argparse command line of the typer values (defaults left out)."""
    from metrale.bench.options import parser

    argv: list[str] = []
    for a in parser()._actions:
        if a.dest not in values or not a.option_strings:
            continue
        v, flag = values[a.dest], a.option_strings[-1]
        if a.nargs == 0:
            argv += [flag] if v else []
        elif a.nargs == "+":
            argv += [flag, *v] if v else []
        elif v is not None and v != a.default:
            argv += [flag, str(v)]
    return argv


def _bench_optional_values() -> dict[str, str]:
    """The options whose value may be left out (argparse ``nargs="?"``, e.g. ``--report``) and
    the value they then take (their ``const``)."""
    from metrale.bench.options import parser

    return {
        a.option_strings[-1]: str(a.const) for a in parser()._actions if a.nargs == "?" and a.option_strings
    }


class _BenchCommand(_Command):
    """``metrale bench``: a bare ``--report`` (last, or followed by another option) takes its
    default page, as ``python -m metrale.bench --report`` does (typer has no optional values)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        optional, out = _bench_optional_values(), []
        for i, a in enumerate(args):
            out.append(a)
            if a in optional and (i + 1 == len(args) or args[i + 1].startswith("-")):
                out.append(optional[a])
        return super().parse_args(ctx, out)


def bench(**values: Any) -> None:
    """Time the FFN of every format on the GPU, bit-exact against the reference.

    Torch peers and bandwidth ceilings are measured in the same run; --dry-run runs on the
    CPU with tiny shapes. python -m metrale.bench takes the same options."""
    from metrale.bench import main as bench_main

    try:
        rc = bench_main(_bench_argv(values))
    except BackendUnavailable as e:
        raise _fail(f"bench: {e}") from None
    raise typer.Exit(rc)


bench.__signature__ = _inspect.Signature(_bench_options(), return_annotation=None)  # type: ignore[attr-defined]
app.command(cls=_BenchCommand)(bench)


def main() -> None:  # pragma: no cover - console entry for `python -m metrale.cli`
    app()


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
