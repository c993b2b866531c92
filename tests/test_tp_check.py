"""tools/tp_check.py's CPU mode (reference backend, gloo): it runs, writes its JSON, and fails
loudly when a rank's bits differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "tp.json"
    cmd = [sys.executable, str(ROOT / "tools" / "tp_check.py"), "--device", "cpu", "--out", str(out), *extra]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=300,
    )


def test_cpu_mode_checks_every_split_and_writes_json(tmp_path: Path) -> None:
    r = _run(tmp_path, "--formats", "w4a4,w8a8,q2_0", "--m", "1,4,80")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "tp.json").read_text())
    assert doc["problems"] == []
    assert doc["environment"]["mode"] == "cpu" and doc["environment"]["world_size"] == 1
    got = {(x["format"], x["split"], x["m"]) for x in doc["results"]}
    assert got == {(f, s, m) for f in ("w4a4", "w8a8", "q2_0") for s in "kn" for m in (1, 4, 80)}
    assert "every output bit equals" in r.stdout


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    r = _run(tmp_path, "--formats", "int3")
    assert r.returncode == 2 and "--formats: 'int3' unknown" in r.stderr
    assert not (tmp_path / "tp.json").exists()
