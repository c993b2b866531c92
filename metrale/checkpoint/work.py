"""One unit of conversion work: quantize one source tensor (runs in the main process or in a
worker of the ``--workers`` pool; imports only numpy and the reference formats)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from metrale.checkpoint.io import SafetensorsFile
from metrale.errors import MetraleError
from metrale.reference.formats import CONVERT_FORMATS, FORMATS

F32 = np.float32
#: Rows per chunk when measuring the error, so the f64 difference stays small.
_ERR_ROWS = 256

_OPEN: dict[str, SafetensorsFile] = {}


@dataclass(frozen=True)
class QuantTask:
    """Quantize tensor ``name`` of file ``path`` to ``fmt`` (``input_amax`` for NVFP4 A4;
    ``rope_heads`` permutes llama q/k rows for GGUF first;
    ``weight_amax`` the amax NVFP4 fused siblings share)."""

    fmt: str
    path: str
    name: str
    input_amax: float | None = None
    rope_heads: int | None = None
    weight_amax: float | None = None


@dataclass(frozen=True)
class QuantResult:
    """The packed tensors (suffix after the module name, array) and the relative error."""

    arrays: tuple[tuple[str, np.ndarray], ...]
    rel_error: float
    nbytes: int


def worker_init() -> None:
    """A pool worker ignores Ctrl-C (the parent handles it and shuts the pool down) and, on
    Linux, is killed when its parent dies (prctl PR_SET_PDEATHSIG), so none outlives a killed run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        if os.getppid() == 1:  # the parent died before prctl
            os._exit(1)


def _file(path: str) -> SafetensorsFile:
    f = _OPEN.get(path)
    if f is None:
        f = _OPEN[path] = SafetensorsFile(path)
    return f


def rel_error(src: np.ndarray, deq: np.ndarray) -> float:
    """‖deq − src‖₂ / ‖src‖₂ in float64 (0 when both are zero, inf when only src is)."""
    num = den = 0.0
    for r0 in range(0, src.shape[0], _ERR_ROWS):
        s = src[r0 : r0 + _ERR_ROWS].astype(np.float64)
        d = deq[r0 : r0 + _ERR_ROWS].astype(np.float64) - s
        num += float(np.dot(d.ravel(), d.ravel()))
        den += float(np.dot(s.ravel(), s.ravel()))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return float(np.sqrt(num / den))


def quantize_array(
    fmt: str, w: np.ndarray, name: str, input_amax: float | None = None, weight_amax: float | None = None
):
    """The reference format object for a source weight (the producers' quantizers);
    ``weight_amax`` is the amax NVFP4 fused siblings share."""
    spec = FORMATS.get(fmt)
    if spec is None or not spec.convertible:
        raise MetraleError(f"unknown format {fmt!r} (want {', '.join(CONVERT_FORMATS)})")
    return spec.quantize(w, name=name, input_amax=input_amax, weight_amax=weight_amax)


def packed_arrays(q: Any) -> tuple[tuple[str, np.ndarray], ...]:
    """On-disk tensors of a quantized weight, by suffix (``weight``, ``weight_scale``, ...)."""
    return tuple(q.tensors().items())


def quantize_tensor(task: QuantTask) -> QuantResult:
    """Read, quantize, measure and release one tensor."""
    from metrale.checkpoint.gguf_q2 import permute_rows  # light: gguf only when q2_0 runs

    f = _file(task.path)
    where = f"{Path(task.path).name}: "
    try:
        src = f.tensor(task.name)
        if task.rope_heads is not None:
            src = permute_rows(src, task.rope_heads, task.name)
        q = quantize_array(task.fmt, src, task.name, task.input_amax, task.weight_amax)
        src32 = src.astype(F32)
        err = rel_error(src32, q.dequantize())
        nbytes = int(src.nbytes)
    except MetraleError as e:
        raise MetraleError(where + str(e)) from None
    finally:
        f.release(task.name)
    return QuantResult(packed_arrays(q), err, nbytes)
