"""The benchmark's CPU-checkable parts (``metrale/bench``): timing plans and floors, option
parsing, row sampling, the exactness gate on the reference backend with tiny shapes, the
report's tables and targets, and whole dry runs (one exact, one with a wrong weight that must
fail). No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from metrale.bench import cases, gate, measure, options, report, run
from metrale.bench.gate import Cell, Verdicts
from metrale.errors import MetraleError
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.formats.spec import FORMATS as SPECS

TINY = {"tiny": (128, 256)}


# ---- measure ------------------------------------------------------------------------------


def test_plan_reps() -> None:
    # 0.1 ms per call, 2 ms target: 20 calls; with 8 FFN steps a call the 16-step floor is 2
    assert measure.plan_reps(0.1, 8, 2.0) == 20
    # 1 ms per call of 8 steps: 2 calls (16 steps) meet both the target and the floor
    assert measure.plan_reps(1.0, 8, 2.0) == 2
    # 0.5 ms per call of 1 step: 4 calls for the target, 16 for the step floor
    assert measure.plan_reps(0.5, 1, 2.0) == 16
    # a call longer than the target: one call, no step floor
    assert measure.plan_reps(50.0, 2, 2.0) == 1
    # tiny calls: capped at 256 steps per replay
    assert measure.plan_reps(1e-4, 16, 2.0) == 16
    assert measure.plan_reps(1e-4, 1, 2.0) == 256


def test_plan_samples_budget() -> None:
    plan = measure.Plan(target_ms=2.0, samples=9, budget_s=10.0)
    assert measure.plan_samples(2.0, plan) == 9
    assert measure.plan_samples(2000.0, plan) == 5  # 10 s / 2 s
    assert measure.plan_samples(60_000.0, plan) == 3  # never fewer than 3


def test_summarize_median_and_spread() -> None:
    us, spread = measure.summarize([4.0, 2.0, 3.0], 10)
    assert us == 300.0  # median 3 ms over 10 FFN steps
    assert spread == (4.0 - 2.0) / 3.0  # the same one float64 division


def test_rotation_and_floor() -> None:
    l2 = 50 << 20
    # 37 MB of weights: ceil(4 · 50 MiB / 37 MB) = 6 copies at decode sizes, 2 above full_max
    assert measure.rotation(37_000_000, l2, 8, 64) == 6
    assert measure.rotation(37_000_000, l2, 128, 64) == 2
    assert measure.rotation(1_000, l2, 1, 64) == 16
    assert measure.rotation(10**9, l2, 1, 64) == 2
    assert measure.floor_us(1 << 20, float(1 << 40)) == 0.95367431640625  # 1e6 · 2^-20, exact in float64


def test_best_read() -> None:
    assert measure.best_read({"copy_Bps": 8.0, "read_kernel_Bps": 3.0, "read_torch_sum_Bps": 3.5}) == 3.5
    assert measure.best_read({"copy_Bps": 8.0}) == 4.0


# ---- options ------------------------------------------------------------------------------


def test_row_counts_words_and_numbers() -> None:
    assert options.row_counts("prefill,decode,7,7") == sorted({*cases.DECODE_M, *cases.PREFILL_M, 7})
    assert options.row_counts(" 3, 1 ") == [1, 3]
    assert 8192 in options.row_counts("prefill")


@pytest.mark.parametrize("bad", ["0", "x", "", "-3", "1.5"])
def test_row_counts_rejects(bad: str) -> None:
    with pytest.raises(MetraleError, match="--m"):
        options.row_counts(bad)


def test_parse_defaults_and_paths(tmp_path: Path) -> None:
    o = options.parse(["--out", str(tmp_path)])
    assert o.shapes == cases.SHAPES
    assert o.ms == list(cases.DEFAULT_M) and max(o.ms) == 8192
    assert o.formats == list(cases.FORMATS) and o.kernels == ["nvfp4"]
    assert (o.json, o.md, o.png) == (
        tmp_path / "bench_ffn.json",
        tmp_path / "bench_ffn.md",
        tmp_path / "bench_ffn.png",
    )
    o = options.parse(
        ["--shape", "llama3-8b", "--formats", "w8a8,q2_0", "--peers", "none", "--json", "a.json"]
    )
    assert o.shapes == {"llama3-8b": (4096, 14336)} and o.formats == ["w8a8", "q2_0"]
    assert o.peers == [] and o.json == Path("a.json") and o.md is None
    o = options.parse(["--dry-run", "--kernels", "all"])
    assert o.shapes == dict([cases.DRY_SHAPE]) and o.ms == list(options.DRY_M)
    assert o.kernels == ["nvfp4", "w8a8", "q2_0"]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--formats", "w8a8,int3"], "--formats w8a8,int3: unknown int3"),
        (["--peers", "bf16,tpu"], "--peers bf16,tpu: unknown tpu"),
        (["--shape", "gpt5"], "--shape gpt5: unknown gpt5"),
        (["--kernels", "fp8"], "--kernels fp8: unknown fp8"),
        (["--hidden", "4096"], "--hidden and --inter go together"),
        (["--hidden", "100", "--inter", "256"], "multiples of 64"),
        (["--samples", "0"], "--samples 0"),
        (["--sample-rows", "0"], "--sample-rows 0"),
        (["--cell-seconds", "0"], "--cell-seconds"),
        (["--full-max", "-1"], "--full-max"),
        (["--deadline", "-5"], "--deadline"),
    ],
)
def test_parse_rejects(argv: list[str], match: str) -> None:
    with pytest.raises(MetraleError, match=match.replace("(", r"\(")):
        options.parse(argv)


def test_main_reports_bad_option_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--formats", "int3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --formats int3: unknown int3; want " + ", ".join(cases.FORMATS) + ", all or none"]


# ---- row sampling -------------------------------------------------------------------------


@pytest.mark.parametrize("m", [65, 128, 512, 8192])
def test_sample_rows_ends_and_distinct(m: int) -> None:
    rows = gate.sample_rows(m, 6, 0, "qwen3-8b", "w8a8")
    assert rows[0] == 0 and rows[-1] == m - 1
    assert len(rows) == 6 and len(set(rows)) == 6 and list(rows) == sorted(rows)
    assert all(0 <= r < m for r in rows)
    assert gate.sample_rows(m, 6, 0, "qwen3-8b", "w8a8") == rows  # seeded
    others = {gate.sample_rows(m, 6, s, "qwen3-8b", "w8a8") for s in range(1, 6)}
    assert others != {rows}  # the seed matters


def test_sample_rows_small() -> None:
    assert gate.sample_rows(1, 4, 0) == (0,)
    assert gate.sample_rows(2, 4, 0) == (0, 1)
    assert gate.sample_rows(3, 4, 0) == (0, 1, 2)
    assert gate.sample_rows(100, 1, 0) == (0,)
    assert gate.sample_rows(100, 2, 0) == (0, 99)
    with pytest.raises(ValueError):
        gate.sample_rows(0, 4, 0)


def test_row_jobs_cover_the_union_of_samples_in_every_mode() -> None:
    ms = [1, 64, 65, 200]
    jobs = gate.row_jobs(TINY, ["w4a4", "bf16"], ms, 3, 64, 4)
    need = {
        fmt: {r for m in (65, 200) for r in gate.sample_rows(m, 4, 3, "tiny", fmt)}
        for fmt in ("w4a4", "bf16")
    }
    got: dict[tuple[str, str], set[int]] = {}
    for j in jobs:
        assert j[0] == "rows" and len(j[7]) <= gate.ROWS_PER_JOB
        got.setdefault((j[4], j[6]), set()).update(j[7])
    assert got == {
        ("w4a4", "A4"): need["w4a4"],
        ("w4a4", "A16"): need["w4a4"],
        ("bf16", "A16"): need["bf16"],
    }
    assert gate.row_jobs(TINY, ["bf16"], [1, 64], 3, 64, 4) == []


def test_full_jobs_only_up_to_full_max() -> None:
    jobs = gate.full_jobs(TINY, ["w8a8", "fp8"], [1, 3, 30, 64, 65], 0, 64)
    w8 = [j for j in jobs if j[4] == "w8a8"]
    assert [j[6] for j in w8] == [(1, 3, 30, 64)]
    assert sorted(m for j in jobs if j[4] == "fp8" for m in j[6]) == [1, 3, 30, 64]


def test_call_mode() -> None:
    assert gate.call_mode(["w4a4_quantize", "w4a4_gemv_small_m", "act_mul_silu"]) == "A4"
    assert gate.call_mode(["w4a16_gemm", "w4a16_gemm", "act_mul_silu", "w4a16_gemm"]) == "A16"
    assert gate.call_mode(["w8a8_quantize", "w8a8_gemv"]) == "A16"
    assert gate.modes_of("w4a4") == ("A4", "A16") and gate.modes_of("q2_0") == ("A16",)


# ---- the gate on the reference backend ----------------------------------------------------


def _device_cell(fmt: str, m: int, rows: tuple[int, ...], mode_tier: str = "w4a4") -> Cell:
    """A cell computed as the bench computes it, on the reference backend standing in for the
    device (its own layer build, its own x pool)."""
    from metrale.backend import get_backend

    hidden, inter = TINY["tiny"]
    with _tier(mode_tier):
        layer = cases.make_layer(
            fmt,
            cases.build_host(fmt, hidden, inter, 0, "tiny"),
            FfnConfig(hidden, inter),
            get_backend("reference"),
        )
        ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=m)
        entry, fn = layer.route(m)
        fn(cases.x_rows(hidden, 0, "tiny", m), ctx)
    out = np.ascontiguousarray(ctx.buffers.output()[:m]).view(np.uint16)
    c = Cell("tiny", fmt, m, entry=entry, launches=list(layer.backend.launches), rows=rows)
    c.bits = (out[list(rows)] if rows else out).copy()
    return c


class _tier:
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        import os

        from metrale.reference.tiers import weight_quantization

        self.old = os.environ.get("METRALE_WEIGHT_QUANT")
        os.environ["METRALE_WEIGHT_QUANT"] = self.mode
        weight_quantization.cache_clear()

    def __exit__(self, *exc: Any) -> None:
        import os

        from metrale.reference.tiers import weight_quantization

        if self.old is None:
            os.environ.pop("METRALE_WEIGHT_QUANT", None)
        else:
            os.environ["METRALE_WEIGHT_QUANT"] = self.old
        weight_quantization.cache_clear()


def _verdicts(fmt: str, ms: list[int], rows: dict[int, tuple[int, ...]]) -> Verdicts:
    v = Verdicts()
    for job in gate.full_jobs(TINY, [fmt], ms, 0, 64):
        with _tier("w4a4"):
            v.add(gate.run_job(job))
    need = sorted({r for rs in rows.values() for r in rs})
    for mode in gate.modes_of(fmt):
        v.add(gate.run_job(("rows", "tiny", *TINY["tiny"], fmt, 0, mode, tuple(need))))
    return v


@pytest.mark.parametrize("fmt", ["nvfp4", "w8a8", "q2_0"])
def test_gate_passes_exact_cells_and_fails_a_flipped_bit(fmt: str) -> None:
    rows = {80: gate.sample_rows(80, 4, 0, "tiny", fmt)}
    v = _verdicts(fmt, [1, 5], rows)
    for m, rs in ((1, ()), (5, ()), (80, rows[80])):
        c = _device_cell(fmt, m, rs)
        v.judge(c)
        assert c.exact and c.error == "", (m, c.error)
        bad = _device_cell(fmt, m, rs)
        bad.bits[-1, 7] ^= 1
        v.judge(bad)
        assert not bad.exact and bad.error.startswith("NOT EXACT: 1 of"), bad.error
        assert f"row {rs[-1] if rs else m - 1}, column 7" in bad.error


def test_gate_fails_a_route_that_differs_from_call() -> None:
    v = _verdicts("w8a8", [4], {})
    c = _device_cell("w8a8", 4, ())
    c.launches = c.launches[:-1]
    v.judge(c)
    assert not c.exact and c.error.startswith("route differs from __call__")


def test_gate_without_a_reference_result_fails() -> None:
    c = _device_cell("w8a8", 70, (0, 69))
    v = Verdicts()
    v.judge(c)
    assert not c.exact and "no reference result" in c.error
    v.add({"job": ("full", "tiny", 128, 256, "w8a8", 0, (4,)), "error": "Traceback\nValueError: boom\n"})
    c = _device_cell("w8a8", 4, ())
    v.judge(c)
    assert c.error == "reference failed: ValueError: boom"


def test_sampled_rows_are_the_one_row_results_of_the_full_call() -> None:
    """The rows job's one-row results equal the rows of an m-row call the reference computed
    whole (batch invariance: what the sampled gate relies on)."""
    fmt = "fp8"
    full = gate.run_job(("full", "tiny", *TINY["tiny"], fmt, 0, (70,)))["out"][70]["bits"]
    rows = (0, 33, 69)
    one = gate.run_job(("rows", "tiny", *TINY["tiny"], fmt, 0, "A16", rows))["out"]
    for r in rows:
        assert np.array_equal(one[r], full[r])


def test_a4_cells_are_judged_against_the_a4_one_row_result() -> None:
    """A W4A4 call that ran FP4 activations passes only against the A4 one-row results; the
    A16 ones differ (so the mode distinction is not vacuous)."""
    fmt, rows = "w4a4", (0, 2, 4)
    a4 = gate.run_job(("rows", "tiny", *TINY["tiny"], fmt, 0, "A4", rows))["out"]
    a16 = gate.run_job(("rows", "tiny", *TINY["tiny"], fmt, 0, "A16", rows))["out"]
    assert any(not np.array_equal(a4[r], a16[r]) for r in rows)
    c = _device_cell(fmt, 5, rows)  # forward_km under the w4a4 tier: FP4 activations
    assert gate.call_mode(c.launches) == "A4"
    v = Verdicts()
    v.add({"job": ("rows", "tiny", 128, 256, fmt, 0, "A4", rows), "out": a4})
    v.judge(c)
    assert c.exact, c.error
    c2 = _device_cell(fmt, 5, rows)
    v2 = Verdicts()
    v2.add({"job": ("rows", "tiny", 128, 256, fmt, 0, "A4", rows), "out": a16})
    v2.judge(c2)
    assert not c2.exact


# ---- report -------------------------------------------------------------------------------


def _doc() -> dict[str, Any]:
    ceil = {"copy_Bps": 8e12, "read_Bps": 4e12}
    wb = {"nvfp4": 4_000_000, "w8a8": 8_000_000}
    cells = {}
    for fmt, us_by_m in (("nvfp4", {1: 1.2, 4: 3.0, 512: 90.0}), ("w8a8", {1: 2.0, 512: 40.0})):
        for m, us in us_by_m.items():
            c = Cell("qwen3-8b", fmt, m, entry="e", launches=["k"], exact=True, layers=2)
            c.rows = (0, m - 1) if m > 64 else ()
            c.timing = measure.Timing(us, "graph" if m != 4 else "loop", 8, 9)
            cells[("qwen3-8b", fmt, m)] = c
    cells[("qwen3-8b", "w8a8", 4)] = Cell("qwen3-8b", "w8a8", 4, exact=False, error="NOT EXACT: 3 of 9")
    peers = {
        ("qwen3-8b", "bf16"): {
            "label": "bf16 cuBLAS",
            "note": "",
            "times": {1: {"us": 4.0}, 512: {"us": 50.0}},
        },
        ("qwen3-8b", "int8"): {"label": "int8", "note": "", "times": {512: {"us": 30.0}}},
        ("qwen3-8b", "int4"): {"label": "tinygemm", "note": "", "times": {}, "error": "n/a: no"},
    }
    info = {("qwen3-8b", f): {"weight_bytes": b, "layers": 2} for f, b in wb.items()}
    meta = {"gpu": "G", "command": "metrale bench", "dry_run": False}
    return report.assemble(meta, {"qwen3-8b": (4096, 12288)}, ceil, cells, info, peers, [])


def test_assemble_figures() -> None:
    doc = _doc()
    fd = doc["shapes"]["qwen3-8b"]["formats"]["nvfp4"]
    assert fd["floor_us"] == 1.0  # 4 MB at 4 TB/s
    r1 = fd["rows"][1]
    assert r1["x_floor"] == 1.2 and r1["of_copy_bw"] == 0.417 and r1["rows_checked"] == "all"
    assert r1["speedup_vs_fastest_peer"] == round(4.0 / 1.2, 3)
    assert fd["rows"][512]["rows_checked"] == [0, 511]
    assert fd["rows"][512]["speedup_vs_fastest_peer"] == round(30.0 / 90.0, 3)
    assert doc["shapes"]["qwen3-8b"]["fastest_peer_us"] == {1: 4.0, 512: 30.0}
    w4 = doc["shapes"]["qwen3-8b"]["formats"]["w8a8"]["rows"][4]
    assert w4["status"] == "FAILED" and "us" not in w4
    assert doc["failed"] == ["qwen3-8b W8A8 m=4: NOT EXACT: 3 of 9"]


def test_targets() -> None:
    """The serving targets against bf16 cuBLAS in the same run (bf16 peer 4.0 µs at m = 1, 50.0 at
    512); targets whose peer was not measured (gemlite here) are not listed."""
    t = {x["target"]: x for x in _doc()["targets"]}
    m1 = t["NVFP4 W4A16: ≤ 1.0× the time of bf16 cuBLAS, m = 1"]
    assert m1["met"] and m1["per_m"] == {1: 0.3}  # 1.2 / 4.0; m = 4 has no peer time
    pre = t["NVFP4 W4A16: ≤ 2.5× the time of bf16 cuBLAS, m = 512"]
    assert pre["met"] and pre["per_m"] == {512: 1.8}  # 90 / 50
    w8 = t["W8A8: ≤ 0.75× the time of bf16 cuBLAS, m = 1..512"]
    assert not w8["met"] and w8["per_m"] == {1: 0.5, 512: 0.8} and w8["worst"] == 0.8
    assert not any("gemlite" in k or "gl-" in k for k in t)


def test_targets_mark_a_failed_cell() -> None:
    doc = _doc()
    doc["shapes"]["qwen3-8b"]["peers"]["bf16"]["times"][4] = {"us": 10.0}
    t = {x["target"]: x for x in report.evaluate_targets(doc)}
    w8 = t["W8A8: ≤ 0.75× the time of bf16 cuBLAS, m = 1..512"]
    assert w8["per_m"] == {1: 0.5, 4: "FAILED", 512: 0.8} and not w8["met"]
    nv = t["NVFP4 W4A16: ≤ 1.0× the time of bf16 cuBLAS, m = 1..4"]
    assert nv["met"] and nv["per_m"] == {1: 0.3, 4: 0.3}  # 3.0 / 10.0


def test_epilogue_rate_table() -> None:
    """3 m H I / 16 block values per FFN (Qwen3-8B: 3 · 4096 · 12288 / 16 = 9,437,184 per row)
    over the FFN's µs: NVFP4 at m = 1, 4, 512 (1.2, 3.0, 90.0 µs) = 7.86, 12.58, 53.69 T/s;
    W8A8 has no blocks and no row."""
    lines = report.markdown(_doc()).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("Epilogue rate"))
    assert "m × 9,437,184 block values" in lines[at]
    rows = [ln for ln in lines[at + 1 :] if ln.startswith("| ") and not ln.startswith("| ---")]
    nv = next(ln for ln in rows if ln.startswith("| NVFP4 W4A16 |"))
    assert [c.strip() for c in nv.strip("|").split("|")][1:] == ["7.86", "12.58", "53.69"]
    assert not any(ln.startswith("| W8A8 |") for ln in rows[:3])


def test_markdown_cells() -> None:
    md = report.markdown(_doc())
    lines = md.splitlines()
    nv = next(ln for ln in lines if ln.startswith("| NVFP4 W4A16 (4.0 MB, floor 1.0) |"))
    assert [c.strip() for c in nv.strip("|").split("|")][1:] == ["1.2", "3.0†", "90.0"]
    w8 = next(ln for ln in lines if ln.startswith("| W8A8 (8.0 MB"))
    assert [c.strip() for c in w8.strip("|").split("|")][1:] == ["2.0", "FAILED", "40.0"]
    assert any(ln.startswith("| peer: tinygemm | n/a | n/a | n/a |") for ln in lines)
    assert "| W8A8 | 1.00 / 2.00 | FAILED | 20.00 / 0.75 |" in lines
    assert "| NVFP4 W4A16: ≤ 1.0× the time of bf16 cuBLAS, m = 1 | yes | 0.3 | 1: 0.3 |" in lines


# ---- whole dry runs -----------------------------------------------------------------------

DRY = ["--dry-run", "--m", "1,3,70", "--peers", "bf16", "--kernels", "w8a8", "--workers", "1"]


def test_dry_run_exact(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert run.main([*DRY, "--formats", "w4a4,q2_0", "--json", str(out), "--md", str(tmp_path / "r.md")]) == 0
    doc = json.loads(out.read_text())
    rows = doc["shapes"]["tiny"]["formats"]["w4a4"]["rows"]
    assert rows["1"]["rows_checked"] == "all" and rows["70"]["rows_checked"][0] == 0
    assert rows["70"]["rows_checked"][-1] == 69 and rows["70"]["entry"] == "forward_prefill"
    assert all(r["exact"] for r in rows.values()) and doc["failed"] == []
    assert {k["label"] for k in doc["kernels"]} >= {"w8a8_silu_quant_gemv down"}
    assert all("us" in k for k in doc["kernels"])
    assert doc["command"].startswith("metrale bench --dry-run")
    assert (tmp_path / "r.md").read_text().startswith("GPU: host CPU (dry run")


def test_dry_run_with_a_wrong_weight_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device side gets other weights than the reference: every cell must fail, the run
    exits 1 and reports no time."""
    real = cases.build_host
    monkeypatch.setattr(run, "build_host", lambda fmt, h, i, seed, shape: real(fmt, h, i, seed + 1, shape))
    out = tmp_path / "r.json"
    assert run.main([*DRY, "--formats", "w8a8", "--kernels", "none", "--json", str(out)]) == 1
    doc = json.loads(out.read_text())
    rows = doc["shapes"]["tiny"]["formats"]["w8a8"]["rows"]
    assert set(rows) == {"1", "3", "70"}
    assert all(
        r["status"] == "FAILED" and "us" not in r and r["error"].startswith("NOT EXACT")
        for r in rows.values()
    )


def test_gemlite_peers_are_timed_after_the_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gemlite's peers compile for minutes: a --deadline must end them, not the formats' cells,
    so they come last; torch peers come first (the targets compare against them)."""
    order: list[str] = []
    real_peer, real_format = run.time_peer, run.time_format

    def peer(dev: Any, opts: Any, shape: str, kind: str) -> dict[str, Any]:
        order.append(kind)
        return real_peer(dev, opts, shape, kind)

    def fmt(dev: Any, opts: Any, shape: str, f: str, *rest: Any) -> Any:
        order.append(f)
        return real_format(dev, opts, shape, f, *rest)

    monkeypatch.setattr(run, "time_peer", peer)
    monkeypatch.setattr(run, "time_format", fmt)
    argv = [*DRY, "--peers", "gl-w4,bf16", "--formats", "q2_0", "--kernels", "none"]
    run.main([*argv, "--json", str(tmp_path / "r.json")])
    assert order == ["bf16", "q2_0", "gl-w4"]


def test_descriptor_slots_cover_the_bench_formats() -> None:
    for f in cases.FORMATS.values():
        assert f.stem in SPECS


def _saved(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    path.write_text(json.dumps(doc))
    return report.load(path)


def test_load_restores_int_keys(tmp_path: Path) -> None:
    doc = _doc()
    back = _saved(doc, tmp_path / "d.json")
    assert report.markdown(back) == report.markdown(doc)
    assert report.evaluate_targets(back) == doc["targets"]


def _rerun(date: str, command: str) -> dict[str, Any]:
    """``_doc()`` as a run of another date and command (the document's and every shape's)."""
    doc = _doc()
    doc["date"], doc["command"] = date, command
    for sd in doc["shapes"].values():
        sd["run"]["date"], sd["run"]["command"] = date, command
    return doc


def test_merge_takes_each_format_from_its_last_run(tmp_path: Path) -> None:
    a = _doc()
    b = _rerun("later", "metrale bench --formats w8a8")
    for sd in b["shapes"].values():
        del sd["formats"]["nvfp4"]
        sd["formats"]["w8a8"]["rows"][4] = {**sd["formats"]["w8a8"]["rows"][1], "us": 2.5}
        del sd["peers"]["int8"]
        for t in sd["peers"]["bf16"]["times"].values():  # a slower bf16 peer in the later run
            if t.get("us"):
                t["us"] *= 2
    b["targets"] = report.evaluate_targets(b)
    m = report.merge([_saved(a, tmp_path / "a.json"), _saved(b, tmp_path / "b.json")])
    sd = m["shapes"]["qwen3-8b"]
    assert sd["formats"]["nvfp4"]["run"]["date"] == a["date"]
    assert sd["formats"]["w8a8"]["run"]["date"] == "later"
    assert sd["formats"]["w8a8"]["rows"][4]["us"] == 2.5
    assert sd["peers"]["int8"]["run"]["date"] == a["date"] and sd["peers"]["bf16"]["run"]["date"] == "later"
    assert m["failed"] == []  # the failed W8A8 m = 4 of the first run was measured again
    t = {x["target"]: x for x in m["targets"]}
    # W8A8 and the bf16 peer both from the later run: judged against its (twice as slow) peer
    # (m = 4 now 2.5 µs, no peer time there)
    assert t["W8A8: ≤ 0.75× the time of bf16 cuBLAS, m = 1..512"]["per_m"] == {1: 0.25, 512: 0.4}
    # NVFP4 from the first run: judged against the first run's bf16 peer, never the later one's
    first_bf16 = a["shapes"]["qwen3-8b"]["peers"]["bf16"]["times"]
    nv = next(x for k, x in t.items() if k.startswith("NVFP4 W4A16: ≤ 1.0×"))
    nv_rows = a["shapes"]["qwen3-8b"]["formats"]["nvfp4"]["rows"]
    assert nv["per_m"] == {m: round(nv_rows[m]["us"] / first_bf16[m]["us"], 2) for m in nv["per_m"]}
    assert nv["per_m"]
    md = report.markdown(m)
    assert "Merged from runs" in md and "`metrale bench --formats w8a8`" in md
    assert [r["command"] for r in m["merged_from"]] == ["metrale bench", "metrale bench --formats w8a8"]


def test_compare_sets_runs_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``metrale bench --compare A B``: per (shape, format, m) each run's µs with × its own bf16
    peer, FAILED for a cell not exact, blank where a run lacks the cell, and B's µs over A's."""
    a = _doc()
    b = _rerun("later", "metrale bench --formats nvfp4")
    for sd in b["shapes"].values():
        del sd["formats"]["w8a8"]
        sd["formats"]["nvfp4"]["rows"][1]["us"] = 0.9
        sd["peers"]["bf16"]["times"][1]["us"] = 3.0
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    _saved(a, pa)
    _saved(b, pb)
    assert run.main(["--compare", str(pa), str(pb)]) == 0
    table = [[c.strip() for c in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()]
    rows = {tuple(r[:3]): r[3:] for r in table}
    assert rows[("qwen3-8b", "NVFP4 W4A16", "1")] == ["1.2 (0.30×)", "0.9 (0.30×)", "0.750"]
    assert rows[("qwen3-8b", "NVFP4 W4A16", "4")] == ["3.0", "3.0", "1.000"]  # no peer time at 4
    assert rows[("qwen3-8b", "W8A8", "4")] == ["FAILED", "", ""]
    assert rows[("qwen3-8b", "W8A8", "512")] == ["40.0 (0.80×)", "", ""]
    assert run.main(["--compare", str(pa), str(tmp_path / "none.json")]) == 2
    assert "--compare" in capsys.readouterr().err


def test_merge_keeps_the_rows_a_partial_rerun_did_not_measure(tmp_path: Path) -> None:
    """A later run of NVFP4 at m = 512 only (bf16 there twice as slow) replaces that row alone:
    m = 1 and 4 stay the first run's, each row names its run, each target figure is against the
    peer of its own row's run, the markdown lists NVFP4 under both runs; merged again, the
    same."""
    a = _doc()
    b = _rerun("later", "metrale bench --formats nvfp4 --m 512")
    for sd in b["shapes"].values():
        del sd["formats"]["w8a8"]
        sd["formats"]["nvfp4"]["rows"] = {512: {**sd["formats"]["nvfp4"]["rows"][512], "us": 60.0}}
        sd["peers"] = {"bf16": sd["peers"]["bf16"]}
        sd["peers"]["bf16"]["times"] = {512: {"us": 100.0}}
    b["targets"] = report.evaluate_targets(b)
    m = report.merge([_saved(a, tmp_path / "a.json"), _saved(b, tmp_path / "b.json")])
    sd = m["shapes"]["qwen3-8b"]
    nv = sd["formats"]["nvfp4"]
    assert sorted(nv["rows"]) == [1, 4, 512] and nv["run"]["date"] == "later"
    assert nv["rows"][512]["us"] == 60.0 and "run_date" not in nv["rows"][512]
    first = a["shapes"]["qwen3-8b"]["formats"]["nvfp4"]["rows"]
    assert [nv["rows"][k]["us"] for k in (1, 4)] == [first[1]["us"], first[4]["us"]]
    assert nv["rows"][1]["run_date"] == nv["rows"][4]["run_date"] == a["date"]
    bf = sd["peers"]["bf16"]["times"]
    assert sorted(bf) == [1, 512] and bf[512]["us"] == 100.0 and bf[1]["run_date"] == a["date"]
    t = next(x for x in m["targets"] if x["target"].startswith("NVFP4 W4A16: ≤ 1.0×"))
    first_bf16 = a["shapes"]["qwen3-8b"]["peers"]["bf16"]["times"]
    assert t["per_m"][1] == round(first[1]["us"] / first_bf16[1]["us"], 2)  # the first run's peer
    nv_512 = [x for x in m["targets"] if x["format"] == "nvfp4" and 512 in x["per_m"]]
    assert nv_512 and all(x["per_m"][512] == 0.6 for x in nv_512)  # 60 µs against the later 100
    md = report.markdown(m)
    runs = md.split("Merged from runs")[1].split("µs per FFN")[0]
    assert runs.count("NVFP4") == 2 and "`metrale bench --formats nvfp4 --m 512`" in runs and "?" not in runs
    again = report.merge([_saved(m, tmp_path / "m.json")])
    assert again["shapes"]["qwen3-8b"]["formats"]["nvfp4"]["rows"] == nv["rows"]
    assert again["targets"] == m["targets"]


def test_a_merged_document_merges_again(tmp_path: Path) -> None:
    """The committed result is itself a merge: merging a new run into it keeps every older
    entry's run (date, command, ceilings) and the list of runs it came from."""
    a = _doc()
    b = _rerun("later", "metrale bench --formats w8a8")
    for sd in b["shapes"].values():
        del sd["formats"]["nvfp4"]
    first = report.merge([_saved(a, tmp_path / "a.json"), _saved(b, tmp_path / "b.json")])
    # reloaded, NVFP4 (first run) is still judged against the first run's bf16 peer
    again = report.merge([_saved(first, tmp_path / "again.json")])
    assert (
        [x["per_m"] for x in again["targets"] if x["format"] == "nvfp4"]
        == [x["per_m"] for x in first["targets"] if x["format"] == "nvfp4"]
        != []
    )
    c = _rerun("latest", "metrale bench --formats nvfp4")
    for sd in c["shapes"].values():
        sd["formats"] = {"nvfp4": sd["formats"]["nvfp4"]}
        sd["peers"] = {}
    m = report.merge([_saved(first, tmp_path / "first.json"), _saved(c, tmp_path / "c.json")])
    sd = m["shapes"]["qwen3-8b"]
    assert sd["formats"]["w8a8"]["run"]["date"] == "later"
    assert sd["formats"]["nvfp4"]["run"]["date"] == "latest"
    assert sd["peers"]["int8"]["run"]["date"] == "later"
    assert [r["date"] for r in m["merged_from"]] == [a["date"], "later", "latest"]
    assert "?" not in report.markdown(m).split("Merged from runs")[1].split("µs per FFN")[0]


def test_merge_through_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.json").write_text(json.dumps(_doc()))
    out = tmp_path / "m.json"
    assert run.main(["--merge", str(tmp_path / "a.json"), "--json", str(out)]) == 1  # W8A8 m=4 failed
    assert json.loads(out.read_text())["failed"] == ["qwen3-8b W8A8 m=4: NOT EXACT: 3 of 9"]
    assert run.main(["--merge", str(tmp_path / "nope.json")]) == 2
    assert "--merge" in capsys.readouterr().err


def test_job_cost_orders_heavy_jobs_first() -> None:
    full8 = ("full", "q", 4096, 12288, "w8a8", 0, (1, 2, 64))
    rows_bf16 = ("rows", "q", 4096, 12288, "bf16", 0, "A16", (0, 5, 9))
    rows_nv = ("rows", "q", 4096, 12288, "w4a4", 0, "A4", (0, 5, 9))
    assert gate.job_cost(full8) == 67 * 4096 * 12288
    assert gate.job_cost(rows_bf16) == 10 * gate.job_cost(rows_nv)
    assert sorted([rows_nv, full8, rows_bf16], key=gate.job_cost, reverse=True) == [full8, rows_bf16, rows_nv]


# ---- the GPU clocks against fake CUDA modules (their bookkeeping, not their timing) --------


class _FakeTimeline:
    """Every recorded interval lasts ``ms`` per body call made in it."""

    def __init__(self, ms_per_call: float) -> None:
        self.ms, self.calls, self.mark = ms_per_call, 0, 0
        self.captured = 0
        self.capturing = False

    def body(self) -> None:
        if self.capturing:
            self.captured += 1
        else:
            self.calls += 1

    def replay(self) -> None:
        self.calls += self.captured


def _fake_cupy(tl: _FakeTimeline) -> Any:
    from types import SimpleNamespace

    class Event:
        def record(self, stream: Any = None) -> None:
            self.at = tl.calls

        def synchronize(self) -> None:
            pass

    class Graph:
        def launch(self, stream: Any) -> None:
            tl.replay()

    class Stream:
        def __init__(self, non_blocking: bool = False) -> None:
            pass

        def __enter__(self) -> Stream:
            return self

        def __exit__(self, *a: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def begin_capture(self, mode: Any = None) -> None:
            tl.capturing = True

        def end_capture(self) -> Graph:
            tl.capturing = False
            return Graph()

    def elapsed(e0: Event, e1: Event) -> float:
        return (e1.at - e0.at) * tl.ms

    cuda = SimpleNamespace(
        Event=Event,
        Stream=Stream,
        get_elapsed_time=elapsed,
        runtime=SimpleNamespace(streamCaptureModeRelaxed=1),
        Device=lambda: SimpleNamespace(synchronize=lambda: None),
    )
    return SimpleNamespace(cuda=cuda)


@pytest.mark.parametrize(
    ("ms", "steps", "reps", "samples"), [(0.05, 4, 40, 9), (3000.0, 2, 1, 6), (9000.0, 2, 1, 3)]
)
def test_cupy_clock_bookkeeping(
    monkeypatch: pytest.MonkeyPatch, ms: float, steps: int, reps: int, samples: int
) -> None:
    """A body of ``steps`` FFN steps taking ``ms``: the clock captures ``reps`` calls, replays
    ``samples`` times and reports ms / steps per FFN."""
    import sys

    tl = _FakeTimeline(ms)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(tl))
    t = measure.CupyClock().time(tl.body, steps, measure.Plan(target_ms=2.0, samples=9, budget_s=20.0))
    assert (t.method, t.reps, t.samples) == ("graph", reps * steps, samples)
    # the clock divides summed event times by reps·steps: a few float64 roundings (≤ 2^-53 each),
    # far inside 1e-12 relative
    assert t.us == pytest.approx(ms / steps * 1e3, rel=1e-12)
    assert tl.captured == reps


def _fake_torch(tl: _FakeTimeline) -> Any:
    from contextlib import contextmanager
    from types import SimpleNamespace

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            pass

        def record(self) -> None:
            self.at = tl.calls

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, other: Event) -> float:
            return (other.at - self.at) * tl.ms

    class Graph:
        def replay(self) -> None:
            tl.replay()

    @contextmanager
    def graph(g: Graph) -> Any:
        tl.capturing = True
        yield
        tl.capturing = False

    @contextmanager
    def stream(s: Any) -> Any:
        yield

    stream_obj = SimpleNamespace(wait_stream=lambda s: None)
    cuda = SimpleNamespace(
        Stream=lambda: stream_obj,
        stream=stream,
        current_stream=lambda: stream_obj,
        synchronize=lambda: None,
        Event=Event,
        CUDAGraph=Graph,
        graph=graph,
    )
    return SimpleNamespace(cuda=cuda)


def test_torch_clock_bookkeeping(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    tl = _FakeTimeline(0.25)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(tl))
    t = measure.TorchClock().time(tl.body, 2, measure.Plan(target_ms=2.0, samples=5, budget_s=20.0))
    # 0.25 ms per call of 2 steps: 8 calls for the target (16 steps meets the step floor)
    assert (t.method, t.reps, t.samples, tl.captured) == ("graph", 16, 5, 8)
    assert t.us == pytest.approx(125.0, rel=1e-12)  # a few float64 roundings, as above


def test_padded_rows() -> None:
    from metrale.bench.peers import PeerUnavailable, padded_rows

    def over16(rows: int) -> bool:
        if rows <= 16:
            raise RuntimeError("self.size(0) needs to be greater than 16")
        return True

    def mult16(rows: int) -> bool:
        if rows % 16:
            raise RuntimeError(f"{rows} rows: not a multiple of 16")
        return True

    assert padded_rows(1, over16) == 17 and padded_rows(16, over16) == 17 and padded_rows(40, over16) == 40
    assert (
        padded_rows(20, mult16) == 32 and padded_rows(8192, mult16) == 8192 and padded_rows(3, mult16) == 16
    )
    with pytest.raises(PeerUnavailable, match="RuntimeError: 33 rows: not a multiple of 16"):
        padded_rows(33, lambda r: mult16(r) and r < 40)


def test_deadline_leaves_cells_out_and_says_so(tmp_path: Path) -> None:
    """A deadline already past: no cell, peer or kernel is measured, nothing fails, and the
    document lists what was left out."""
    out = tmp_path / "r.json"
    argv = [
        *DRY,
        "--formats",
        "w8a8",
        "--deadline",
        "1e-9",
        "--json",
        str(out),
        "--md",
        str(tmp_path / "r.md"),
    ]
    assert run.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["shapes"]["tiny"]["formats"]["w8a8"]["rows"] == {}
    assert doc["shapes"]["tiny"]["peers"]["bf16"]["times"] == {}
    assert doc["kernels"] == [] and doc["failed"] == []
    peer = "tiny peer bf16 cuBLAS (gate+up fused)"
    assert doc["skipped"][:6] == [
        f"{peer} m=1",
        f"{peer} m=3",
        f"{peer} m=70",
        *(f"tiny W8A8 m={m}" for m in (1, 3, 70)),
    ]
    assert f"Not measured (the run's --deadline): {peer} m=1;" in (tmp_path / "r.md").read_text()


def test_collect_stops_waiting_at_the_deadline() -> None:
    import multiprocessing as mp
    import time

    pool = mp.get_context("fork").Pool(1)
    pending = [pool.apply_async(time.sleep, (30,))]
    pool.close()
    t0 = time.time()
    v = run.collect(pool, pending, time.time() + 0.5)
    assert time.time() - t0 < 10 and v.full == {} and v.rows == {}


def test_run_restores_the_weight_quantization_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("METRALE_WEIGHT_QUANT", "w4a16")
    assert run.main([*DRY, "--formats", "w8a8", "--peers", "none", "--kernels", "none", "--m", "1"]) == 0
    assert os.environ["METRALE_WEIGHT_QUANT"] == "w4a16"


def test_w4a4_kernel_cases() -> None:
    """--kernels nvfp4: W4A4 (quantize + GEMV) at m = 1, 2, 3 on gate and down, and on CUDA each
    also with the fast A4 kernels off (the comparison the row limit A4_FAST_MAX_ROWS rests on)."""
    from metrale.bench import kernels as kern

    def w4a4(cuda: bool) -> set[tuple[str, int, bool]]:
        return {(c.proj, c.m, c.a4_fast) for c in kern.cases(["nvfp4"], cuda=cuda) if c.op == "w4a4"}

    both = {(p, m, f) for p in ("gate", "down") for m in (1, 2, 3) for f in (True, False)}
    assert w4a4(cuda=True) == both
    assert w4a4(cuda=False) == {c for c in both if c[2]}


def test_w4a4_kernel_case_without_fast_kernels_restores_the_switch() -> None:
    from metrale.bench import kernels as kern
    from metrale.cuda import nvfp4

    keep = nvfp4.A4_FAST_MAX_ROWS

    class FakeCuda:
        name = "cuda"

    seen: list[int] = []
    with pytest.raises(RuntimeError, match="launch failed"), kern._a4_fast(FakeCuda(), False):
        seen.append(nvfp4.A4_FAST_MAX_ROWS)
        raise RuntimeError("launch failed")
    assert seen == [0] and nvfp4.A4_FAST_MAX_ROWS == keep


def test_dry_run_w4a4_kernels(tmp_path: Path) -> None:
    """The W4A4 single-kernel cases run (reference backend) and are exact on their checked rows."""
    out = tmp_path / "k.json"
    args = ["--dry-run", "--m", "1", "--peers", "none", "--kernels", "nvfp4", "--workers", "1"]
    assert run.main([*args, "--formats", "w8a8", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    got = {(k["label"], k["m"]) for k in doc["kernels"] if "us" in k}
    assert {(f"w4a4_quantize + w4a4_gemv_small_m {p}", m) for p in ("gate", "down") for m in (1, 2, 3)} <= got
    assert doc["failed"] == []


def test_gemlite_peers_are_listed_and_refused_without_gemlite(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every gemlite peer is a ``--peers`` choice with its bit width; without gemlite the peer
    reads n/a with the reason instead of failing the run."""
    import sys

    from metrale.bench import peers

    assert set(peers.GEMLITE_BITS) <= set(peers.PEERS)
    assert options.parse(["--peers", ",".join(peers.GEMLITE_BITS)]).peers == list(peers.GEMLITE_BITS)
    monkeypatch.setitem(sys.modules, "gemlite", None)  # import gemlite raises ImportError
    setup = peers._Setup(None, None, None, 64, 128, [1], lambda nb: 1)
    for kind in peers.GEMLITE_BITS:
        with pytest.raises(peers.PeerUnavailable, match="gemlite not importable"):
            peers._gemlite(setup, kind)


def test_dry_run_on_the_chain(tmp_path: Path) -> None:
    """--chain: the reference and the device side both on the block-value chain (the dry run's
    device is the reference backend on it), every cell exact, the formats labelled, the revision
    recorded; a chain run does not merge with a contract run (the chain's reference itself:
    test_chain.py::test_reference_backend_on_the_chain)."""
    from metrale.bench import gate

    out, tree = tmp_path / "chain.json", tmp_path / "tree.json"
    args = [*DRY, "--formats", "nvfp4", "--m", "1,3", "--kernels", "none"]
    try:
        assert run.main([*args, "--chain", "--json", str(out)]) == 0
    finally:
        gate.CHAIN = False
    doc = json.loads(out.read_text())
    assert doc["revision"] == "chain" and doc["failed"] == []
    assert doc["shapes"]["tiny"]["formats"]["nvfp4"]["label"].endswith("(chain)")
    assert run.main([*args, "--json", str(tree)]) == 0
    assert json.loads(tree.read_text())["revision"] == "contract"
    with pytest.raises(ValueError, match="do not merge"):
        report.merge([report.load(tree), report.load(out)])
