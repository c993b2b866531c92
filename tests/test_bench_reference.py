"""``tools/bench_reference.py``: each timed call reports its wall and its CPU time (the figure
a shared machine's load does not inflate), and the entry point's kernels."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import bench_reference as br

import metrale


def test_time_rows_gives_wall_and_cpu_times(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    w = lambda n, k: metrale.Nvfp4Weight.quantize(rng.standard_normal((n, k), dtype=np.float32))  # noqa: E731
    layer = metrale.DenseFfnLayer(
        metrale.FfnConfig(64, 128),
        weights=metrale.FfnWeights(w(128, 64), w(128, 64), w(64, 128)),
        backend="reference",
    )
    monkeypatch.setattr(br, "HIDDEN", 64)
    times, cpu, kernels = br.time_rows(layer, 1, 3)
    assert len(times) == len(cpu) == 3 and all(t > 0 for t in times) and all(c >= 0 for c in cpu)
    assert kernels.startswith("w4a16_gemv")
