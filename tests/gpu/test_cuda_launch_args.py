"""The CUDA backend's row helpers (``launch_args.device_rows``, ``CudaBackend.rows``): a view whose
start is off 16 bytes comes back as an aligned copy with the same bits, one row included (a
one-row view is C-contiguous whatever its start, so ``ascontiguousarray`` handed it back as it was
and the SiLU-quantize kernel's 16-byte loads stopped on a misaligned address:
performance-log.md "2026-12-07 (g)"); an aligned view comes back as it is."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.reference.activations import quantize_a8
from tests.gpu.gen import rows
from tests.helpers import assert_bits_equal

cp = pytest.importorskip("cupy")

K = 48
#: (rows, elements off the 16-byte boundary): one row and several, every even byte offset 2 .. 14.
VIEWS = [(r, off) for r in (1, 2, 5) for off in (1, 3, 5, 7)]


def _views(rng: np.random.Generator, rows_: int, off: int) -> tuple[np.ndarray, Any, Any]:
    """Host bits [rows + 2, K + 16] (128-byte rows), the device view of rows 1 .. rows from
    column ``off`` (2 off bytes into a 16-byte group) and the aligned view from column 8."""
    host = rng.integers(0, 1 << 16, (rows_ + 2, K + 16), dtype=np.uint16)
    buf = cp.asarray(host)
    view = buf[1 : 1 + rows_, off : off + K]
    assert view.data.ptr % 16 == 2 * off % 16 != 0, "the case: a start off 16 bytes"
    return host, view, buf[1 : 1 + rows_, 8 : 8 + K]


@pytest.mark.parametrize(("rows_", "off"), VIEWS)
def test_device_rows_aligns_an_unaligned_view(fresh_rng: np.random.Generator, rows_: int, off: int) -> None:
    from metrale.cuda.launch_args import device_rows

    host, view, aligned = _views(fresh_rng, rows_, off)
    got = device_rows(view, K, rows_, "x")
    assert got.data.ptr % 16 == 0 and got.strides == (2 * K, 2), (got.data.ptr % 16, got.strides)
    assert np.array_equal(cp.asnumpy(got), host[1 : 1 + rows_, off : off + K])
    assert device_rows(aligned, K, rows_, "x") is aligned


@pytest.mark.parametrize(("rows_", "off"), VIEWS)
def test_backend_rows_aligns_an_unaligned_view(
    cuda: Any, fresh_rng: np.random.Generator, rows_: int, off: int
) -> None:
    host, view, aligned = _views(fresh_rng, rows_, off)
    got = cuda.rows(view, K, "x")
    assert got.data.ptr % 16 == 0 and got.strides[1] == 2, (got.data.ptr % 16, got.strides)
    assert np.array_equal(cp.asnumpy(got), host[1 : 1 + rows_, off : off + K])
    assert cuda.rows(aligned, K, "x") is aligned


@pytest.mark.parametrize("off", [1, 3, 5, 7])
def test_w8a8_quantize_one_unaligned_row(cuda: Any, fresh_rng: np.random.Generator, off: int) -> None:
    """``w8a8_quantize`` (16-byte loads of x) on one row starting 2 .. 14 bytes off 16: the
    reference's codes and scale."""
    x = rows(fresh_rng, 1, K)
    buf = cp.zeros((1, K + 8), dtype=cp.uint16)
    buf[:, off : off + K] = cp.asarray(x.view(np.uint16))
    got = cuda.launch("w8a8_quantize", buf[:, off : off + K])
    want = quantize_a8(x)
    assert_bits_equal(cp.asnumpy(got.q), want.q, f"codes, start {2 * off} bytes off")
    assert_bits_equal(cp.asnumpy(got.scale), want.scale, f"scale, start {2 * off} bytes off")
