"""Links, special files and sizes around ``convert`` / ``inspect`` / ``verify`` / the loader:
only regular files inside SRC are read or copied (a link leaving SRC, to a device, FIFO or
folder, a broken link and a symlink loop are one-line errors naming the link), error
messages are bounded, and a full disk is an error saying so, naming the file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.io import MAX_MESSAGE, bounded, save_tensors
from metrale.checkpoint.load import load_ffn_layer
from metrale.cli import app
from metrale.errors import MetraleError
from tests.test_convert_safety import refused, snapshot


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    return make_example_checkpoint(tmp_path / "src", hidden=64, intermediate=128, layers=2)


def _one_line(r, *needles: str) -> str:
    assert r.exit_code == 1, (r.exit_code, r.output[-2000:], repr(r.exception))
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(("error: ", "violation: ")), r.stderr[-3000:]
    assert "Traceback" not in r.output and len(lines[0]) <= MAX_MESSAGE + 20
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


FILE_OUT = "a symlink to a file outside the model folder"
DIR_OUT = "a symlink to a folder outside the model folder"
DEV_OUT = "a symlink to /dev/zero, outside the model folder"


def _outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir(exist_ok=True)
    (d / "big.bin").write_bytes(b"x" * 4096)
    return d


@pytest.mark.parametrize(
    ("make_link", "why"),
    [
        (lambda s, t: (s / "tokenizer.model").symlink_to("/dev/zero"), DEV_OUT),
        (lambda s, t: (s / "extra").symlink_to(_outside(t)), DIR_OUT),
        (lambda s, t: (s / "notes.txt").symlink_to(_outside(t) / "big.bin"), FILE_OUT),
        (lambda s, t: (s / "sub").symlink_to(s / "generation_config.json"), None),
        (lambda s, t: (s / "gone.json").symlink_to(s / "nothing-here"), "a broken symlink"),
        (lambda s, t: (s / "loop.json").symlink_to(s / "loop.json"), "a symlink loop"),
        (lambda s, t: os.mkfifo(s / "pipe"), "a named pipe"),
        (lambda s, t: (s / "dir").mkdir() or os.mkfifo(s / "dir" / "pipe"), "a named pipe"),
        (
            lambda s, t: (
                (s / "inner").symlink_to(s / "dir2", target_is_directory=True) or (s / "dir2").mkdir()
            ),
            "a symlink to a folder",
        ),
    ],
    ids=[
        "dev-zero",
        "dir-outside",
        "file-outside",
        "file-inside",
        "broken",
        "loop",
        "fifo",
        "fifo-in-dir",
        "dir-inside",
    ],
)
def test_other_files_are_regular_files_inside_src(src: Path, tmp_path: Path, make_link, why) -> None:
    make_link(src, tmp_path)
    if why is None:  # a link to a regular file inside SRC: copied as a regular file
        convert_checkpoint(src, tmp_path / "out", ConvertOptions("fp8"))
        out = tmp_path / "out" / "sub"
        assert not out.is_symlink() and out.read_bytes() == (src / "generation_config.json").read_bytes()
        return
    refused(src, tmp_path / "out", ConvertOptions("fp8"), rf"{src}/.*: {why}")


def test_a_dir_link_outside_src_is_one_line_in_the_cli(src: Path, tmp_path: Path) -> None:
    (src / "extra").symlink_to(_outside(tmp_path))
    r = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out"), "-q"])
    _one_line(r, f"{src / 'extra'}: {DIR_OUT}")
    assert not (tmp_path / "out").exists()


def test_hugging_face_cache_snapshots_convert(tmp_path: Path) -> None:
    """The hub cache's snapshot folder links every file to ``../../blobs``: part of SRC."""
    plain = make_example_checkpoint(tmp_path / "plain", hidden=64, intermediate=128, layers=2, shards=2)
    repo = tmp_path / "models--org--tiny"
    snap = repo / "snapshots" / "0123abc"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in plain.iterdir():
        blob = repo / "blobs" / f"sha-{f.name}"
        shutil.copy(f, blob)
        (snap / f.name).symlink_to(Path("../..") / "blobs" / blob.name)
    convert_checkpoint(snap, tmp_path / "out", ConvertOptions("nvfp4"))
    load_ffn_layer(tmp_path / "out", layer=1, backend="reference")
    assert not (tmp_path / "out" / "generation_config.json").is_symlink()


def test_symlink_loop_shard_is_one_line_everywhere(src: Path, tmp_path: Path) -> None:
    convert_checkpoint(src, tmp_path / "q", ConvertOptions("fp8"))
    for d in (src, tmp_path / "q"):
        (d / "model.safetensors").unlink()
        (d / "model.safetensors").symlink_to(d / "model.safetensors")
    runner = CliRunner()
    want = "model.safetensors: a symlink loop"
    _one_line(runner.invoke(app, ["convert", str(src), str(tmp_path / "out"), "-q"]), want)
    _one_line(runner.invoke(app, ["inspect", str(tmp_path / "q")]), want)
    _one_line(runner.invoke(app, ["verify", str(tmp_path / "q")]), want)
    with pytest.raises(MetraleError, match=want):
        load_ffn_layer(tmp_path / "q", layer=0, backend="reference")


def test_symlink_loop_config_is_named(src: Path, tmp_path: Path) -> None:
    (src / "config.json").unlink()
    (src / "config.json").symlink_to(src / "config.json")
    refused(src, tmp_path / "out", ConvertOptions("fp8"), r"config\.json: a symlink loop")


def test_bounded_cuts_long_messages() -> None:
    assert bounded("abc") == "abc"
    long = "x" * 100_000
    b = bounded(long)
    assert len(b) <= MAX_MESSAGE and b.startswith("x" * 100) and "99" in b and "more characters" in b


def test_long_messages_are_bounded_in_the_cli(src: Path, tmp_path: Path) -> None:
    name = "model.layers.0.mlp." + "x" * 200_000 + ".weight"
    save_tensors(src / "model.safetensors", {name: np.zeros((4, 4), np.int16)}, metadata={"format": "pt"})
    r = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out"), "-q"])
    _one_line(r, "more characters")


def _write_failed(p: subprocess.CompletedProcess[str], fmt: str, why: str) -> None:
    """The conversion failed with one line naming the file written and the OS's reason."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr[-3000:]
    want = "model.gguf" if fmt == "q2_0" else "model.safetensors"
    assert f"{want}: {why}" in lines[0] and "requested" not in lines[0], lines[0]


_FSIZE_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
    sys.argv = ["metrale", *sys.argv[1:]]
    from metrale.cli import app
    app()
    """
)


@pytest.mark.parametrize("fmt", ["q2_0", "fp8"])
def test_a_short_write_names_the_file_and_the_errno(tmp_path: Path, fmt: str) -> None:
    """RLIMIT_FSIZE makes the kernel cut a write short (as a full disk does): the error is the
    OS's (File too large / No space left on device), naming the file, not numpy's byte count."""
    s = make_example_checkpoint(tmp_path / "src", hidden=256, intermediate=1024, layers=2)
    out = tmp_path / "dst"
    out.mkdir()
    before = snapshot(s, out)
    p = subprocess.run(
        [sys.executable, "-c", _FSIZE_CHILD, "convert", str(s), str(out / "o"), "-q", "-f", fmt],
        capture_output=True,
        text=True,
        timeout=120,
    )
    _write_failed(p, fmt, "File too large")
    assert snapshot(s, out) == before


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    mount = "mount -t tmpfs -o size=1m none /mnt"
    r = subprocess.run(["unshare", "-r", "-m", "sh", "-c", mount], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no unprivileged mount namespace for a small tmpfs")
@pytest.mark.parametrize("fmt", ["q2_0", "nvfp4"])
def test_a_full_disk_says_no_space_left(tmp_path: Path, fmt: str) -> None:
    """A real full filesystem: a 256 kB tmpfs in a private mount namespace."""
    s = make_example_checkpoint(tmp_path / "src", hidden=256, intermediate=1024, layers=2)
    mnt = tmp_path / "small"
    mnt.mkdir()
    script = (
        f"mount -t tmpfs -o size=256k none {mnt} && "
        f"{sys.executable} -m metrale.cli convert {s} {mnt}/o -q -f {fmt}; rc=$?; "
        f"ls -A {mnt}; exit $rc"
    )
    p = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    _write_failed(p, fmt, "No space left on device")
    assert p.stdout.strip() == "", p.stdout  # nothing left on the full filesystem
