"""tools/gpu_profile.py's ncu-CSV summary (the ncu run itself needs a GPU machine)."""

from __future__ import annotations

import csv
import importlib.util
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("gpu_profile", ROOT / "tools" / "gpu_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HEADER = ["ID", "Process ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
METRICS = [
    ("0", "nvfp4_a16f_r1", "gpu__time_duration.sum", "12,000"),
    ("0", "nvfp4_a16f_r1", "dram__bytes_read.sum", "24,000,000"),
    ("0", "nvfp4_a16f_r1", "launch__grid_size", "132"),
    ("0", "nvfp4_a16f_r1", "launch__block_size", "512"),
    ("0", "nvfp4_a16f_r1", "smsp__average_warp_latency_issue_stalled_wait.ratio", "5"),
    ("0", "nvfp4_a16f_r1", "smsp__average_warp_latency_issue_stalled_barrier.ratio", "9"),
    ("1", "act_mul", "gpu__time_duration.sum", "2,000"),
]


def _csv() -> str:
    """An ncu --csv report as ncu prints it: a ==PROF== line, then quoted rows."""
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(HEADER)
    for kid, kern, name, value in METRICS:
        w.writerow([kid, "1", kern, "Command line profiler metrics", name, "", value])
    return "==PROF== Connected to process 1\n" + buf.getvalue()


def test_parse_cells() -> None:
    mod = _module()
    want = [("nvfp4", 1), ("nvfp4", 8), ("w8a8", 2)]
    assert mod.parse_cells(["nvfp4:1,8", "w8a8:2"]) == want


def test_summary_rows_in_launch_order_with_bandwidth_and_stalls() -> None:
    mod = _module()
    text = mod.summarize(_csv(), ["nvfp4 m=1 forward: w4a16_gemv act_mul_silu"])
    lines = [ln for ln in text.splitlines() if ln.startswith("| 0 |") or ln.startswith("| 1 |")]
    assert len(lines) == 2
    first = [c.strip() for c in lines[0].strip("|").split("|")]
    # 24e6 bytes in 12,000 ns = 2000 GB/s; the larger stall first
    assert first[1] == "nvfp4_a16f_r1" and first[2] == "132 × 512" and first[4] == "12.00"
    assert first[5] == "2000"
    assert first[-1].startswith("barrier.ratio 9.0, wait.ratio 5.0")
    assert lines[1].split("|")[2].strip() == "act_mul"
    assert "* nvfp4 m=1 forward: w4a16_gemv act_mul_silu" in text
