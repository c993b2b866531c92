"""metrale/cuda/pdl.py without a GPU: the ctypes structures have cuda.h's layout, kernel
arguments are packed with their widths, and the launch decision (first launch of an entry point
plain, the rest programmatic with attribute 6 = 1) reaches the driver call as built."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

from metrale.cuda import pdl
from metrale.errors import MetraleError


def test_struct_layout_matches_cuda_h() -> None:
    # cuda.h (CUDA 12/13, LP64): CUlaunchAttribute {id; pad[4]; union value[64]}, CUlaunchConfig
    # {7 x unsigned int; CUstream; CUlaunchAttribute*; unsigned int}.
    assert ctypes.sizeof(pdl.LaunchAttributeValue) == 64
    assert ctypes.sizeof(pdl.LaunchAttribute) == 72
    assert pdl.LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(pdl.LaunchConfig) == 56
    assert pdl.LaunchConfig.sharedMemBytes.offset == 24
    assert pdl.LaunchConfig.hStream.offset == 32
    assert pdl.LaunchConfig.attrs.offset == 40
    assert pdl.LaunchConfig.numAttrs.offset == 48


class FakeArray:
    """Stands for a CuPy array: ``data.ptr`` and ``__cuda_array_interface__``."""

    def __init__(self, ptr: int) -> None:
        self.data = type("Mem", (), {"ptr": ptr})()
        self.__cuda_array_interface__ = {"data": (ptr, False)}


def _read(ptrs: Any, i: int, ctype: Any) -> Any:
    return ctypes.cast(ptrs[i], ctypes.POINTER(ctype)).contents.value


def test_kernel_params_pack_each_width() -> None:
    args = (
        FakeArray(0x7F0012345670),
        np.int32(-7),
        np.int64(-(2**40) - 3),
        np.uint64(2**63 + 5),
        np.float32(-0.0),
    )
    vals, ptrs = pdl.kernel_params(args)
    assert len(vals) == 5
    assert _read(ptrs, 0, ctypes.c_uint64) == 0x7F0012345670
    assert _read(ptrs, 1, ctypes.c_int32) == -7
    assert _read(ptrs, 2, ctypes.c_int64) == -(2**40) - 3
    assert _read(ptrs, 3, ctypes.c_uint64) == 2**63 + 5
    f = ctypes.cast(ptrs[4], ctypes.POINTER(ctypes.c_uint32)).contents.value
    assert f == 0x80000000  # -0.0 keeps its sign bit


@pytest.mark.parametrize("bad", [7, 1.5, np.float64(1.0), np.int16(3), "x"])
def test_kernel_params_reject_unsized_arguments(bad: Any) -> None:
    with pytest.raises(MetraleError, match="argument 1 is"):
        pdl.kernel_params((np.int32(1), bad))


def test_kernel_params_pass_a_structure_by_its_bytes() -> None:
    """A TMA tensor map (128 bytes) is passed as the structure itself: the driver copies the
    bytes the pointer names."""
    from metrale.cuda.tma import TensorMap

    tm = TensorMap()
    for i in range(16):
        tm.opaque[i] = 0x0101010101010101 * (i + 1)
    vals, ptrs = pdl.kernel_params((np.int32(3), tm))
    assert ctypes.sizeof(TensorMap) == 128 and vals[1] is tm
    assert ctypes.string_at(ptrs[1], 128) == bytes(tm)
    assert _read(ptrs, 0, ctypes.c_int32) == 3


def test_launch_config_fills_dimensions() -> None:
    attr = pdl.LaunchAttribute()
    cfg = pdl.launch_config((66, 2), (512,), 160_000, 0x1234, attr)
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ) == (66, 2, 1)
    assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) == (512, 1, 1)
    assert cfg.sharedMemBytes == 160_000 and cfg.hStream == 0x1234 and cfg.numAttrs == 1
    assert ctypes.addressof(cfg.attrs.contents) == ctypes.addressof(attr)
    plain = pdl.launch_config((1, 1, 1), (32, 1, 1), 0, 0, None)
    assert plain.hStream is None and plain.numAttrs == 0 and not plain.attrs


class FakeKernel:
    name = "fake_kernel"

    def __init__(self) -> None:
        self.kernel = type("Fn", (), {"ptr": 0xABC0})()
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        self.calls.append((grid, block, args, shared_mem))


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def launch_ex(cfg_ref: Any, fn: Any, params: Any, extra: Any) -> int:
        cfg = ctypes.cast(cfg_ref, ctypes.POINTER(pdl.LaunchConfig)).contents
        attr = cfg.attrs.contents if cfg.numAttrs else None
        seen.append(
            {
                "grid": (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
                "smem": cfg.sharedMemBytes,
                "attr": (attr.id, attr.value.flag) if attr is not None else None,
                "n": cfg.numAttrs,
                "fn": fn.value,
                "arg0": ctypes.cast(params[0], ctypes.POINTER(ctypes.c_int32)).contents.value,
            }
        )
        return 0

    cupy_stub = type(
        "cupy",
        (),
        {"cuda": type("c", (), {"get_current_stream": staticmethod(lambda: type("s", (), {"ptr": 0})())})},
    )
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy_stub)
    monkeypatch.setattr(pdl, "_capable", lambda: True)
    monkeypatch.setattr(pdl, "_launch_ex", launch_ex)
    monkeypatch.setattr(pdl, "ENABLED", True)
    return seen


def test_first_launch_after_entry_start_is_plain(fake_driver: list[dict[str, Any]]) -> None:
    k = FakeKernel()
    pdl.entry_start()
    before = dict(pdl.counts)
    pdl.launch(k, (3, 1, 1), (128,), (np.int32(11),), 64)
    pdl.launch(k, (4, 2, 1), (128,), (np.int32(12),), 96)
    pdl.launch(k, (5,), (128,), (np.int32(13),))
    assert k.calls == [((3, 1, 1), (128,), (np.int32(11),), 64)]
    assert fake_driver == [
        {"grid": (4, 2, 1), "smem": 96, "attr": (6, 1), "n": 1, "fn": 0xABC0, "arg0": 12},
        {"grid": (5, 1, 1), "smem": 0, "attr": (6, 1), "n": 1, "fn": 0xABC0, "arg0": 13},
    ]
    assert pdl.counts["plain"] - before["plain"] == 1
    assert pdl.counts["programmatic"] - before["programmatic"] == 2
    pdl.entry_start()
    pdl.launch(k, (6,), (32,), (np.int32(14),))
    assert len(k.calls) == 2 and len(fake_driver) == 2


def test_disabled_launches_plainly(
    fake_driver: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pdl, "ENABLED", False)
    k = FakeKernel()
    pdl.entry_start()
    for i in range(3):
        pdl.launch(k, (1,), (32,), (np.int32(i),))
    assert len(k.calls) == 3 and fake_driver == []


def test_a_launch_that_refuses_goes_plain_and_takes_the_entry_mark(fake_driver: list[dict[str, Any]]) -> None:
    """``programmatic_ok=False`` (q2_0.py's MMA launches): plain even mid-chain; as an entry
    point's first launch it consumes the mark, so the next launch is programmatic."""
    k = FakeKernel()
    pdl.entry_start()
    pdl.launch(k, (1,), (32,), (np.int32(1),), programmatic_ok=False)  # the entry's first
    pdl.launch(k, (2,), (32,), (np.int32(2),))  # programmatic: it waits for the plain one
    pdl.launch(k, (3,), (32,), (np.int32(3),), programmatic_ok=False)  # plain mid-chain
    pdl.launch(k, (4,), (32,), (np.int32(4),))
    assert [c[2][0] for c in k.calls] == [1, 3]
    assert [d["arg0"] for d in fake_driver] == [2, 4] and all(d["attr"] == (6, 1) for d in fake_driver)


def test_driver_error_names_the_kernel(
    fake_driver: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pdl, "_launch_ex", lambda *a: 700)
    k = FakeKernel()
    pdl.entry_start()
    pdl.launch(k, (1,), (32,), (np.int32(0),))
    with pytest.raises(MetraleError, match="fake_kernel failed with CUresult 700"):
        pdl.launch(k, (1,), (32,), (np.int32(0),))


def test_structure_arguments_go_through_the_driver_also_when_plain(
    fake_driver: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CuPy cannot pass a ctypes structure: a plain launch with one is a cuLaunchKernelEx call
    without the PDL attribute (counted plain), a later one programmatic; with PDL off, plain."""
    from metrale.cuda.tma import TensorMap

    k = FakeKernel()
    pdl.entry_start()
    before = dict(pdl.counts)
    pdl.launch(k, (2,), (384,), (np.int32(21), TensorMap()), 1024)
    pdl.launch(k, (3,), (384,), (np.int32(22), TensorMap()), 1024)
    assert k.calls == []
    assert [(c["attr"], c["n"], c["arg0"]) for c in fake_driver] == [(None, 0, 21), ((6, 1), 1, 22)]
    assert pdl.counts["plain"] - before["plain"] == 1
    assert pdl.counts["programmatic"] - before["programmatic"] == 1
    monkeypatch.setattr(pdl, "ENABLED", False)
    pdl.launch(k, (1,), (384,), (np.int32(23), TensorMap()))
    assert k.calls == [] and (fake_driver[-1]["attr"], fake_driver[-1]["arg0"]) == (None, 23)


@pytest.mark.parametrize(
    ("ptr", "stride", "box"),
    [(0x1008, 4096, 128), (0x1000, 4104, 128), (0x1000, 4096, 0), (0x1000, 4096, 257)],
)
def test_tensor_maps_refuse_what_tma_cannot_address(ptr: int, stride: int, box: int) -> None:
    """A misaligned address or row stride, or a box of 0 or more than 256 rows, is refused with
    the tensor named before the driver is asked."""
    from metrale.cuda import tma

    with pytest.raises(
        MetraleError, match=rf"TMA: tensor 64x4096 bytes at 0x{ptr:x}, stride {stride}, box rows {box}"
    ):
        tma.row_tiles(FakeArray(ptr), 64, 4096, stride, box)
