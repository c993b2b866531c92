#!/usr/bin/env python3
"""Mutation check of the contract's code: each mutation below, alone, must make the CPU suite
fail (``tests/test_vectors.py`` deselected: the stored vectors detect change, not error).

Each mutant is a textual patch (file, old snippet, new snippet) applied to a temporary copy of
the tree (never the working tree). A mutant is run first against its ``tests`` (a targeted,
fast selection); one that survives them is run again against the whole CPU suite, so
"survived" always means the whole suite passed. Mutants marked ``equivalent`` (with the
reason) change no output bit on this platform; they run against their targeted tests only
(the whole suite with ``--full``) and are reported as equivalent when those pass.

    python tools/mutants.py [--only NAME,...] [--full] [--list] [--markdown FILE] [--no-baseline]

First the unmutated tree runs the same selection (the chosen mutants' targeted tests, or the
whole CPU suite with ``--full``) and must pass: a kill on a failing baseline means nothing.

``--full`` runs every mutant against the whole CPU suite (slow: minutes per mutant).
Not part of CI; ``tests/test_mutants_list.py`` only checks that every ``old`` snippet still
occurs exactly once in its file, so the list cannot rot.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Not run against a mutant: the stored vectors, the GPU tests, and the list check (which a
#: mutant fails by construction: its old snippet is gone).
DESELECT = [
    *("--deselect", "tests/test_vectors.py", "--ignore", "tests/gpu"),
    *("--ignore", "tests/test_mutants_list.py", "--ignore", "tests/test_require_gpu.py"),
]


@dataclass(frozen=True)
class Mutant:
    """One mutation: in ``file`` replace ``old`` (occurring exactly once) by ``new``."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    equivalent: str | None = None


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "tree-halves",
        "metrale/reference/tree.py",
        "v = v[0::2] + v[1::2]\n    return v[0]",
        "v = v[: v.shape[0] // 2] + v[v.shape[0] // 2 :]\n    return v[0]",
        ("tests/test_tree_counter.py",),
    ),
    Mutant(
        "tree-pad-plus-zero",
        "metrale/reference/tree.py",
        "NEG_ZERO = np.float32(-0.0)",
        "NEG_ZERO = np.float32(0.0)",
        ("tests/test_tree_counter.py",),
    ),
    Mutant(
        "a4-block-value-order",
        "metrale/reference/projection.py",
        "v = np.multiply(s, ws, out=s)\n        v = np.multiply(v, asc, out=v)",
        "v = np.multiply(s, ws * asc, out=s)",
        ("tests/test_root_oracle.py",),
        equivalent="S (≤ 12 significant bits) · ws · as (4 bits each, no underflow: ≥ 2^-18) is "
        "exact in f32 in either order",
    ),
    Mutant(
        "a4-row-scale-order",
        "metrale/reference/projection.py",
        "return root * F32(F32(w.input_scale) * F32(w.weight_scale_2))",
        "return (root * F32(w.input_scale)) * F32(w.weight_scale_2)",
        ("tests/test_root_oracle.py",),
    ),
    Mutant(
        "a16-round-half-away",
        "metrale/reference/activations.py",
        "c = np.rint(np.ldexp(v, (frac_bits - e)[..., None]))",
        "c = np.ldexp(v, (frac_bits - e)[..., None])\n        c = np.sign(c) * np.floor(np.abs(c) + 0.5)",
        ("tests/test_activations.py", "tests/test_root_oracle.py"),
    ),
    Mutant(
        "a16-zero-field-not-one",
        "metrale/reference/activations.py",
        "f = np.maximum(field.reshape(shp), 1)",
        "f = field.reshape(shp)",
        ("tests/test_activations.py", "tests/test_root_oracle.py"),
    ),
    Mutant(
        "to-bf16-nan-not-canonical",
        "metrale/reference/elements.py",
        "bits = np.where(np.isnan(x), BF16_CANONICAL_NAN, bits).astype(np.uint16)",
        "bits = bits.astype(np.uint16)",
        ("tests/test_elements.py",),
    ),
    Mutant(
        "e4m3-clamp-480",
        "metrale/reference/elements.py",
        "return np.clip(x, -E4M3_MAX, E4M3_MAX).astype(E4M3)",
        "return np.clip(x, -480.0, 480.0).astype(E4M3)",
        ("tests/test_elements.py", "tests/test_formats.py"),
    ),
    Mutant(
        "a8-scale-127.5",
        "metrale/reference/activations.py",
        "s = (amax / F32(127.0)).astype(F32)",
        "s = (amax / F32(127.5)).astype(F32)",
        ("tests/test_activations.py",),
    ),
    Mutant(
        "w8a8-weight-clamp-127",
        "metrale/reference/formats/w8a8.py",
        "np.clip(np.rint(w32 / scale[:, None]), -128, 127)",
        "np.clip(np.rint(w32 / scale[:, None]), -127, 127)",
        ("tests/test_formats.py", "tests/test_convert.py"),
    ),
    Mutant(
        "nvfp4-s2-447",
        "metrale/reference/formats/nvfp4.py",
        "s2 = own / F32(6.0 * 448.0)",
        "s2 = own / F32(6.0 * 447.0)",
        ("tests/test_formats.py", "tests/test_convert.py"),
    ),
    Mutant(
        "nvfp4-scale-floor-2^-10",
        "metrale/reference/formats/nvfp4.py",
        "np.maximum(q_scale, F32(2.0**-9))",
        "np.maximum(q_scale, F32(2.0**-10))",
        ("tests/test_formats.py", "tests/test_convert.py"),
    ),
    Mutant(
        "q2-rint",
        "metrale/reference/formats/q2_0.py",
        "level = np.clip(_round_half_away((blocks * inv[..., None]).astype(F32)), -1, 2)",
        "level = np.clip(np.rint((blocks * inv[..., None]).astype(F32)), -1, 2)",
        ("tests/test_formats.py", "tests/test_convert.py"),
    ),
    Mutant(
        "q2-lut-reversed",
        "metrale/reference/projection.py",
        "((_B >> (2 * i)) & 3) - 1 for i in range(4)",
        "((_B >> (2 * i)) & 3) - 1 for i in range(3, -1, -1)",
        ("tests/test_projection_accuracy.py", "tests/test_root_oracle.py"),
    ),
    Mutant(
        "prefill-gate-up-swapped",
        "metrale/reference/layer.py",
        "quant_gemm_pair(b, x, ws.gate_proj, gate_out, ws.up_proj, up_out)",
        "quant_gemm_pair(b, x, ws.up_proj, gate_out, ws.gate_proj, up_out)",
        ("tests/test_layer_oracle.py",),
    ),
    Mutant(
        "batchm-cap-33",
        "metrale/reference/dispatch.py",
        "    if m > 32:\n",
        "    if m > 33:\n",
        ("tests/test_layer_errors.py", "tests/test_layer_routing.py"),
    ),
    Mutant(
        "w8a8-arm-accepts-gelu",
        "metrale/reference/layer.py",
        'if self.activation != FfnActivation.SiLU:\n            raise MetraleError("W8A8 FFN arm',
        'if False:\n            raise MetraleError("W8A8 FFN arm',
        ("tests/test_layer_errors.py", "tests/test_layer_routing.py"),
    ),
    Mutant(
        "lora-down-skipped",
        "metrale/reference/layer.py",
        "self._lora(ctx, self.lora.down_proj, b.gate_out()[:m], b.output()[:m])",
        "pass",
        ("tests/test_layer_oracle.py",),
    ),
    Mutant(
        "w4a4-batch-single-row-a4",
        "metrale/reference/tiers.py",
        'return declares_a4 and self.mode in ("w4a4", "w4a4-all")',
        'return declares_a4 and self.mode in ("w4a4", "w4a4-all", "w4a4-batch")',
        ("tests/test_layer_routing.py",),
    ),
    Mutant(
        "fused-siblings-need-3",
        "metrale/checkpoint/fusion.py",
        "if len(group) > 1:",
        "if len(group) > 2:",
        ("tests/test_convert_fused.py",),
    ),
    Mutant(
        "verify-siblings-need-3",
        "metrale/checkpoint/verify.py",
        "if len(bits) > 1:",
        "if len(bits) > 2:",
        ("tests/test_convert_fused.py", "tests/test_cli.py"),
    ),
    Mutant(
        "a4-amax-div-6",
        "metrale/reference/activations.py",
        "s = g * (amax * F32(1.0 / 6.0))",
        "s = g * (amax / F32(6.0))",
        ("tests/test_activations.py", "tests/test_root_oracle.py"),
    ),
    Mutant(
        "act-mul-table-bf16-first",
        "metrale/reference/tables.py",
        "a = table(activation)[gate.view(np.uint16)]",
        "a = to_bf16(table(activation)[gate.view(np.uint16)]).astype(np.float32)",
        ("tests/test_tables.py",),
    ),
    Mutant(
        "nonfinite-block-mask-dropped",
        "metrale/reference/projection.py",
        "if finite is not None and not finite.all():",
        "if False:",
        ("tests/test_root_oracle.py",),
    ),
    Mutant(
        "a8-no-zero-inf-rule",
        "metrale/reference/activations.py",
        "prod = np.where(np.isnan(prod), F32(0), prod)\n    q = np.clip",
        "q = np.clip",
        ("tests/test_activations.py", "tests/test_root_oracle.py"),
    ),
    Mutant(
        "a4-divide-by-d",
        "metrale/reference/activations.py",
        "prod = xb * os_[..., None]",
        "prod = xb / d[..., None]",
        ("tests/test_activations.py", "tests/test_root_oracle.py"),
    ),
    Mutant(
        "nvfp4-scale-amax-div-6-then-s2",
        "metrale/reference/formats/nvfp4.py",
        "amax_b / (F32(6.0) * s2)",
        "(amax_b / F32(6.0)) / s2",
        ("tests/test_formats.py", "tests/test_convert.py"),
    ),
    Mutant(
        "input-scale-447",
        "metrale/reference/formats/nvfp4.py",
        "input_scale = F32(input_amax) / F32(6.0 * 448.0)",
        "input_scale = F32(input_amax) / F32(6.0 * 447.0)",
        ("tests/test_formats.py", "tests/test_calibrate.py", "tests/test_convert.py"),
    ),
    Mutant(
        "quant-algo-always-nvfp4",
        "metrale/checkpoint/layouts.py",
        'return "NVFP4" if declares_a4 else "W4A16_NVFP4"',
        'return "NVFP4"',
        ("tests/test_convert.py", "tests/test_cli.py"),
    ),
    Mutant(
        "gguf-rope-permutation-inverted",
        "metrale/checkpoint/gguf_q2.py",
        "w.reshape(heads, 2, n // heads // 2, *w.shape[1:]).swapaxes(1, 2)",
        "w.reshape(heads, n // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2)",
        ("tests/test_gguf_model.py", "tests/test_convert.py"),
    ),
    Mutant(
        "verify-exact-never-reports",
        "metrale/checkpoint/verify.py",
        "if exact and not same:",
        "if False:",
        ("tests/test_verify_exact.py",),
    ),
    Mutant(
        "w8a8-output-scale-order",
        "metrale/reference/projection.py",
        "(s.astype(F32) * a_scale[:, None]) * w.weight_scale[None, :]",
        "s.astype(F32) * (a_scale[:, None] * w.weight_scale[None, :])",
        ("tests/test_root_oracle.py",),
    ),
    Mutant(
        "a4-no-nan-to-zero",
        "metrale/reference/activations.py",
        "np.clip(np.where(np.isnan(prod), F32(0), prod), F32(-6.0), F32(6.0))",
        "np.clip(prod, F32(-6.0), F32(6.0))",
        ("tests/test_activations.py", "tests/test_root_oracle.py"),
    ),
    Mutant(
        "lora-expand-rounds-first",
        "metrale/reference/lora.py",
        "to_bf16(out.astype(F32) + F32(lora.scale) * p)",
        "to_bf16(out.astype(F32) + to_bf16(F32(lora.scale) * p).astype(F32))",
        ("tests/test_layer_oracle.py",),
    ),
)


def apply(m: Mutant, root: Path) -> None:
    """Patch ``m`` into the tree at ``root``; ValueError unless ``old`` occurs exactly once."""
    path = root / m.file
    text = path.read_text()
    if text.count(m.old) != 1:
        raise ValueError(f"{m.name}: {m.file} holds the old snippet {text.count(m.old)} times, want 1")
    path.write_text(text.replace(m.old, m.new))


def copy_tree(dst: Path) -> None:
    """The working tree's tracked and untracked-not-ignored files into ``dst``."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for f in filter(None, files):
        src = ROOT / f.decode()
        if src.is_file():
            (dst / f.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f.decode())


def pytest(root: Path, selection: list[str], timeout: int) -> tuple[bool, str]:
    """Run pytest in ``root`` on ``selection`` (stop at the first failure): (passed, the first
    FAILED/ERROR line or the last line). A usage error or an empty selection (exit 4, 5) is the
    list's fault, not a kill: SystemExit."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-n", "2", "-p", "no:cacheprovider", *DESELECT]
    try:
        p = subprocess.run(
            cmd + selection, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout}s"
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    if p.returncode in (4, 5):
        raise SystemExit(f"mutants: pytest {' '.join(selection)} exited {p.returncode}: {lines[-1:]}")
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    return p.returncode == 0, (failed[0] if failed else lines[-1] if lines else f"rc {p.returncode}")


def check_copy(root: Path) -> None:
    """The copy's ``metrale`` is the one imported there (not the editable install's)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    got = subprocess.run(
        [sys.executable, "-c", "import metrale; print(metrale.__file__)"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not got.startswith(str(root)):
        raise SystemExit(f"mutants: the copy imports metrale from {got}, not from {root}")


def baseline(chosen: list[Mutant], full: bool, timeout: int) -> str:
    """The unmutated tree must pass what the mutants run against (their targeted tests; the
    whole CPU suite with ``full``): a kill means nothing on a failing baseline. SystemExit
    otherwise; returns a one-line summary."""
    with tempfile.TemporaryDirectory(prefix="mutant-baseline-") as tmp:
        root = Path(tmp)
        copy_tree(root)
        check_copy(root)
        t0 = time.time()
        sel = ["tests"] if full else sorted({t for m in chosen for t in m.tests})
        passed, line = pytest(root, sel, timeout)
    if not passed:
        raise SystemExit(f"mutants: the unmutated tree fails {' '.join(sel)}: {line}")
    return f"baseline: the unmutated tree passes {len(sel)} test path(s) in {time.time() - t0:.0f}s"


def run(m: Mutant, full: bool, timeout: int) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{m.name}-") as tmp:
        root = Path(tmp)
        copy_tree(root)
        check_copy(root)
        apply(m, root)
        t0 = time.time()
        passed, line = (True, "") if full else pytest(root, list(m.tests), timeout)
        where = "targeted"
        if passed and (full or m.equivalent is None):
            passed, line = pytest(root, ["tests"], timeout)
            where = "whole CPU suite"
    if not passed:
        verdict = "killed" if m.equivalent is None else "killed (listed equivalent)"
    else:
        verdict = "equivalent" if m.equivalent else "SURVIVED"
    return {
        "name": m.name,
        "file": m.file,
        "verdict": verdict,
        "by": where if not passed else f"{where} passed",
        "detail": line if not passed else (m.equivalent or ""),
        "seconds": f"{time.time() - t0:.0f}",
    }


def markdown(results: list[dict[str, str]]) -> str:
    rows = [
        "| # | mutant | file | verdict | by | first failure / reason | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(results, 1):
        detail = r["detail"].replace("|", "\\|")
        rows.append(
            f"| {i} | {r['name']} | {r['file']} | {r['verdict']} | {r['by']} | {detail} | {r['seconds']} |"
        )
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--full", action="store_true", help="every mutant against the whole CPU suite")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--markdown", type=Path, help="also write the result table to this file")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per pytest run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the mutants' tests")
    args = ap.parse_args()
    chosen = list(MUTANTS)
    if args.only:
        want = set(args.only.split(","))
        unknown = want - {m.name for m in MUTANTS}
        if unknown:
            raise SystemExit(f"mutants: unknown {sorted(unknown)}")
        chosen = [m for m in MUTANTS if m.name in want]
    if args.list:
        for m in chosen:
            print(f"{m.name:34} {m.file}" + (f"  (equivalent: {m.equivalent})" if m.equivalent else ""))
        return 0
    if not args.no_baseline:
        print(baseline(chosen, args.full, args.timeout), flush=True)
    results = []
    for m in chosen:
        r = run(m, args.full, args.timeout)
        print(f"{r['name']:34} {r['verdict']:12} {r['seconds']:>5}s  {r['by']}: {r['detail']}", flush=True)
        results.append(r)
    table = markdown(results)
    if args.markdown:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        import ml_dtypes
        import numpy

        py = platform.python_version()
        env = f"Python {py}, numpy {numpy.__version__}, ml_dtypes {ml_dtypes.__version__}"
        mode = "whole CPU suite" if args.full else "targeted, then the whole CPU suite for survivors"
        args.markdown.write_text(
            f"Run {stamp} ({platform.machine()}, {env}; {mode}), {len(results)} mutants.\n\n{table}"
        )
    survived = [r["name"] for r in results if r["verdict"] == "SURVIVED"]
    print(
        f"{len(results)} mutants: {sum(r['verdict'].startswith('killed') for r in results)} killed, "
        f"{sum(r['verdict'] == 'equivalent' for r in results)} equivalent, {len(survived)} survived"
        + (f" ({', '.join(survived)})" if survived else "")
    )
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
