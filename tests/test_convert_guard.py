"""Data-loss guards of ``convert``: shard names that leave SRC, DST that appears during a
run, --force on links and unremovable folders, signals, stale temporary folders, OS errors
and silently accepted bad input; each refusal leaves SRC and DST's parent exactly as they were."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import metrale.checkpoint.convert as conv
from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.io import INDEX_NAME, HfFolder, save_tensors
from metrale.errors import MetraleError
from tests.test_convert_safety import make, refused, rewrite, snapshot

SHARD1 = "model-00001-of-00002.safetensors"


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    return make(tmp_path)


def _retarget(src: Path, new: str) -> None:
    """Point every weight_map entry of shard 1 at ``new``."""
    idx = json.loads((src / INDEX_NAME).read_text())
    idx["weight_map"] = {k: (new if v == SHARD1 else v) for k, v in idx["weight_map"].items()}
    (src / INDEX_NAME).write_text(json.dumps(idx))


@pytest.mark.parametrize(
    "name",
    [
        "../src/" + SHARD1,
        "../evil.safetensors",
        "ABS",
        "sub/" + SHARD1,
        "./" + SHARD1,
    ],
)
def test_shard_names_must_be_plain_files_in_src(src: Path, tmp_path: Path, name: str) -> None:
    if name == "ABS":
        name = str((src / SHARD1).resolve())
    if name.startswith("sub/"):
        (src / "sub").mkdir()
        (src / SHARD1).rename(src / "sub" / SHARD1)
    else:
        (tmp_path / "evil.safetensors").write_bytes((src / SHARD1).read_bytes())
    _retarget(src, name)
    refused(src, tmp_path / "out", ConvertOptions("fp8"), rf"{INDEX_NAME}: weight_map entry .*{name!r}")


def test_shard_symlink_leaving_src_is_refused(src: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.safetensors").write_bytes((src / SHARD1).read_bytes())
    (src / "link.safetensors").symlink_to(tmp_path / "outside.safetensors")
    _retarget(src, "link.safetensors")
    (src / SHARD1).unlink()
    why = r"'link\.safetensors': .*a symlink to a file outside the model folder"
    refused(src, tmp_path / "out", ConvertOptions("fp8"), why)


def test_dst_appearing_during_the_run_is_not_replaced(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dst = tmp_path / "out"
    real = conv._copy_other_files

    def racer(s: Path, t: Path, skip: set[str]) -> None:
        real(s, t, skip)
        dst.mkdir()
        (dst / "theirs.txt").write_text("theirs")

    monkeypatch.setattr(conv, "_copy_other_files", racer)
    with pytest.raises(MetraleError, match=r"out: DST appeared during the conversion"):
        convert_checkpoint(src, dst, ConvertOptions("fp8"))
    assert sorted(p.name for p in dst.iterdir()) == ["theirs.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]


def test_publish_fallback_without_renameat2_also_refuses(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conv, "_renameat2", None)
    test_dst_appearing_during_the_run_is_not_replaced(src, tmp_path, monkeypatch)


def test_force_replaces_a_symlink_dst_as_a_link(src: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    dst = tmp_path / "out"
    dst.symlink_to(target)
    refused(src, dst, ConvertOptions("fp8"), r"DST exists; pass --force")
    convert_checkpoint(src, dst, ConvertOptions("fp8", force=True))
    assert not dst.is_symlink() and (dst / "conversion_report.json").is_file()
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src", "target"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root removes read-only folders")
def test_force_on_an_unremovable_dst_is_an_error(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    (dst / "locked").mkdir(parents=True)
    (dst / "locked" / "f.txt").write_text("x")
    os.chmod(dst / "locked", 0o555)
    try:
        refused(src, dst, ConvertOptions("fp8", force=True), r"out/locked: DST cannot be removed")
    finally:
        os.chmod(dst / "locked", 0o755)


def _convert_in_child(src: Path, dst: Path) -> subprocess.Popen[str]:
    """A ``metrale convert`` process, returned once its temporary folder records its owner."""
    p = subprocess.Popen(
        [sys.executable, "-m", "metrale.cli", "convert", str(src), str(dst), "-q", "-f", "nvfp4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(dst.parent.glob(f".{dst.name}.metrale-tmp-*/{conv.OWNER_NAME}")):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.01)
    return p


def test_stale_temp_folders_of_killed_conversions_are_swept(tmp_path: Path) -> None:
    """A SIGKILLed conversion's folder is removed by the next conversion into any DST of the
    same parent; a live (stopped) one's, another host's and an unrecorded one are kept."""
    s = make_example_checkpoint(tmp_path / "big", hidden=256, intermediate=1024, layers=24, shards=2)
    work = tmp_path / "work"
    work.mkdir()
    live = _convert_in_child(s, work / "b")
    live.send_signal(signal.SIGSTOP)
    try:
        (alive,) = work.glob(".b.metrale-tmp-*")
        killed = _convert_in_child(s, work / "a")  # its own sweep keeps the stopped one's
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=60)  # reaped: its PID is gone
        (dead,) = work.glob(".a.metrale-tmp-*")
        other = work / ".c.metrale-tmp-1-0-00000000"
        shutil.copytree(dead, other)
        rec = json.loads((other / conv.OWNER_NAME).read_text())
        (other / conv.OWNER_NAME).write_text(json.dumps(rec | {"host": rec["host"] + "-elsewhere"}))
        bare = work / ".d.metrale-tmp-1-0-00000000"
        bare.mkdir()
        convert_checkpoint(s, work / "e", ConvertOptions("fp8"))
        left = sorted(p.name for p in work.iterdir())
        assert left == sorted([alive.name, other.name, bare.name, "e"]), left
        assert not (work / "e" / conv.OWNER_NAME).exists()
    finally:
        live.send_signal(signal.SIGCONT)
        live.kill()
        live.communicate(timeout=60)


def test_convert_help_says_it_sweeps() -> None:
    from typer.testing import CliRunner

    from metrale.cli import app

    text = " ".join(CliRunner().invoke(app, ["convert", "--help"]).output.split())
    assert "killed conversions left in DST's parent" in text and "recorded inside is gone" in text


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_parent_is_a_one_line_error(src: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        refused(src, ro / "out", ConvertOptions("fp8"), r"ro: cannot create DST here: Permission denied")
    finally:
        os.chmod(ro, 0o755)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads unreadable files")
def test_unreadable_shard_is_a_one_line_error(src: Path, tmp_path: Path) -> None:
    os.chmod(src / SHARD1, 0)
    try:
        refused(src, tmp_path / "out", ConvertOptions("fp8"), rf"{SHARD1}: Permission denied")
    finally:
        os.chmod(src / SHARD1, 0o644)


def test_os_error_while_writing_leaves_no_litter(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import metrale.checkpoint.io as io

    real = io.SafetensorsWriter.write

    def full(self: io.SafetensorsWriter, name: str, array: np.ndarray) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.SafetensorsWriter, "write", full)
    refused(src, tmp_path / "out", ConvertOptions("fp8"), r"\.metrale-tmp-.*: No space left on device")
    monkeypatch.setattr(io.SafetensorsWriter, "write", real)


def _offsets(src: Path, shift: int) -> None:
    p = src / SHARD1
    raw = p.read_bytes()
    (hlen,) = np.frombuffer(raw[:8], np.uint64)
    header = json.loads(raw[8 : 8 + int(hlen)])
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    last = header[names[-1]]["data_offsets"]
    header[names[-1]]["data_offsets"] = [last[0] + shift, last[1] + shift]
    body = json.dumps(header).encode()
    body += b" " * (-len(body) % 8)
    data = raw[8 + int(hlen) :]
    data = data + b"\0" * shift if shift > 0 else data
    p.write_bytes(np.uint64(len(body)).tobytes() + body + data)


@pytest.mark.parametrize("shift", [-2, 8])
def test_overlapping_or_gappy_data_offsets(src: Path, tmp_path: Path, shift: int) -> None:
    _offsets(src, shift)
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("fp8"),
        rf"{SHARD1}: corrupt safetensors header: tensor .* (overlaps|leaves a gap)",
    )


def test_config_sizes_must_match_the_tensors(src: Path, tmp_path: Path) -> None:
    cfg = json.loads((src / "config.json").read_text())
    cfg["intermediate_size"] = 256
    (src / "config.json").write_text(json.dumps(cfg))
    for fmt in ("fp8", "q2_0"):
        refused(
            src,
            tmp_path / "out",
            ConvertOptions(fmt),
            r"config\.json: intermediate_size 256 disagrees with tensor "
            r"'model\.layers\.0\.mlp\.gate_proj\.weight' "
            r"\[128, 64\]",
        )


@pytest.mark.parametrize("shape", [(128 * 64,), (2, 64, 64)])
def test_ffn_weight_that_is_not_2d_is_refused(src: Path, tmp_path: Path, shape: tuple[int, ...]) -> None:
    import ml_dtypes

    rewrite(src, "model.layers.0.mlp.up_proj.weight", np.ones(shape, ml_dtypes.bfloat16))
    refused(
        src,
        tmp_path / "out",
        ConvertOptions("fp8"),
        rf"tensor 'model\.layers\.0\.mlp\.up_proj\.weight' has shape {list(shape)}".replace(
            "[", r"\["
        ).replace("]", r"\]")
        + r": a projection weight must be 2-D",
    )


def test_sigterm_and_sighup_clean_up_like_sigint(tmp_path: Path) -> None:
    s = make_example_checkpoint(
        tmp_path / "big", hidden=256, intermediate=1024, layers=24, vocab=512, shards=2
    )
    for sig in (signal.SIGTERM, signal.SIGHUP):
        before = snapshot(tmp_path)
        p = subprocess.Popen(
            [sys.executable, "-m", "metrale.cli", "convert", str(s), str(tmp_path / "out"), "-q", "-j", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not any(".metrale-tmp-" in x.name for x in tmp_path.iterdir()):
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.3)
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 128 + sig, err
        assert "Traceback" not in err and "interrupted" in err
        assert snapshot(tmp_path) == before


def test_bad_max_rel_error_is_refused(src: Path, tmp_path: Path) -> None:
    from metrale.checkpoint.verify import verify_path

    convert_checkpoint(src, tmp_path / "q", ConvertOptions("fp8"))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(MetraleError, match=r"--max-rel-error .*: want a finite number > 0"):
            verify_path(tmp_path / "q", src, max_rel_error=bad)


def test_save_tensors_fixture_still_readable(tmp_path: Path) -> None:
    save_tensors(tmp_path / "a.safetensors", {"a": np.ones((2, 2), np.float32), "b": np.zeros(3, np.int8)})
    with HfFolder(tmp_path, need_config=False) as f:
        assert f.names() == ["a", "b"]


def test_read_only_parent_simulated(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same refusal where the tests run as root: mkdir of the temporary folder fails."""
    real = Path.mkdir

    def deny(self: Path, *a: object, **k: object) -> None:
        if ".metrale-tmp-" in self.name:
            raise PermissionError(13, "Permission denied", str(self))
        real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", deny)
    refused(src, tmp_path / "out", ConvertOptions("fp8"), r": cannot create DST here: Permission denied")


def test_unreadable_shard_simulated(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.open

    def deny(file: object, *a: object, **k: object) -> object:
        if str(file).endswith(SHARD1):
            raise PermissionError(13, "Permission denied", str(file))
        return real(file, *a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", deny)
    refused(src, tmp_path / "out", ConvertOptions("fp8"), rf"{SHARD1}: Permission denied")


def test_unremovable_dst_simulated(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "out"
    (dst / "locked").mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p).endswith("locked") else real(p, m))
    refused(src, dst, ConvertOptions("fp8", force=True), r"out/locked: DST cannot be removed")


def test_cli_demo_cuda_without_gpu_is_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from metrale.backend import get_backend
    from metrale.cli import app
    from metrale.errors import BackendUnavailable

    try:
        get_backend("cuda")
        pytest.skip("a GPU is present")
    except BackendUnavailable:
        pass
    r = CliRunner().invoke(app, ["demo", "--backend", "cuda", "--out", str(tmp_path / "d")])
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "error: --backend cuda: the CUDA backend cannot run here" in r.output.replace("\n", " ")


def test_cli_bad_max_rel_error(src: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from metrale.cli import app

    convert_checkpoint(src, tmp_path / "q", ConvertOptions("fp8"))
    r = CliRunner().invoke(
        app, ["verify", str(tmp_path / "q"), "--against", str(src), "--max-rel-error", "nan"]
    )
    assert r.exit_code == 1 and "error: --max-rel-error nan: want a finite number > 0" in r.output


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux")
def test_workers_exit_when_the_parent_is_killed(tmp_path: Path) -> None:
    s = make_example_checkpoint(
        tmp_path / "big", hidden=256, intermediate=1024, layers=24, vocab=512, shards=2
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "metrale.cli", "convert", str(s), str(tmp_path / "out"), "-q", "-j", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    kids: list[int] = []
    deadline = time.monotonic() + 60
    while len(kids) < 3:  # the resource tracker and two workers
        assert p.poll() is None and time.monotonic() < deadline
        kids = [int(k) for k in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        time.sleep(0.02)
    p.kill()
    p.wait()
    deadline = time.monotonic() + 10
    alive = kids
    while alive and time.monotonic() < deadline:
        alive = [k for k in kids if Path(f"/proc/{k}").exists() and "Z" not in _state(k)]
        time.sleep(0.05)
    workers = [k for k in alive if "spawn_main" in Path(f"/proc/{k}/cmdline").read_text()]
    for k in alive:
        os.kill(k, signal.SIGKILL)
    assert workers == []


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2]
    except (OSError, ValueError):
        return "Z"


def test_cli_demo_failure_says_what_it_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import metrale.checkpoint.verify as verify
    from metrale.cli import app

    def boom(*a: object, **k: object) -> object:
        raise MetraleError("injected failure")

    monkeypatch.setattr(verify, "verify_path", boom)
    r = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d")], env={"COLUMNS": "240"})
    assert r.exit_code == 1
    out = r.output.replace("\n", " ")
    assert "error: injected failure" in out
    assert f"the files written so far are kept in {tmp_path / 'd'}" in out
    assert (tmp_path / "d" / "llama-tiny" / "config.json").is_file()


def test_cli_bench_without_gpu_is_one_line() -> None:
    from metrale.backend import get_backend
    from metrale.errors import BackendUnavailable

    try:
        get_backend("cuda")
        pytest.skip("a GPU is present")
    except BackendUnavailable:
        pass
    r = subprocess.run(
        [sys.executable, "-m", "metrale.cli", "bench"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error: bench: backend='cuda': the CUDA backend cannot run here" in r.stderr.replace("\n", " ")
    assert "install metrale[cuda]" in r.stderr.replace("\n", " ")  # brackets are not markup


def test_owner_record_appears_only_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversion killed while recording its owner leaves no empty or partial record (the
    sweep reads such a folder as unrecorded and keeps it forever): the record is renamed into
    place whole, so stopping before the rename leaves no OWNER_NAME at all."""

    def killed(*_: object) -> None:
        raise InterruptedError("killed before the rename")

    monkeypatch.setattr(conv.os, "replace", killed)
    with pytest.raises(InterruptedError):
        conv._claim(tmp_path)
    assert not (tmp_path / conv.OWNER_NAME).exists()
