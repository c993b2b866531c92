#!/usr/bin/env python3
"""The code blocks of README.md and docs/*.md, and running them as written.

A fenced block's info string is its language and tags: ```python, ```bash (run on the CPU by
``tests/test_doc_examples.py``), ```python gpu / ```bash gpu (need CUDA: run on the GPU
machine by ``tools/gpu_check.py``, through ``python tools/doc_examples.py --gpu``),
```bash no-run: REASON (never run, the reason stated), ```text (pseudo-code, not a program).
Every block is run alone, as a script in an empty folder: each one is self-contained.

    python tools/doc_examples.py [--gpu] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANGS = ("python", "bash", "text")
_FENCE = re.compile(r"^```(.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: ``path``:``line`` (of the opening fence), ``lang``, ``gpu`` (needs
    CUDA), ``no_run`` (the reason it is not run; None: it runs) and its ``code``."""

    path: Path
    line: int
    lang: str
    gpu: bool
    no_run: str | None
    code: str

    @property
    def where(self) -> str:
        p = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{p}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang != "text" and self.no_run is None


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, in order. ValueError for an unclosed fence."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        info = m.group(1).strip()
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start + 1}: unclosed code fence")
        i += 1
        lang, _, rest = info.partition(" ")
        rest = rest.strip()
        no_run = rest.split(":", 1)[1].strip() if rest.startswith("no-run") else None
        out.append(Block(path, start + 1, lang, rest == "gpu", no_run, "\n".join(body) + "\n"))
    return out


def all_blocks() -> list[Block]:
    return [b for p in doc_files() for b in blocks(p)]


def run(block: Block, work: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``block`` as a script in the empty folder ``work`` with this interpreter's
    environment (its bin folder first on PATH, so ``metrale`` and ``python`` are its)."""
    work.mkdir(parents=True, exist_ok=True)
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("METRALE_BACKEND", None)
    if block.lang == "python":
        script = work / "snippet.py"
        script.write_text(block.code, encoding="utf-8")
        cmd = [sys.executable, str(script)]
    elif block.lang == "bash":
        cmd = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        raise ValueError(f"{block.where}: a {block.lang or 'plain'} block is not a program")
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true", help="run the blocks tagged gpu (else the CPU ones)")
    ap.add_argument("--work", type=Path, default=None, help="folder for the blocks' files (default: a temp)")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="metrale-docs-"))
    failed = 0
    for n, b in enumerate(x for x in all_blocks() if x.runs and x.gpu == a.gpu):
        try:
            r = run(b, work / f"{n:02d}")
            rc, text = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            rc, text = 124, "timed out"
        print(f"{'OK  ' if rc == 0 else 'FAIL'} {b.where} ({b.lang})", flush=True)
        if rc:
            failed += 1
            print("\n".join("    " + t for t in text.splitlines()[-20:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
