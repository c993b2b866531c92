"""Bad input, interruption and memory: every failure names the file/tensor/option and leaves
the filesystem exactly as it was (SRC hashed before/after, DST's parent listed)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import metrale.checkpoint.work as work
from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint, memory_bound
from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.io import HfFolder, save_tensors
from metrale.errors import MetraleError


def snapshot(*dirs: Path) -> dict[str, str]:
    """sha256 of every file under ``dirs``, plus the names in each folder (litter shows up)."""
    out: dict[str, str] = {}
    for d in dirs:
        for p in sorted(d.rglob("*")):
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(d) + "/"] = ",".join(sorted(x.name for x in d.iterdir()))
    return out


def make(tmp: Path, **kw: object) -> Path:
    args = {"hidden": 64, "intermediate": 128, "layers": 2, "shards": 2}
    args.update(kw)
    return make_example_checkpoint(tmp / "src", **args)  # type: ignore[arg-type]


def refused(src: Path, dst: Path, opts: ConvertOptions, match: str) -> None:
    before = snapshot(src.parent, dst.parent)
    with pytest.raises(MetraleError, match=match):
        convert_checkpoint(src, dst, opts)
    assert snapshot(src.parent, dst.parent) == before


def rewrite(src: Path, name: str, value: np.ndarray) -> None:
    """Replace tensor ``name`` in its shard (SRC is rebuilt before the refusal is checked)."""
    with HfFolder(src) as f:
        shard = f.where[name]
        tensors = {n: np.array(f.files[shard].tensor(n)) for n in f.files[shard].names()}
    tensors[name] = value
    save_tensors(src / shard, tensors, metadata={"format": "pt"})


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    return make(tmp_path)


def test_missing_shard(src: Path, tmp_path: Path) -> None:
    (src / "model-00002-of-00002.safetensors").unlink()
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("nvfp4"),
        r"model-00002-of-00002\.safetensors: safetensors file is missing",
    )


def test_corrupt_header(src: Path, tmp_path: Path) -> None:
    p = src / "model-00001-of-00002.safetensors"
    raw = bytearray(p.read_bytes())
    raw[8:16] = b"\xff\xfe{{{{{{"
    p.write_bytes(bytes(raw))
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("fp8"),
        r"model-00001-of-00002\.safetensors: corrupt safetensors header",
    )


def test_truncated_file(src: Path, tmp_path: Path) -> None:
    p = src / "model-00002-of-00002.safetensors"
    p.write_bytes(p.read_bytes()[:-100])
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("w8a8"),
        r"model-00002-of-00002\.safetensors: truncated safetensors file: tensor 'lm_head\.weight'",
    )


def test_too_short_file(src: Path, tmp_path: Path) -> None:
    (src / "model-00002-of-00002.safetensors").write_bytes(b"\x01\x02")
    refused(src, tmp_path / "out", ConvertOptions("w8a8"), r"truncated safetensors file \(2 bytes")


def test_unsupported_dtype(src: Path, tmp_path: Path) -> None:
    rewrite(src, "model.layers.0.mlp.up_proj.weight", np.ones((128, 64), np.int32))
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("nvfp4"),
        r"tensor 'model\.layers\.0\.mlp\.up_proj\.weight' has unsupported dtype I32 "
        r"\(want BF16, F16 or F32\)",
    )


def test_shape_not_divisible(tmp_path: Path) -> None:
    s = make(tmp_path, hidden=48, heads=4, kv_heads=2)
    refused(
        s,
        tmp_path / "out",
        ConvertOptions("q2_0", ffn_only=True),
        r"tensor 'model\.layers\.0\.mlp\.gate_proj\.weight' shape \[128, 48\]: K=48 is not a multiple of the "
        r"q2_0 block of 64$",
    )
    # by default attention is quantized too: its first misfit is named, with the way out
    refused(
        s,
        tmp_path / "out",
        ConvertOptions("q2_0"),
        r"tensor 'model\.layers\.0\.self_attn\.q_proj\.weight' shape \[48, 48\]: K=48 is not a multiple "
        r"of the q2_0 block of 64 \(keep it unquantized with --exclude, or quantize only the FFN with "
        r"--ffn-only\)$",
    )
    s2 = make_example_checkpoint(tmp_path / "s40", hidden=40, intermediate=128, layers=1, heads=4, kv_heads=2)
    refused(s2, tmp_path / "out", ConvertOptions("nvfp4"), r"K=40 is not a multiple of the nvfp4 block of 16")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_leave_nothing(src: Path, tmp_path: Path, bad: float) -> None:
    import ml_dtypes

    with HfFolder(src) as f:
        w = np.array(f.tensor("model.layers.1.mlp.down_proj.weight"))
    w[3, 5] = bad
    rewrite(src, "model.layers.1.mlp.down_proj.weight", w.astype(ml_dtypes.bfloat16))
    for fmt in ("nvfp4", "q2_0"):
        refused(
            src,
            tmp_path / "out",
            ConvertOptions(fmt),
            r"model\.layers\.1\.mlp\.down_proj\.weight: non-finite weight .* at \[3, 5\]",
        )


def test_unknown_format_and_bad_workers(src: Path, tmp_path: Path) -> None:
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("int3"),
        r"--format 'int3': unknown format \(want one of nvfp4, fp8, w8a8, q2_0\)",
    )
    refused(src, tmp_path / "out", ConvertOptions("fp8", workers=0), r"--workers 0: want at least 1")


def test_calibration_errors(src: Path, tmp_path: Path) -> None:
    cal = tmp_path / "cal.safetensors"
    save_tensors(cal, {"model.layers.0.mlp.gate_proj.input_amax": np.array(3.0, np.float32)})
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("nvfp4", ffn_only=True, calibration=cal),
        r"no calibration entry for module 'model\.layers\.0\.mlp\.up_proj'",
    )
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("fp8", calibration=cal),
        r"--calibration applies to --format nvfp4 only",
    )
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("nvfp4", calibration=tmp_path / "nope.safetensors"),
        r"--calibration: .*nope\.safetensors: safetensors file is missing",
    )


def test_dst_exists_without_force_then_force(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    refused(src, dst, ConvertOptions("fp8"), r"DST exists; pass --force to replace it")
    # --force with a failing conversion keeps the old DST intact
    cal = tmp_path / "c.safetensors"
    save_tensors(cal, {"x": np.array(1.0, np.float32)})
    refused(src, dst, ConvertOptions("nvfp4", force=True, calibration=cal), "no calibration entry")
    before_src = snapshot(src)
    convert_checkpoint(src, dst, ConvertOptions("fp8", force=True))
    assert not (dst / "keep.txt").exists() and (dst / "conversion_report.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.safetensors", "out", "src"]
    assert snapshot(src) == before_src


def test_dst_inside_src_and_src_not_a_model(src: Path, tmp_path: Path) -> None:
    refused(src, src / "q", ConvertOptions("fp8"), r"DST must not be SRC or lie inside it")
    refused(src, src, ConvertOptions("fp8", force=True), r"DST must not be SRC or lie inside it")
    (src / "config.json").unlink()
    refused(src, tmp_path / "out", ConvertOptions("fp8"), r"config\.json: config\.json is missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(empty, tmp_path / "out", ConvertOptions("fp8"), r"config\.json is missing")


def test_already_quantized_source(src: Path, tmp_path: Path) -> None:
    convert_checkpoint(src, tmp_path / "q", ConvertOptions("fp8"))
    refused(tmp_path / "q", tmp_path / "qq", ConvertOptions("nvfp4"), r"SRC is already quantized")


@pytest.mark.parametrize("fmt", ["nvfp4", "q2_0"])
def test_keyboard_interrupt_leaves_nothing(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    real = work.quantize_tensor
    calls = []

    def flaky(task: work.QuantTask) -> work.QuantResult:
        calls.append(task.name)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(work, "quantize_tensor", flaky)
    before = snapshot(src.parent)
    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(src, tmp_path / "out", ConvertOptions(fmt))
    assert len(calls) == 4
    assert snapshot(src.parent) == before


def test_src_never_written_on_success(src: Path, tmp_path: Path) -> None:
    before = snapshot(src)
    for fmt in ("nvfp4", "fp8", "w8a8", "q2_0"):
        convert_checkpoint(src, tmp_path / fmt, ConvertOptions(fmt))
    assert snapshot(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fp8", "nvfp4", "q2_0", "src", "w8a8"]


MEASURE = textwrap.dedent(
    """
    import json, resource, sys, tracemalloc
    from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
    import metrale.checkpoint.gguf_q2, metrale.checkpoint.work  # imports are not the conversion's memory
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    src, dst, fmt, mode = sys.argv[1:5]
    base = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, status("VmRSS:"))
    if mode == "tracemalloc":
        tracemalloc.start()
    convert_checkpoint(src, dst, ConvertOptions(fmt))
    peak = tracemalloc.get_traced_memory()[1] if mode == "tracemalloc" else 0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    print(json.dumps({"rss_growth": rss, "traced_peak": peak}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and ru_maxrss in KiB")
def test_memory_bound_on_checkpoint_larger_than_the_bound(tmp_path: Path) -> None:
    """A ~40 MB checkpoint of 0.13 MB tensors converts within the stated bound (a few MB)."""
    hidden, inter, layers = 128, 512, 80
    src = make_example_checkpoint(
        tmp_path / "big",
        hidden=hidden,
        intermediate=inter,
        layers=layers,
        vocab=512,
        heads=4,
        kv_heads=4,
        shards=3,
    )
    size = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    with HfFolder(src) as f:
        n_tensors = len(f.names())
    bound = memory_bound(hidden * inter, n_tensors)
    rss_slack = 8 << 20  # allocator and lazily paged code, measured ≈ 3-5 MB
    assert size > 3 * (bound + rss_slack)
    script = tmp_path / "measure.py"
    script.write_text(MEASURE)
    for fmt, mode in (("nvfp4", "rss"), ("q2_0", "tracemalloc")):
        out = subprocess.run(
            [sys.executable, str(script), str(src), str(tmp_path / fmt), fmt, mode],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ),
        )
        got = json.loads(out.stdout.strip().splitlines()[-1])
        if mode == "rss":
            assert got["rss_growth"] < bound + rss_slack, (got, bound, size)
        else:
            assert 0 < got["traced_peak"] < bound, (got, bound, size)
