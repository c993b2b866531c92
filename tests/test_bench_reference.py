"""``tools/bench_reference.py``: each timed call reports its wall and its CPU time (the figure
a shared machine's load does not inflate), and the entry point's kernels."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.layer_cases import small_nvfp4_layer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import bench_reference as br


def test_time_rows_gives_wall_and_cpu_times(monkeypatch) -> None:
    layer = small_nvfp4_layer()
    monkeypatch.setattr(br, "HIDDEN", 64)
    times, cpu, kernels = br.time_rows(layer, 1, 3)
    assert len(times) == len(cpu) == 3 and all(t > 0 for t in times) and all(c >= 0 for c in cpu)
    assert kernels.startswith("w4a16_gemv")
