#!/usr/bin/env python3
"""One call on the GPU machine: build every kernel file, run the GPU tests (and the
backend-parametrized vector / batch-invariance tests on ``cuda``), the docs' code blocks tagged
``gpu`` (``tools/doc_examples.py --gpu``), compute-sanitizer memcheck
over a small GPU test subset, and the FFN benchmark. Logs go to ``--out`` (default $OUT);
a summary is printed last.

    python tools/gpu_check.py [--skip tests,docs,sanitizer,bench] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sh(
    cmd: list[str] | str, log: Path, timeout: int, env: dict[str, str] | None = None
) -> tuple[int, str, float]:
    t0 = time.time()
    try:
        p = subprocess.run(
            cmd,
            shell=isinstance(cmd, str),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        text = (
            (exc.stdout or b"").decode(errors="replace")
            if isinstance(exc.stdout, bytes)
            else (exc.stdout or "")
        )
        text += f"\n[timed out after {timeout}s]"
    log.write_text(text)
    return rc, text, time.time() - t0


def build(out: Path) -> str:
    t0 = time.time()
    import cupy

    from metrale.cuda import cuda_backend, runtime
    from metrale.reference.backend import KERNEL_NAMES

    be = cuda_backend()
    missing = [k for k in KERNEL_NAMES if not be.has(k)]
    props = runtime.device_props(runtime.device_id())
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    lines = [
        f"device: {name}, cc {props['major']}.{props['minor']}, {props['multiProcessorCount']} SMs; "
        f"cupy {cupy.__version__}; python {sys.version.split()[0]}",
        f"build: {len(be.kernels)} of {len(KERNEL_NAMES)} kernels in {time.time() - t0:.1f}s; "
        f"missing: {missing}",
    ]
    for key, err in {**runtime.build_errors, **{(k, -1): v for k, v in be.import_errors.items()}}.items():
        lines.append(f"  error {key}: {err[:2000]}")
    text = "\n".join(lines)
    (out / "build.log").write_text(text)
    return text


def tail_summary(text: str, n: int = 25) -> str:
    keep = [
        ln for ln in text.splitlines() if re.search(r"passed|failed|error|FAILED|ERROR|metrale GPU|SEED", ln)
    ]
    return "\n".join(keep[-n:])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--skip", default="")
    ap.add_argument("--pytest-args", default="")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(args.skip.split(","))
    seed = os.environ.get("METRALE_TEST_SEED") or str(int.from_bytes(os.urandom(4), "little"))
    env = {
        "METRALE_TEST_SEED": seed,
        "METRALE_REQUIRE_GPU": "1",  # a CuPy import error fails the run instead of skipping it
        "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}",
    }
    summary = [f"date {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; METRALE_TEST_SEED={seed}"]
    rc_all = 0
    summary.append(build(out))
    py = sys.executable
    if "tests" not in skip:
        rc, text, dt = sh(
            f"{py} -m pytest -q -p no:cacheprovider -rfE tests/gpu {args.pytest_args}",
            out / "pytest_gpu.log",
            420,
            env,
        )
        summary.append(f"--- pytest tests/gpu: rc={rc} in {dt:.0f}s\n{tail_summary(text)}")
        rc_all |= rc
    if "bench" not in skip:
        rc, text, dt = sh(
            f"{py} -m metrale.bench --shape qwen3-8b --m decode --peers none "
            f"--json {out}/bench.json --md {out}/bench.md",
            out / "bench.log",
            300,
            env,
        )
        summary.append(f"--- bench: rc={rc} in {dt:.0f}s\n" + "\n".join(text.splitlines()[-14:]))
        rc_all |= rc
    if "tests" not in skip:
        shared = [
            p
            for p in (
                "tests/test_vectors.py",
                "tests/test_batch_invariance.py",
                "tests/test_public_api.py",
                "tests/test_layer_errors.py",
            )
            if (ROOT / p).exists()
        ]
        if shared:
            rc, text, dt = sh(
                f"{py} -m pytest -q -p no:cacheprovider -rfE -k cuda -n 4 {' '.join(shared)}",
                out / "pytest_shared.log",
                300,
                env,
            )
            summary.append(
                f"--- pytest {' '.join(shared)} -k cuda: rc={rc} in {dt:.0f}s\n{tail_summary(text)}"
            )
            rc_all |= rc
    if "docs" not in skip:
        rc, text, dt = sh(f"{py} tools/doc_examples.py --gpu", out / "doc_examples.log", 600, env)
        summary.append(f"--- doc examples tagged gpu: rc={rc} in {dt:.0f}s\n{tail_summary(text, 10)}")
        rc_all |= rc
    if "sanitizer" not in skip:
        san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
        sel = "N37 or N7- or N29 or act_mul or lora or bad_arguments or torch or call_returns or pdl"
        rc, text, dt = sh(
            f"{san} --tool memcheck --report-api-errors no --error-exitcode 9 --print-limit 20 "
            f"{py} -m pytest -q -p no:cacheprovider -x "
            "tests/gpu/test_cuda_nvfp4.py tests/gpu/test_cuda_layer.py tests/gpu/test_cuda_pdl.py "
            f"-k '{sel}'",
            out / "sanitizer.log",
            300,
            env,
        )
        errs = re.findall(r"ERROR SUMMARY: (\d+) error", text)
        summary.append(
            f"--- compute-sanitizer memcheck: rc={rc} in {dt:.0f}s; ERROR SUMMARY {errs[-1:] or '?'}\n"
            f"{tail_summary(text, 8)}"
        )
        rc_all |= rc
    s = "\n".join(summary)
    (out / "summary.txt").write_text(s)
    print(s)
    return rc_all


if __name__ == "__main__":
    sys.exit(main())
