"""The kernel-variant harness (``metrale bench --variants FAMILY``) on the CPU: every family's
candidates are kernels the files build, the routing's choice is among them, their settings are
attributes that exist and come back afterwards, and the document (schema, verdicts, the fastest
bit-equal candidate) from a fake runner with a fake timer."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from metrale.bench import options, variants
from metrale.bench.cases import FORMATS, SHAPES
from metrale.bench.measure import Plan, Timing
from metrale.cuda import configs
from metrale.cuda.runtime import source
from metrale.errors import MetraleError
from tests.test_cuda_compile import instantiation_of

ALL = {f: variants.plan(f, SHAPES, None, list(FORMATS)) for f in variants.FAMILIES}


@pytest.mark.parametrize("family", list(variants.FAMILIES))
def test_every_candidate_is_a_built_kernel(family: str) -> None:
    for cell in ALL[family]:
        assert cell.candidates, (family, cell)
        for cand in cell.candidates:
            for cu, name in cand.kernels:
                line = instantiation_of(cu, name)
                assert line in source(cu).splitlines(), (family, cell.proj, cell.m, cand.name, name)


@pytest.mark.parametrize("family", list(variants.FAMILIES))
def test_candidate_names_are_distinct_and_settings_exist(family: str) -> None:
    for cell in ALL[family]:
        names = [c.name for c in cell.candidates]
        assert len(names) == len(set(names)), (cell, names)
        for cand in cell.candidates:
            for mod, attr, _ in cand.settings:
                assert hasattr(importlib.import_module(mod), attr), (cand.name, mod, attr)


def test_the_routings_choice_is_a_candidate() -> None:
    """Where the routing is fixed by configs.py (not by the device), exactly one candidate is it."""
    for family, cells in ALL.items():
        for cell in cells:
            routed = [c.name for c in cell.candidates if c.routed]
            device_decides = family == "w8a8-gemm" and cell.m > variants.DECODE_MAX
            assert len(routed) == (0 if device_decides else 1), (family, cell.proj, cell.m, routed)


def test_routed_candidates_name_the_configured_kernels() -> None:
    """The routed candidate of a cell is the configs.py table's entry (read independently here)."""
    q2 = {(c.shape, c.proj, c.m): c for c in ALL["q2-dec"]}
    # Qwen3-8B down (N = 4096 <= 8192) at m = 1: the first route entry, c4l4
    assert [c.name for c in q2[("qwen3-8b", "down", 1)].candidates if c.routed] == [
        configs.Q2_0_DEC_ROUTE[0][2]
    ]
    fp8 = next(c for c in ALL["fp8-dec"] if c.fmt == "fp8" and c.m == 1)
    assert [c.name for c in fp8.candidates if c.routed] == [configs.FP8_BF16_DEC[1].name("fp8", 1)]
    gemm = next(c for c in ALL["fp8-gemm"] if c.fmt == "bf16" and c.proj == "down" and c.m == 4096)
    nt, b = configs.FP8_BF16_GEMM_TILES[7]  # K = 12288: 96 steps, depth 7
    raster = "rows" if configs.FP8_BF16_GEMM_ROWS_FIRST else "cols"
    want = f"d7_nt{nt}_b{b}_{configs.FP8_BF16_GEMM_SUFFIX[7]}_{raster}"
    assert [c.name for c in gemm.candidates if c.routed] == [want]


def test_fp8_gemm_covers_each_depth_entry_suffix_and_raster() -> None:
    cell = next(c for c in ALL["fp8-gemm"] if c.shape == "qwen3-8b" and c.proj == "gate" and c.m == 512)
    names = {c.name for c in cell.candidates}
    late = [(d, nt, b) for d, nt, b in configs.fp8_bf16_gemm_late_builds() if d == 5]
    assert {f"d5_nt{nt}_b{b}_l_{r}" for _, nt, b in late for r in ("rows", "cols")} <= names
    assert {"k-split", "all_p_rows", "all_p_cols", "all_l_rows", "all_l_cols"} <= names


def test_applied_sets_and_restores() -> None:
    from metrale.cuda import fp8_bf16

    before = dict(fp8_bf16.GEMM_SUFFIX), fp8_bf16.GEMM_ROWS_FIRST
    with (
        pytest.raises(RuntimeError),
        variants.applied(
            (
                ("metrale.cuda.fp8_bf16", "GEMM_SUFFIX", {5: "x"}),
                ("metrale.cuda.fp8_bf16", "GEMM_ROWS_FIRST", 7),
            )
        ),
    ):
        assert fp8_bf16.GEMM_SUFFIX == {5: "x"} and fp8_bf16.GEMM_ROWS_FIRST == 7
        raise RuntimeError
    assert (dict(fp8_bf16.GEMM_SUFFIX), fp8_bf16.GEMM_ROWS_FIRST) == before


class FakeRunner:
    """Bits from a seeded pool (the routed ones equal the reference); ``wrong`` candidates return
    other bits, ``broken`` ones raise; each candidate's time is its index + 1 µs (the routing 50)."""

    def __init__(
        self, wrong: set[str] = frozenset(), broken: set[str] = frozenset(), drift: bool = False
    ) -> None:
        self.wrong, self.broken, self.drift = wrong, broken, drift
        self.plan = Plan(1.0, 3, 1.0)

    def _bits(self, cell: variants.Cell) -> np.ndarray:
        rng = np.random.default_rng([cell.n, cell.k])
        pool = rng.integers(0, 1 << 16, (cell.sets, 64, cell.n), dtype=np.uint16)
        out = pool[:, : cell.m].copy()
        if self.drift and cell.m == 1:
            out[0, 0, 0] ^= 1
        return out

    def bits(self, cell: variants.Cell, cand: variants.Candidate | None) -> np.ndarray:
        if cand is not None and cand.name in self.broken:
            raise MetraleError(f"{cand.name} did not build on this device")
        out = self._bits(cell)
        if cand is not None and cand.name in self.wrong:
            out[-1, -1, -1] ^= 0x8000
        return out

    def reference(self, cell: variants.Cell, rows: list[int]) -> np.ndarray:
        return self._bits(cell)[:, rows]

    def time(self, cell: variants.Cell, cand: variants.Candidate | None) -> Timing:
        us = 50.0 if cand is None else 1.0 + [c.name for c in cell.candidates].index(cand.name)
        return Timing(us, "graph", 8, 3, 0.01)

    def weight_bytes(self, cell: variants.Cell) -> int:
        return cell.n * cell.k

    def floor_us(self, cell: variants.Cell) -> float:
        return 10.0

    def device(self) -> dict[str, Any]:
        return {"gpu": "fake", "ceilings_GBps": {"read_GBps": 4400.0}, "l2_bytes": 1 << 20, "timing": {}}


def _small_cells() -> list[variants.Cell]:
    return variants.plan("q2-dec", {"tiny": (128, 256)}, [1, 3], ["q2_0"])


def test_document_schema_and_verdicts(tmp_path: Path) -> None:
    cells = _small_cells()
    out = tmp_path / "v.json"
    assert variants.run("q2-dec", cells, FakeRunner(), "metrale bench --variants q2-dec", out) == 0
    doc = json.loads(out.read_text())
    assert {"family", "command", "date", "gpu", "ceilings_GBps", "measurement", "configs", "cells"} <= set(
        doc
    )
    assert doc["family"] == "q2-dec" and doc["exact"] is True and doc["mismatches"] == []
    assert set(doc["configs"]) == set(variants.TABLES["q2-dec"])
    assert len(doc["cells"]) == len(cells) == 4
    for rec in doc["cells"]:
        assert rec["reference_exact"] and rec["batch_invariant"]
        assert rec["routing"]["us"] == 50.0 and rec["routing"]["x_floor"] == 5.0
        first = rec["candidates"][0]
        assert first["bits_equal_routed"] and first["us"] == 1.0 and first["method"] == "graph"
        assert rec["fastest"] == first["name"]
        assert rec["routed"] == next(c["name"] for c in rec["candidates"] if c["routed"])
        assert {"name", "kernels", "routed", "bits_equal_routed", "us", "GBps", "x_floor", "spread"} <= set(
            first
        )
        # tiny (128, 256): gate N = 256, K = 128 and down N = 128, K = 256, one set: m * 256 * 8
        # block values either way; at 50 µs (routing) and 1 µs (the first candidate)
        values = rec["m"] * 256 * 8
        assert rec["routing"]["T_block_values_per_s"] == round(values / 50e-6 / 1e12, 3)
        assert first["T_block_values_per_s"] == round(values / 1e-6 / 1e12, 3)


def test_w8a8_has_no_epilogue_rate() -> None:
    cell = variants.plan("w8a8-gemm", {"tiny": (128, 256)}, [4], ["w8a8"])[0]
    assert variants.block_values(cell) is None
    nv = variants.plan("nvfp4-gemm", {"tiny": (128, 256)}, [64], ["nvfp4"])[0]  # gate+up: 2 sets
    assert nv.sets == 2 and variants.block_values(nv) == 64 * 256 * (128 // 16) * 2


def test_a_candidate_with_other_bits_fails_the_run_and_is_not_timed(tmp_path: Path) -> None:
    cells = _small_cells()
    wrong = cells[0].candidates[0].name
    out = tmp_path / "v.json"
    assert variants.run("q2-dec", cells, FakeRunner(wrong={wrong}), "cmd", out) == 1
    doc = json.loads(out.read_text())
    assert doc["exact"] is False
    assert len(doc["mismatches"]) == len(cells) and all(wrong in m for m in doc["mismatches"])
    for rec in doc["cells"]:
        bad = rec["candidates"][0]
        assert bad["bits_equal_routed"] is False and "us" not in bad
        assert rec["fastest"] == rec["candidates"][1]["name"]


def test_a_candidate_that_did_not_build_is_recorded_not_fatal(tmp_path: Path) -> None:
    cells = _small_cells()
    broken = cells[0].candidates[0].name
    assert variants.run("q2-dec", cells, FakeRunner(broken={broken}), "cmd", tmp_path / "v.json") == 0
    rec = json.loads((tmp_path / "v.json").read_text())["cells"][0]
    assert rec["candidates"][0]["error"] == f"MetraleError: {broken} did not build on this device"


def test_batch_invariance_is_checked_against_the_largest_m(tmp_path: Path) -> None:
    assert variants.run("q2-dec", _small_cells(), FakeRunner(drift=True), "cmd", tmp_path / "v.json") == 1
    doc = json.loads((tmp_path / "v.json").read_text())
    assert all("m=1" in m for m in doc["mismatches"]) and doc["mismatches"]


def test_options_take_the_family_and_its_row_counts() -> None:
    o = options.parse(["--variants", "fp8-gemm", "--shape", "qwen3-8b", "--out", "d"])
    assert o.variants == "fp8-gemm" and o.ms == list(variants.FAMILIES["fp8-gemm"].ms)
    assert o.json == Path("d/variants_fp8-gemm.json")
    assert options.parse(["--variants", "q2-dec", "--m", "2"]).ms == [2]
    with pytest.raises(MetraleError, match="--variants nope: unknown family"):
        options.parse(["--variants", "nope"])
    with pytest.raises(MetraleError, match="--variants q2-dec: serves formats q2_0"):
        variants.plan("q2-dec", SHAPES, None, ["fp8"])


def test_every_family_names_the_measurement_its_decision_came_from() -> None:
    root = Path(__file__).resolve().parent.parent
    assert set(configs.VARIANT_MEASUREMENTS) == set(variants.FAMILIES)
    for family, paths in configs.VARIANT_MEASUREMENTS.items():
        for p in paths:
            assert (root / p).is_file(), (family, p)
