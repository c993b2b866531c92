"""safetensors I/O for the converter: memory-mapped reads and streaming writes.

Reading parses the header itself and maps the file, so a tensor is a zero-copy numpy view
(bf16 and float8 through ``ml_dtypes``) and its pages can be handed back to the kernel once
the tensor is processed (``release``): the resident memory of a conversion stays bounded by
the tensors in flight, not by the checkpoint. Every malformed input raises MetraleError
naming the file and, where there is one, the tensor.

Writing is streaming too: the header is laid out from the planned (name, dtype, shape)
entries, then each tensor's bytes are appended in that order. ``save_tensors`` is
the small-dict convenience on the same writer. Neither needs torch (safetensors' numpy API
lacks bf16 and float8; ml_dtypes gives numpy those dtypes).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import stat
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np

from metrale.errors import MetraleError

#: safetensors dtype code -> numpy dtype.
DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16),
    "U32": np.dtype(np.uint32),
    "I32": np.dtype(np.int32),
    "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
CODES: dict[np.dtype, str] = {v: k for k, v in DTYPES.items()}
#: Float dtypes a source weight may have.
SOURCE_FLOAT_CODES = ("BF16", "F16", "F32")
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_MAX_HEADER = 100 * 1024 * 1024
_PAGE = mmap.PAGESIZE
#: Released ranges reach this far past a tensor: the kernel's fault-around maps neighbouring
#: pages (64 KiB by default) that would otherwise stay resident.
_MARGIN = 256 * 1024
#: Longest error message metrale prints or raises from foreign text (paths, OS errors, names).
MAX_MESSAGE = 600
#: What convert does with other files (the reason a link or special file is refused).
ONLY_REGULAR = "metrale reads and copies only regular files inside the model folder"


def bounded(msg: str, limit: int = MAX_MESSAGE) -> str:
    """``msg`` cut to at most ``limit`` characters, saying how much was cut."""
    if len(msg) <= limit:
        return msg
    tail = f" … ({len(msg) - limit + 40} more characters)"
    return msg[: limit - len(tail)] + tail


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a file" if stat.S_ISREG(mode) else "a special file"


def src_roots(folder: Path) -> tuple[Path, ...]:
    """The folders a file of SRC ``folder`` may resolve into: the folder itself and, for a
    Hugging Face hub cache snapshot (``<repo>/snapshots/<rev>``, whose files are links to
    ``../../blobs``), the repository's ``blobs`` folder."""
    root = folder.resolve()
    roots = [root]
    if root.parent.name == "snapshots" and (root.parent.parent / "blobs").is_dir():
        roots.append(root.parent.parent / "blobs")
    return tuple(roots)


def file_kind(p: Path, roots: tuple[Path, ...]) -> str:
    """``"file"`` for a regular file inside ``roots`` (directly or through symlinks),
    ``"folder"`` for a real folder (not a link); MetraleError naming ``p`` otherwise: a symlink
    loop, a broken link, a link out of ``roots`` or to a folder, a FIFO, device or socket."""
    try:
        st = os.lstat(p)
    except OSError as e:
        raise MetraleError(bounded(f"{p}: {e.strerror or e}")) from None
    if not stat.S_ISLNK(st.st_mode):
        if stat.S_ISREG(st.st_mode):
            return "file"
        if stat.S_ISDIR(st.st_mode):
            return "folder"
        raise MetraleError(bounded(f"{p}: {_kind(st.st_mode)}; {ONLY_REGULAR}"))
    try:
        target = Path(os.path.realpath(p, strict=True))
        mode = os.stat(target).st_mode
    except (OSError, RuntimeError) as e:
        loop = isinstance(e, RuntimeError) or getattr(e, "errno", None) == 40  # ELOOP
        why = "a symlink loop" if loop else f"a broken symlink (to {os.readlink(p)})"
        raise MetraleError(bounded(f"{p}: {why}; {ONLY_REGULAR}")) from None
    inside = any(target == r or r in target.parents for r in roots)
    if inside and stat.S_ISREG(mode):
        return "file"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        where = " outside the model folder" if not inside else ""
        why = f"a symlink to {_kind(mode)}{where} ({target})"
    else:
        where = ", outside the model folder" if not inside else ""
        why = f"a symlink to {target}{where} ({_kind(mode)})"
    raise MetraleError(bounded(f"{p}: {why}; {ONLY_REGULAR}"))


def open_regular(p: Path) -> BinaryIO:
    """``p`` opened for reading, refused unless what it opens is a regular file (checked on
    the open file, so a file swapped for a FIFO or device since the plan is caught)."""
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise MetraleError(bounded(f"{p}: {_kind(mode)}; {ONLY_REGULAR}"))
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True)
class TensorEntry:
    """A tensor's header entry: safetensors dtype code, shape and byte range in the data area."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return n * DTYPES[dtype].itemsize


class SafetensorsFile:
    """A memory-mapped safetensors file: ``entries`` from the validated header, ``tensor(name)``
    a read-only numpy view, ``release(name)`` drops that tensor's pages from resident memory."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        p = self.path
        if not p.is_file() and not p.is_symlink():
            raise MetraleError(f"{p}: safetensors file is missing")
        file_kind(p, (Path(os.path.realpath(p.parent)), Path("/")))  # a loop, a broken link, a FIFO
        try:
            self._init(p)
        except OSError as e:
            raise MetraleError(f"{p}: {e.strerror or e}") from None

    def _init(self, p: Path) -> None:
        size = p.stat().st_size
        if size < 8:
            raise MetraleError(
                f"{p}: truncated safetensors file ({size} bytes, shorter than its 8-byte header length)"
            )
        with open(p, "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
            if hlen > min(size - 8, _MAX_HEADER):
                raise MetraleError(
                    f"{p}: corrupt or truncated safetensors file (header length {hlen} but the file holds "
                    f"{size - 8} bytes after it)"
                )
            raw = f.read(hlen)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise MetraleError(f"{p}: corrupt safetensors header ({e})") from None
        if not isinstance(header, dict):
            raise MetraleError(f"{p}: corrupt safetensors header (not a JSON object)")
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict):
            raise MetraleError(f"{p}: corrupt safetensors header (__metadata__ is not an object)")
        self.metadata: dict[str, str] = {str(k): str(v) for k, v in meta.items()}
        self.data_start = 8 + hlen
        data_len = size - self.data_start
        entries: dict[str, TensorEntry] = {}
        for name, e in header.items():
            entries[name] = self._entry(name, e, data_len)
        _check_contiguous(p, entries, data_len)
        self.entries = entries
        self._map: mmap.mmap | None = None
        self._size = size

    def _entry(self, name: str, e: Any, data_len: int) -> TensorEntry:
        p = self.path
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= set(e):
            raise MetraleError(f"{p}: corrupt safetensors header entry for tensor {name!r}")
        dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in DTYPES:
            raise MetraleError(f"{p}: tensor {name!r} has unsupported dtype {dt!r}")
        ok = isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)
        ok = ok and isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)
        if not ok or offs[0] < 0 or offs[1] < offs[0]:
            raise MetraleError(f"{p}: corrupt safetensors header entry for tensor {name!r}")
        shp = tuple(shape)
        want = _nbytes(dt, shp)
        if offs[1] - offs[0] != want:
            raise MetraleError(
                f"{p}: corrupt safetensors header: tensor {name!r} {dt}{list(shp)} needs {want} bytes, "
                f"its offsets span {offs[1] - offs[0]}"
            )
        if offs[1] > data_len:
            raise MetraleError(
                f"{p}: truncated safetensors file: tensor {name!r} ends at byte {offs[1]} of the data area "
                f"but the file holds only {data_len}"
            )
        return TensorEntry(name, dt, shp, offs[0], offs[1])

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _mapped(self) -> mmap.mmap:
        if self._map is None:
            # mmap keeps its own duplicate of the descriptor: the file object can close at once,
            # so a folder dropped without close() leaks no open file.
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._map

    def names(self) -> list[str]:
        """Tensor names in the order of their data."""
        return sorted(self.entries, key=lambda n: self.entries[n].begin)

    def tensor(self, name: str) -> np.ndarray:
        """A read-only numpy view of tensor ``name`` (no copy)."""
        e = self.entries.get(name)
        if e is None:
            raise MetraleError(f"{self.path}: no tensor named {name!r}")
        if e.nbytes == 0:
            return np.zeros(e.shape, dtype=DTYPES[e.dtype])
        m = self._mapped()
        a = np.frombuffer(m, dtype=DTYPES[e.dtype], count=e.numel, offset=self.data_start + e.begin)
        return a.reshape(e.shape)

    def raw_chunks(self, name: str, chunk: int = 8 << 20) -> Iterator[memoryview]:
        """The bytes of tensor ``name`` in pieces of at most ``chunk`` bytes (pages released as read)."""
        e = self.entries[name]
        m = self._mapped()
        pos, end = self.data_start + e.begin, self.data_start + e.end
        view = memoryview(m)
        try:
            while pos < end:
                nxt = min(end, pos + chunk)
                yield view[pos:nxt]
                self._advise(pos, nxt)
                pos = nxt
        finally:
            view.release()

    def release(self, name: str) -> None:
        """Hand the pages of tensor ``name`` back (they stay in the page cache, not in RSS)."""
        e = self.entries.get(name)
        if e is not None and self._map is not None:
            self._advise(self.data_start + e.begin, self.data_start + e.end)

    def _advise(self, start: int, end: int) -> None:
        if self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        lo = max(0, ((start - _MARGIN) // _PAGE) * _PAGE)
        hi = min(self._size, -(-(end + _MARGIN) // _PAGE) * _PAGE)
        if hi > lo:
            self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view is still alive; the GC closes it with the view
                pass
            self._map = None


def _check_contiguous(path: Path, entries: Mapping[str, TensorEntry], data_len: int) -> None:
    """The data area is the tensors back to back from byte 0 to its end, as the safetensors
    library requires: no overlap, no gap, no trailing bytes."""
    pos = 0
    for e in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if e.begin != pos:
            how = (
                "overlaps the tensor before it" if e.begin < pos else f"leaves a gap of {e.begin - pos} bytes"
            )
            raise MetraleError(
                f"{path}: corrupt safetensors header: tensor {e.name!r} at bytes [{e.begin}, {e.end}) {how}"
            )
        pos = e.end
    if pos != data_len:
        raise MetraleError(
            f"{path}: corrupt safetensors header: the tensors end at byte {pos} of a "
            f"{data_len}-byte data area"
        )


def shard_path(folder: Path, name: object, where: str) -> Path:
    """``folder / name`` for a shard name from an index: a plain file name (no absolute path,
    no ``..``, no separator) whose file, symlinks resolved, lies inside ``folder``."""
    bad = (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or os.path.isabs(name)
    )
    if bad:
        raise MetraleError(f"{where}: weight_map entry {name!r} is not a plain file name inside the folder")
    p = folder / name
    try:
        kind = file_kind(p, src_roots(folder)) if p.is_symlink() or p.exists() else "file"
    except MetraleError as e:
        raise MetraleError(bounded(f"{where}: weight_map entry {name!r}: {e}")) from None
    if kind != "file":
        raise MetraleError(f"{where}: weight_map entry {name!r}: {p} is a folder; {ONLY_REGULAR}")
    return p


class SafetensorsWriter:
    """Write a safetensors file tensor by tensor: the header is laid out up front from
    ``entries`` (name, dtype code, shape), then ``write(name, array)`` must follow that order."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        entries: Iterable[tuple[str, str, tuple[int, ...]]],
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        header: dict[str, Any] = {}
        if metadata:
            header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
        self._order: list[tuple[str, str, tuple[int, ...], int]] = []
        off = 0
        for name, dt, shape in entries:
            if name in header:
                raise MetraleError(f"{self.path}: duplicate tensor name {name!r}")
            if dt not in DTYPES:
                raise MetraleError(f"{self.path}: tensor {name!r} has unsupported dtype {dt!r}")
            n = _nbytes(dt, tuple(shape))
            header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
            self._order.append((name, dt, tuple(shape), n))
            off += n
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        raw += b" " * (-len(raw) % 8)
        self._f: BinaryIO | None = open(self.path, "wb")
        self._put(struct.pack("<Q", len(raw)))
        self._put(raw)
        self._next = 0
        self.nbytes = 8 + len(raw) + off

    def _put(self, data: bytes | memoryview) -> None:
        """Write ``data``; an OS error (a full disk) names this file."""
        assert self._f is not None
        try:
            self._f.write(data)
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(self.path)) from None

    def _expect(self, name: str) -> tuple[str, tuple[int, ...], int]:
        if self._f is None:
            raise MetraleError(f"{self.path}: writer is closed")
        if self._next >= len(self._order) or self._order[self._next][0] != name:
            want = self._order[self._next][0] if self._next < len(self._order) else "nothing"
            raise MetraleError(f"{self.path}: wrote tensor {name!r}, expected {want!r}")
        _, dt, shape, n = self._order[self._next]
        self._next += 1
        return dt, shape, n

    def write(self, name: str, array: np.ndarray) -> None:
        """Append tensor ``name`` (dtype and shape must match the planned entry)."""
        dt, shape, n = self._expect(name)
        a = np.asarray(array, order="C")  # (ascontiguousarray would make a scalar 1-D)
        if a.dtype != DTYPES[dt] or tuple(a.shape) != shape:
            raise MetraleError(
                f"{self.path}: tensor {name!r} is {a.dtype}{list(a.shape)}, planned {dt}{list(shape)}"
            )
        if n:
            self._put(a.reshape(-1).view(np.uint8).data)

    def write_raw(self, name: str, chunks: Iterable[bytes | memoryview]) -> None:
        """Append tensor ``name`` from raw byte chunks (a copy of a source tensor)."""
        _, _, n = self._expect(name)
        got = 0
        for c in chunks:
            self._put(c)
            got += len(c)
        if got != n:
            raise MetraleError(f"{self.path}: tensor {name!r} got {got} bytes, planned {n}")

    def close(self) -> None:
        """Finish the file; raise if a planned tensor was not written."""
        if self._f is None:
            return
        f, self._f = self._f, None
        try:
            f.close()
        except OSError as e:  # the last buffered bytes
            raise OSError(e.errno, e.strerror, str(self.path)) from None
        if self._next != len(self._order):
            raise MetraleError(f"{self.path}: tensor {self._order[self._next][0]!r} was never written")

    def abort(self) -> None:
        if self._f is not None:
            f, self._f = self._f, None
            with contextlib.suppress(OSError):  # the error that aborted the write is reported
                f.close()


# ---- the small-dict convenience ----
def save_tensors(
    path: str | os.PathLike[str], tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None
) -> None:
    """Write a dict of numpy arrays (any dtype of ``DTYPES``: bf16 and float8 through ml_dtypes)
    as one safetensors file, with ``SafetensorsWriter`` (no torch)."""
    arrays = {k: np.asarray(v, order="C") for k, v in tensors.items()}
    for k, a in arrays.items():
        if a.dtype not in CODES:
            raise MetraleError(f"{path}: tensor {k!r} has dtype {a.dtype}, which safetensors cannot store")
    entries = [(k, CODES[a.dtype], tuple(a.shape)) for k, a in arrays.items()]
    w = SafetensorsWriter(path, entries, metadata=metadata)
    try:
        for k, a in arrays.items():
            w.write(k, a)
    except BaseException:
        w.abort()
        raise
    w.close()


# ---- a Hugging Face model folder ----
def read_json(path: Path, what: str) -> Any:
    """Parse JSON file ``path``; MetraleError naming it when missing or malformed."""
    if path.is_symlink() and not path.exists():
        file_kind(path, (Path("/"),))  # raises: a symlink loop or a broken link
    if not path.is_file():
        raise MetraleError(f"{path}: {what} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MetraleError(f"{path}: {what} is not valid JSON ({e})") from None


class HfFolder:
    """A Hugging Face model folder: ``config`` (config.json) and its safetensors tensors,
    one file or shards with ``model.safetensors.index.json``. ``where[name]`` is the shard."""

    def __init__(self, path: str | os.PathLike[str], *, need_config: bool = True) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise MetraleError(f"{self.path}: not a folder (want a Hugging Face model folder)")
        cfg = self.path / "config.json"
        self.config: dict[str, Any] = read_json(cfg, "config.json") if (need_config or cfg.exists()) else {}
        if not isinstance(self.config, dict):
            raise MetraleError(f"{cfg}: config.json is not a JSON object")
        idx = self.path / INDEX_NAME
        self.index: dict[str, Any] | None = None
        if idx.exists():
            self.index = read_json(idx, "safetensors index")
            wm = self.index.get("weight_map") if isinstance(self.index, dict) else None
            if not isinstance(wm, dict):
                raise MetraleError(f"{idx}: has no weight_map")
            for s in set(wm.values()):
                shard_path(self.path, s, str(idx))
            self.shards = sorted(set(wm.values()))
        else:
            self.shards = sorted(p.name for p in self.path.glob("*.safetensors"))
            roots = src_roots(self.path)
            for s in self.shards:
                file_kind(self.path / s, roots)
        if not self.shards:
            raise MetraleError(
                f"{self.path}: no safetensors files (want model.safetensors or shards with {INDEX_NAME})"
            )
        self.files: dict[str, SafetensorsFile] = {}
        self.where: dict[str, str] = {}
        for s in self.shards:
            f = SafetensorsFile(self.path / s)
            self.files[s] = f
            for n in f.names():
                if n in self.where:
                    raise MetraleError(f"{self.path / s}: tensor {n!r} also appears in {self.where[n]}")
                self.where[n] = s
        if self.index is not None:
            for n, s in self.index["weight_map"].items():
                if self.where.get(n) != s:
                    raise MetraleError(f"{self.path / s}: the index lists tensor {n!r} but the file lacks it")

    def entry(self, name: str) -> TensorEntry:
        return self.files[self.where[name]].entries[name]

    def names(self) -> list[str]:
        """Every tensor name, shard by shard in data order."""
        return [n for s in self.shards for n in self.files[s].names()]

    def tensor(self, name: str) -> np.ndarray:
        if name not in self.where:
            raise MetraleError(f"{self.path}: no tensor named {name!r}")
        return self.files[self.where[name]].tensor(name)

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def __enter__(self) -> HfFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_index(path: Path, weight_map: Mapping[str, str], total_size: int) -> None:
    """Write ``model.safetensors.index.json`` as transformers does."""
    body = {"metadata": {"total_size": int(total_size)}, "weight_map": dict(sorted(weight_map.items()))}
    path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
