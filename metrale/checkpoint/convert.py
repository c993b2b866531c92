"""``metrale convert``: a Hugging Face folder -> NVFP4 (ModelOpt), FP8 / W8A8
(compressed-tensors) or Q2_0 (GGUF type 42).

Everything is planned and checked before a byte is written (dtypes, shapes against the
format's block, calibration entries, GGUF names), then tensors stream one at a time from the
memory-mapped source into a temporary folder beside DST, renamed to DST on success. An error
or Ctrl-C removes the temporary folder; SRC is only ever read.

Memory bound (``memory_bound``): with ``workers=1`` the memory a conversion allocates is at
most ``WORKING_SET_BYTES_PER_ELEMENT`` (40) bytes per element of the largest quantized tensor
(its f32 copy, the quantizer's temporaries, the packed output and the dequantized copy for the
error) plus ``BOOKKEEPING_BYTES_PER_TENSOR`` (4 KiB) per tensor for the plan and the report;
copies stream in 8 MiB pieces and every tensor's mapped pages are released once written. The
checkpoint's size does not enter. With a pool, each worker process holds one such working
set and the main process at most ``workers + 1`` packed results.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fnmatch
import json
import os
import re
import secrets
import shutil
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from metrale.checkpoint import layouts
from metrale.checkpoint import work as _work
from metrale.checkpoint.io import (
    INDEX_NAME,
    SOURCE_FLOAT_CODES,
    HfFolder,
    SafetensorsFile,
    SafetensorsWriter,
    TensorEntry,
    bounded,
    file_kind,
    open_regular,
    src_roots,
    write_index,
)
from metrale.errors import MetraleError
from metrale.reference.formats import CONVERT_FORMATS
from metrale.reference.formats import FORMATS as SPECS
from metrale.reference.formats.spec import CONVERT_SERVES, pick_format

#: The formats convert writes (the descriptors' ``convertible`` ones).
FORMATS = CONVERT_FORMATS
#: Modules never quantized unless the user narrows these away with ``--no-default-exclude``.
DEFAULT_EXCLUDE = ("lm_head", "*embed_tokens", "*embeddings", "*embedding", "*wte", "*wpe")
FFN_RE = re.compile(r"(^|\.)mlp\.(gate_proj|up_proj|down_proj)$")
REPORT_NAME = "conversion_report.json"
#: Measured upper bound of one quantized tensor's transient memory, bytes per element
#: (source f32 copy, quantizer temporaries, packed outputs, dequantized f32); see tests.
WORKING_SET_BYTES_PER_ELEMENT = 40
BOOKKEEPING_BYTES_PER_TENSOR = 4096


def memory_bound(max_elements: int, n_tensors: int) -> int:
    """Bytes a ``workers=1`` conversion may allocate beyond the interpreter (module docstring)."""
    return WORKING_SET_BYTES_PER_ELEMENT * max_elements + BOOKKEEPING_BYTES_PER_TENSOR * n_tensors


_COPY_CHUNK = 8 << 20
_KEEP_HINT = " (keep it unquantized with --exclude, or quantize only the FFN with --ffn-only)"


@dataclass(frozen=True)
class ConvertOptions:
    """What ``convert`` does: ``format``; extra ``exclude`` globs (module or tensor names);
    every Linear but the default excludes is quantized, as ModelOpt and llm-compressor do,
    unless ``ffn_only`` narrows it to the FFN projections; ``calibration`` a safetensors
    file of per-module activation amax, or ``calibrate`` a text file whose first
    ``calibration_samples`` lines the source model runs on to measure it (NVFP4
    ``input_scale``, ``metrale.checkpoint.calibrate``); ``force`` replaces DST;
    ``workers`` > 1 quantizes in a process pool."""

    format: str
    exclude: tuple[str, ...] = ()
    ffn_only: bool = False
    default_exclude: bool = True
    calibration: Path | None = None
    calibrate: Path | None = None
    calibration_samples: int = 64
    force: bool = False
    workers: int = 1


@dataclass
class TensorReport:
    """One line of the conversion report."""

    name: str
    action: str  # "quantized" | "copied"
    format: str
    source_dtype: str
    shape: list[int]
    source_bytes: int
    bytes: int
    rel_error: float | None = None


@dataclass
class ConversionReport:
    """The report written as ``conversion_report.json`` in DST."""

    format: str
    source: str
    destination: str
    layout: str
    workers: int
    seconds: float = 0.0
    source_bytes: int = 0
    output_bytes: int = 0
    tensors: list[TensorReport] = field(default_factory=list)

    @property
    def quantized(self) -> list[TensorReport]:
        return [t for t in self.tensors if t.action == "quantized"]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["metrale_version"] = layouts.metrale_version()
        d["source_mb_per_s"] = (self.source_bytes / 1e6 / self.seconds) if self.seconds > 0 else None
        errs = [t.rel_error for t in self.quantized if t.rel_error is not None]
        d["max_rel_error"] = max(errs) if errs else None
        return d


@dataclass(frozen=True)
class _Plan:
    name: str
    shard: str
    entry: TensorEntry
    quantize: bool
    input_amax: float | None = None
    gguf_name: str | None = None
    rope_heads: int | None = None
    weight_amax: float | None = None


def module_of(tensor_name: str) -> str:
    """``model.layers.0.mlp.gate_proj.weight`` -> ``model.layers.0.mlp.gate_proj``."""
    return tensor_name[: -len(".weight")] if tensor_name.endswith(".weight") else tensor_name


def _matches(name: str, patterns: Sequence[str]) -> bool:
    mod = module_of(name)
    return any(fnmatch.fnmatchcase(mod, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def is_linear_weight(e: TensorEntry) -> bool:
    """A 2-D ``*.weight`` tensor: a Linear's (or an embedding's, which the excludes catch)."""
    return e.name.endswith(".weight") and len(e.shape) == 2


def select(folder: HfFolder, opts: ConvertOptions) -> list[str]:
    """Names of the tensors ``opts`` quantizes: every Linear (or only the FFN projections with
    ``ffn_only``), minus the excludes."""
    patterns = (DEFAULT_EXCLUDE if opts.default_exclude else ()) + tuple(opts.exclude)
    out = []
    for n in folder.names():
        e = folder.entry(n)
        if n.endswith(".weight") and FFN_RE.search(module_of(n)) and len(e.shape) != 2:
            raise MetraleError(
                f"{folder.path / folder.where[n]}: tensor {n!r} has shape {list(e.shape)}: a projection "
                "weight must be 2-D [out_features, in_features]"
            )
        if not is_linear_weight(e):
            continue
        if opts.ffn_only and not FFN_RE.search(module_of(n)):
            continue
        if _matches(n, patterns):
            continue
        out.append(n)
    return out


def read_calibration(path: Path, modules: Sequence[str]) -> dict[str, float]:
    """Per-module activation amax from a safetensors file: key ``<module>.input_amax`` (or
    ``<module>``, or ModelOpt's ``<module>.input_quantizer._amax``); any shape, amax = max |v|."""
    try:
        cal = SafetensorsFile(path)
    except MetraleError as e:
        raise MetraleError(f"--calibration: {e}") from None
    out: dict[str, float] = {}
    with cal:
        for m in modules:
            for key in (f"{m}.input_amax", m, f"{m}.input_quantizer._amax"):
                if key in cal.entries:
                    v = np.abs(np.asarray(cal.tensor(key), dtype=np.float64))
                    amax = float(v.max()) if v.size else float("nan")
                    if not np.isfinite(amax) or amax <= 0:
                        raise MetraleError(
                            f"{path}: calibration {key!r} = {amax}: want a finite positive amax"
                        )
                    out[m] = amax
                    break
            else:
                raise MetraleError(
                    f"{path}: no calibration entry for module {m!r} (want key {m + '.input_amax'!r})"
                )
    return out


def _check_paths(src: Path, dst: Path, force: bool) -> None:
    if not src.is_dir():
        raise MetraleError(f"{src}: SRC is not a folder")
    s, d = src.resolve(), dst.resolve()
    if d == s or s in d.parents:
        raise MetraleError(f"{dst}: DST must not be SRC or lie inside it (SRC is never written)")
    if d in s.parents:
        raise MetraleError(f"{dst}: DST contains SRC; refusing to replace it")
    if not d.parent.is_dir():
        raise MetraleError(f"{dst.parent}: the folder that would hold DST does not exist")
    if dst.exists() or dst.is_symlink():
        if not force:
            raise MetraleError(f"{dst}: DST exists; pass --force to replace it")
        if not dst.is_dir():
            raise MetraleError(f"{dst}: DST exists and is not a folder; refusing to replace it")


def check_options(opts: ConvertOptions) -> None:
    """Refuse an unknown format, a worker count below 1, calibration for a non-NVFP4 format,
    both calibration sources at once, or fewer than one calibration sample."""
    key = pick_format(opts.format, CONVERT_SERVES, "--format")
    if key != opts.format:
        raise MetraleError(f"--format {opts.format!r}: spell it {key!r}")
    if opts.workers < 1:
        raise MetraleError(f"--workers {opts.workers}: want at least 1")
    for opt, val in (("--calibration", opts.calibration), ("--calibrate", opts.calibrate)):
        if val is not None and opts.format != "nvfp4":
            raise MetraleError(f"{opt} applies to --format nvfp4 only (got {opts.format})")
    if opts.calibration is not None and opts.calibrate is not None:
        raise MetraleError("--calibration and --calibrate: give one (an amax file or text to measure it on)")
    if opts.calibration_samples < 1:
        raise MetraleError(f"--calibration-samples {opts.calibration_samples}: want at least 1")


def plan(src: Path, opts: ConvertOptions) -> tuple[HfFolder, list[_Plan]]:
    """Open and check SRC, and decide each tensor's fate (``opts`` already passed
    ``check_options``); raises before anything is written."""
    folder = HfFolder(src)
    try:
        return folder, _plan(folder, opts)
    except BaseException:
        folder.close()
        raise


def _plan(folder: HfFolder, opts: ConvertOptions) -> list[_Plan]:
    cfg = folder.config
    if cfg.get("quantization_config") or cfg.get("compression_config"):
        raise MetraleError(
            f"{folder.path / 'config.json'}: SRC is already quantized (has a quantization_config)"
        )
    if (folder.path / layouts.HF_QUANT_CONFIG).exists():
        raise MetraleError(f"{folder.path}: SRC is already quantized (has {layouts.HF_QUANT_CONFIG})")
    chosen = select(folder, opts)
    if not chosen:
        what = "FFN projection (mlp.gate_proj / up_proj / down_proj)" if opts.ffn_only else "Linear"
        raise MetraleError(f"{folder.path}: no {what} weights left to quantize after the excludes")
    block = SPECS[opts.format].block
    for n in chosen:
        e = folder.entry(n)
        f = folder.path / folder.where[n]
        if e.dtype not in SOURCE_FLOAT_CODES:
            raise MetraleError(f"{f}: tensor {n!r} has unsupported dtype {e.dtype} (want BF16, F16 or F32)")
        rows, k = e.shape
        if k % block or k == 0 or rows == 0:
            raise MetraleError(
                f"{f}: tensor {n!r} shape [{rows}, {k}]: K={k} is not a multiple of the "
                f"{opts.format} block of {block}" + ("" if FFN_RE.search(module_of(n)) else _KEEP_HINT)
            )
    _check_config_sizes(folder)
    amax: dict[str, float] = {}
    if opts.calibration is not None:
        amax = read_calibration(opts.calibration, [module_of(n) for n in chosen])
    elif opts.calibrate is not None:
        from metrale.checkpoint.calibrate import collect_amax

        mods = [module_of(n) for n in chosen]
        amax = collect_amax(folder.path, opts.calibrate, mods, opts.calibration_samples)
    shared: dict[str, float] = {}
    if opts.format == "nvfp4":
        from metrale.checkpoint.fusion import shared_amax

        def weight(m: str) -> np.ndarray:
            n = f"{m}.weight"
            try:
                return folder.tensor(n)
            finally:
                folder.files[folder.where[n]].release(n)

        shared = shared_amax([module_of(n) for n in chosen], weight)
    mapper = None
    if opts.format == "q2_0":
        from metrale.checkpoint.gguf_q2 import NameMapper

        mapper = NameMapper(cfg)
        for key in ("hidden_size", "intermediate_size"):
            if key not in cfg:
                raise MetraleError(f"{folder.path / 'config.json'}: lacks {key!r}, which GGUF metadata needs")
        _gguf_header(folder, None)  # RoPE and tokenizer checked before anything is written
    chosen_set = set(chosen)
    plans = []
    for n in folder.names():
        e = folder.entry(n)
        q = n in chosen_set
        gname = heads = None
        if mapper is not None:
            from metrale.checkpoint.gguf_q2 import rope_heads

            gname = mapper(n)
            heads = rope_heads(n, cfg)
            if not q and e.dtype not in SOURCE_FLOAT_CODES:
                raise MetraleError(
                    f"{folder.path / folder.where[n]}: tensor {n!r} has dtype {e.dtype}, which the GGUF "
                    "output cannot carry (want BF16, F16 or F32)"
                )
        mod = module_of(n)
        plans.append(
            _Plan(n, folder.where[n], e, q, amax.get(mod), gname, heads, shared.get(mod) if q else None)
        )
    return plans


def _check_config_sizes(folder: HfFolder) -> None:
    """config.json's hidden_size / intermediate_size / num_hidden_layers, where given, are
    positive integers (the loader's ``config_problems``) and the sizes match every FFN
    projection (gate/up [intermediate, hidden], down [hidden, intermediate])."""
    from metrale.checkpoint.checks import config_problems, require_none

    cfg = folder.config
    require_none(config_problems(cfg, str(folder.path / "config.json"), required=()))
    want = {k: cfg.get(k) for k in ("hidden_size", "intermediate_size")}
    for n in folder.names():
        m = FFN_RE.search(module_of(n))
        if m is None or not n.endswith(".weight"):
            continue
        rows, cols = folder.entry(n).shape
        out_key, in_key = (
            ("hidden_size", "intermediate_size")
            if m.group(2) == "down_proj"
            else ("intermediate_size", "hidden_size")
        )
        for key, got in ((out_key, rows), (in_key, cols)):
            if isinstance(want[key], int) and want[key] != got:
                raise MetraleError(
                    f"{folder.path / 'config.json'}: {key} {want[key]} disagrees with tensor {n!r} "
                    f"[{rows}, {cols}]"
                )


def _out_entries(p: _Plan, fmt: str) -> list[tuple[str, str, tuple[int, ...]]]:
    """The safetensors entries tensor ``p`` becomes."""
    e = p.entry
    if not p.quantize:
        return [(p.name, e.dtype, e.shape)]
    mod = module_of(p.name)
    n, k = e.shape
    entries = SPECS[fmt].entries(n, k, declares_a4=p.input_amax is not None)
    return [(f"{mod}.{suffix}", dtype, shape) for suffix, dtype, shape in entries]


Progress = Callable[[str, int], None]


def _results(
    folder: HfFolder, plans: list[_Plan], opts: ConvertOptions
) -> Iterator[tuple[_Plan, _work.QuantResult | None]]:
    """Plans in order with their quantization results (None for copies)."""

    def task(p: _Plan) -> _work.QuantTask:
        return _work.QuantTask(
            opts.format, str(folder.path / p.shard), p.name, p.input_amax, p.rope_heads, p.weight_amax
        )

    if opts.workers <= 1:
        for p in plans:
            yield p, (_work.quantize_tensor(task(p)) if p.quantize else None)
        return
    import multiprocessing as mp

    ex = ProcessPoolExecutor(
        max_workers=opts.workers, mp_context=mp.get_context("spawn"), initializer=_work.worker_init
    )
    try:
        pending: deque[tuple[_Plan, Future[_work.QuantResult] | None]] = deque()
        it = iter(plans)
        window = opts.workers + 1

        def fill() -> None:
            while sum(1 for _, f in pending if f is not None) < window:
                p = next(it, None)
                if p is None:
                    return
                pending.append((p, ex.submit(_work.quantize_tensor, task(p)) if p.quantize else None))

        fill()
        while pending:
            p, fut = pending.popleft()
            res = fut.result() if fut is not None else None
            fill()
            yield p, res
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


def other_files(src: Path, skip: set[str]) -> list[Path]:
    """SRC's files besides the shards and what convert writes itself (``skip``), relative to
    SRC, folders walked: each a regular file inside SRC or a link to one (``file_kind``: a
    link out of SRC, to a folder, device or FIFO, a broken link or a loop is an error naming it)."""
    roots = src_roots(src)
    out: list[Path] = []

    def walk(d: Path, rel: Path) -> None:
        try:
            items = sorted(d.iterdir())
        except OSError as e:
            raise MetraleError(bounded(f"{d}: {e.strerror or e}")) from None
        for item in items:
            if rel == Path() and (item.name in skip or item.suffix == ".safetensors"):
                continue
            if file_kind(item, roots) == "folder":
                walk(item, rel / item.name)
            else:
                out.append(rel / item.name)

    walk(src, Path())
    return out


def _copy_other_files(src: Path, tmp: Path, files: list[Path]) -> None:
    """Copy ``files`` (``other_files``) from SRC into ``tmp`` as regular files (links followed)."""
    for rel in files:
        target = tmp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open_regular(src / rel) as f, open(target, "wb") as g:
            shutil.copyfileobj(f, g)
        shutil.copystat(src / rel, target)


def _write_safetensors(
    folder: HfFolder,
    plans: list[_Plan],
    opts: ConvertOptions,
    tmp: Path,
    report: ConversionReport,
    progress: Progress | None,
) -> None:
    fmt = opts.format
    by_shard: dict[str, list[_Plan]] = {}
    for p in plans:
        by_shard.setdefault(p.shard, []).append(p)
    writers: dict[str, SafetensorsWriter] = {}
    out_of: dict[str, list[tuple[str, str, tuple[int, ...]]]] = {p.name: _out_entries(p, fmt) for p in plans}
    weight_map: dict[str, str] = {}
    total = 0
    for shard in folder.shards:
        entries = [e for p in by_shard.get(shard, []) for e in out_of[p.name]]
        meta = dict(folder.files[shard].metadata)
        meta.setdefault("format", "pt")
        writers[shard] = SafetensorsWriter(tmp / shard, entries, metadata=meta)
        for name, dt, shape in entries:
            weight_map[name] = shard
            total += int(np.prod(shape, dtype=np.int64)) * np.dtype(_dt(dt)).itemsize
    try:
        # Plans are in shard order, so each writer is fed in its planned order.
        for p, res in _results(folder, plans, opts):
            w = writers[p.shard]
            e = p.entry
            if res is None:
                f = folder.files[p.shard]
                w.write_raw(p.name, f.raw_chunks(p.name, _COPY_CHUNK))
                report.tensors.append(
                    TensorReport(
                        p.name, "copied", e.dtype.lower(), e.dtype, list(e.shape), e.nbytes, e.nbytes
                    )
                )
            else:
                mod = module_of(p.name)
                out_bytes = 0
                for suffix, arr in res.arrays:
                    w.write(f"{mod}.{suffix}", arr)
                    out_bytes += int(arr.nbytes)
                report.tensors.append(
                    TensorReport(
                        p.name, "quantized", fmt, e.dtype, list(e.shape), e.nbytes, out_bytes, res.rel_error
                    )
                )
            if progress is not None:
                progress(p.name, e.nbytes)
        for w in writers.values():
            w.close()
    finally:
        for w in writers.values():
            w.abort()
    if folder.index is not None:
        write_index(tmp / INDEX_NAME, weight_map, total)
    # config.json with the producer's quantization_config (+ ModelOpt's hf_quant_config.json)
    quantized = {module_of(p.name) for p in plans if p.quantize}
    ignore = sorted(
        module_of(p.name)
        for p in plans
        if not p.quantize and is_linear_weight(p.entry) and not _is_embedding(p.name)
    )
    cfg = dict(folder.config)
    if fmt == "nvfp4":
        a4 = all(p.input_amax is not None for p in plans if p.quantize)
        cfg["quantization_config"] = layouts.modelopt_quantization_config(ignore, a4)
        hq = layouts.modelopt_hf_quant_config(ignore, a4)
        (tmp / layouts.HF_QUANT_CONFIG).write_text(json.dumps(hq, indent=4) + "\n", encoding="utf-8")
    else:
        cfg["quantization_config"] = layouts.compressed_tensors_config(fmt, ignore)
    assert quantized
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")


def _is_embedding(name: str) -> bool:
    return _matches(name, DEFAULT_EXCLUDE[1:])


def _dt(code: str) -> Any:
    from metrale.checkpoint.io import DTYPES

    return DTYPES[code]


def _gguf_header(folder: HfFolder, path: Path | None) -> Any:
    """A ``gguf.GGUFWriter`` (in memory when ``path`` is None) holding the metadata and the
    tokenizer of SRC; raises on what GGUF cannot carry."""
    import gguf

    from metrale.checkpoint.gguf_q2 import add_metadata, arch_for
    from metrale.checkpoint.gguf_vocab import add_vocab

    cfg = folder.config
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[arch_for(cfg)])
    try:
        add_metadata(writer, cfg, folder.path.name)
    except MetraleError as e:
        raise MetraleError(f"{folder.path / 'config.json'}: {e}") from None
    add_vocab(writer, folder.path, cfg)
    return writer


class _PyWrite(np.ndarray):
    """An array view whose ``tofile`` writes through the file object: ``gguf``'s writer calls
    ``tofile``, whose short write (a full disk) numpy reports as "N requested and M written"
    without the OS error; ``file.write`` raises the OS's (No space left on device)."""

    def tofile(self, fid: Any, sep: str = "", format: str = "%s") -> None:
        fid.write(memoryview(np.ascontiguousarray(self).view(np.ndarray)).cast("B"))


def _py_write(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(_PyWrite)


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """OS errors without a file name (a full disk in a library's writes) name ``path``."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from None


def _write_gguf(
    folder: HfFolder,
    plans: list[_Plan],
    opts: ConvertOptions,
    tmp: Path,
    report: ConversionReport,
    progress: Progress | None,
) -> None:
    import gguf

    from metrale.checkpoint.gguf_q2 import GGUF_NAME, Q2_0_TYPE, llama3_rope_factors, permute_rows

    cfg = folder.config
    T = gguf.GGMLQuantizationType
    writer = _gguf_header(folder, tmp / GGUF_NAME)
    rope_freqs = llama3_rope_factors(cfg)
    if rope_freqs is not None:
        writer.add_tensor_info(
            gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight",
            rope_freqs.shape,
            rope_freqs.dtype,
            rope_freqs.nbytes,
            raw_dtype=T.F32,
        )
    gtype = {"BF16": T.BF16, "F16": T.F16, "F32": T.F32}
    for p in plans:
        e = p.entry
        assert p.gguf_name is not None
        if p.quantize:
            n, k = e.shape
            writer.add_tensor_info(
                p.gguf_name, (n, k // 64 * 18), np.dtype(np.uint8), n * (k // 64) * 18, raw_dtype=Q2_0_TYPE
            )
        elif len(e.shape) <= 1:
            writer.add_tensor_info(
                p.gguf_name, e.shape or (1,), np.dtype(np.float32), 4 * e.numel, raw_dtype=T.F32
            )
        else:
            item = 2 if e.dtype in ("BF16", "F16") else 4
            writer.add_tensor_info(
                p.gguf_name, e.shape, np.dtype(np.float32), item * e.numel, raw_dtype=gtype[e.dtype]
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    try:
        if rope_freqs is not None:
            writer.write_tensor_data(_py_write(rope_freqs))
        for p, res in _results(folder, plans, opts):
            e = p.entry
            if res is None:
                f = folder.files[p.shard]
                a = f.tensor(p.name)
                if len(e.shape) <= 1:
                    a = a.astype(np.float32).reshape(e.shape or (1,))
                elif p.rope_heads is not None:
                    a = permute_rows(a, p.rope_heads, p.name)
                if e.dtype == "BF16" and len(e.shape) > 1:
                    a = np.ascontiguousarray(a).view(np.uint16)
                writer.write_tensor_data(_py_write(a))
                f.release(p.name)
                report.tensors.append(
                    TensorReport(
                        p.name,
                        "copied",
                        gtype[e.dtype].name.lower() if len(e.shape) > 1 else "f32",
                        e.dtype,
                        list(e.shape),
                        e.nbytes,
                        int(a.nbytes),
                    )
                )
                del a
            else:
                ((_, blocks),) = res.arrays
                writer.write_tensor_data(_py_write(blocks))
                report.tensors.append(
                    TensorReport(
                        p.name,
                        "quantized",
                        "q2_0",
                        e.dtype,
                        list(e.shape),
                        e.nbytes,
                        int(blocks.nbytes),
                        res.rel_error,
                    )
                )
            if progress is not None:
                progress(p.name, e.nbytes)
    finally:
        writer.close()
    shutil.copy2(folder.path / "config.json", tmp / "config.json")


def _start_time(pid: int) -> str:
    """Start time of process ``pid`` in clock ticks since boot (/proc), "0" where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return "0"


def _alive(pid: int, start: str) -> bool:
    """Process ``pid`` exists and (where known) is the one that started at ``start``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return start == "0" or _start_time(pid) in (start, "0")


_OWNED = re.compile(r"^\..+\.metrale-(?:tmp|old)-(\d+)-(\d+)-[0-9a-f]+$")
#: The file inside a temporary folder that names its owner: host, PID, process start, boot.
OWNER_NAME = ".metrale-owner.json"


def _boot_id() -> str:
    """This boot's id (Linux), "" where unknown: a folder from an earlier boot has no live owner."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid), "boot": _boot_id()}


def _owned_name(dst: Path, kind: str) -> Path:
    """A hidden sibling of DST whose name records the owner: PID and process start time."""
    pid = os.getpid()
    return dst.parent / f".{dst.name}.metrale-{kind}-{pid}-{_start_time(pid)}-{secrets.token_hex(4)}"


def _claim(folder: Path) -> None:
    """Record this process as the owner of temporary folder ``folder`` (``OWNER_NAME``), written
    whole under another name and renamed into place: a process killed while writing leaves no
    empty or partial record (which would read as unrecorded and keep the folder forever)."""
    part = folder / f"{OWNER_NAME}.part"
    part.write_text(json.dumps(_owner()) + "\n", encoding="utf-8")
    os.replace(part, folder / OWNER_NAME)


def _owner_gone(folder: Path) -> bool:
    """Whether ``folder``'s recorded owner is a process of this host that no longer runs (dead
    PID, a PID reused by a later process, or an earlier boot). No record, an unreadable one
    or another host's: False (never removed)."""
    try:
        rec = json.loads((folder / OWNER_NAME).read_text(encoding="utf-8"))
        host, pid, start, boot = rec["host"], int(rec["pid"]), str(rec["start"]), str(rec["boot"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname():
        return False
    here = _boot_id()
    if boot and here and boot != here:
        return True
    return not _alive(pid, start)


def remove_stale(dst: Path) -> list[Path]:
    """Remove the temporary folders (``.<name>.metrale-tmp-*`` and ``-old-*``) in DST's parent,
    of any DST, whose owner recorded inside (``OWNER_NAME``) is a process of this host that is
    gone (killed, crashed); a live process's, another host's and unrecorded ones are kept.
    Returns what was removed."""
    gone = []
    try:
        siblings = list(dst.parent.iterdir())
    except OSError:
        return gone
    for p in siblings:
        if _OWNED.match(p.name) is None or p.is_symlink() or not p.is_dir() or not _owner_gone(p):
            continue
        shutil.rmtree(p, ignore_errors=True)
        gone.append(p)
    return gone


def _load_renameat2() -> Callable[..., int] | None:
    try:
        f = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    f.restype = ctypes.c_int
    return f


_renameat2 = _load_renameat2()
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _publish(tmp: Path, dst: Path) -> None:
    """Rename folder ``tmp`` to ``dst`` only if nothing is at ``dst``; FileExistsError otherwise.
    renameat2(RENAME_NOREPLACE) where the kernel and filesystem have it; else claim ``dst``
    with mkdir (atomic, fails if anything is there) and rename onto that empty claim (a rename
    replaces an empty folder only, so anything put into it meanwhile makes it fail)."""
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), str(dst))
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(dst))
    os.mkdir(dst)  # FileExistsError when anything is there
    try:
        os.rename(tmp, dst)
    except OSError as e:
        os.rmdir(dst)
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise FileExistsError(e.errno, e.strerror, str(dst)) from None
        raise


def _removal_blocker(dst: Path) -> tuple[Path, str] | None:
    """A folder under ``dst`` whose entries this process cannot delete, if any."""
    for d, _, _ in os.walk(dst):
        if not os.access(d, os.W_OK | os.X_OK):
            return Path(d), "Permission denied"
    if not os.access(dst.parent, os.W_OK | os.X_OK):
        return dst.parent, "Permission denied"
    return None


def _remove_dst(dst: Path) -> None:
    """--force: take DST away. A symlink is removed as a link (its target untouched); a folder
    is moved aside and deleted; if deletion fails, what is left goes back to DST and it is an error."""
    if dst.is_symlink() or not dst.is_dir():
        dst.unlink()
        return
    old = _owned_name(dst, "old")
    dst.rename(old)
    with contextlib.suppress(OSError):  # unrecorded, a leftover is kept: never a lost DST
        _claim(old)
    try:
        shutil.rmtree(old)
    except OSError as e:
        old.rename(dst)
        raise MetraleError(
            f"{e.filename or dst}: DST cannot be removed ({e.strerror or e}); it is partly deleted"
        ) from None


def convert_checkpoint(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    opts: ConvertOptions,
    *,
    progress: Progress | None = None,
    on_start: Callable[[int], None] | None = None,
) -> ConversionReport:
    """Convert SRC into DST (see the module docstring). ``on_start(total_source_bytes)`` is
    called once the plan is checked; ``progress(tensor, source_bytes)`` after each tensor."""
    srcp, dstp = Path(src), Path(dst)
    check_options(opts)
    _check_paths(srcp, dstp, opts.force)
    if opts.force and dstp.is_dir() and not dstp.is_symlink():
        blocker = _removal_blocker(dstp)
        if blocker is not None:
            raise MetraleError(f"{blocker[0]}: DST cannot be removed ({blocker[1]}); nothing was written")
    folder, plans = plan(srcp, opts)
    skip = {INDEX_NAME, "config.json", layouts.HF_QUANT_CONFIG, REPORT_NAME, OWNER_NAME}
    try:
        others = other_files(srcp, skip)
    except BaseException:
        folder.close()
        raise
    layout = SPECS[opts.format].layout
    report = ConversionReport(opts.format, str(srcp), str(dstp), layout, opts.workers)
    report.source_bytes = sum(p.entry.nbytes for p in plans)
    remove_stale(dstp)
    tmp = _owned_name(dstp, "tmp")
    t0 = time.perf_counter()
    try:
        try:
            tmp.mkdir()
        except OSError as e:
            raise MetraleError(f"{dstp.parent}: cannot create DST here: {e.strerror or e}") from None
        _claim(tmp)
        if on_start is not None:
            on_start(report.source_bytes)
        if opts.format == "q2_0":
            from metrale.checkpoint.gguf_q2 import GGUF_NAME

            with _naming(tmp / GGUF_NAME):
                _write_gguf(folder, plans, opts, tmp, report, progress)
        else:
            _write_safetensors(folder, plans, opts, tmp, report, progress)
        _copy_other_files(srcp, tmp, others)
        report.seconds = time.perf_counter() - t0
        (tmp / OWNER_NAME).unlink()
        report.output_bytes = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
        (tmp / REPORT_NAME).write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
        if opts.force and (dstp.exists() or dstp.is_symlink()):
            _remove_dst(dstp)
        try:
            _publish(tmp, dstp)
        except FileExistsError:
            raise MetraleError(
                f"{dstp}: DST appeared during the conversion; it was left as it is "
                "(pass --force to replace it)"
            ) from None
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise MetraleError(bounded(f"{e.filename or tmp}: {e.strerror or e}")) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        folder.close()
    return report
