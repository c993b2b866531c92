"""``metrale.cuda.torch_stream.cupy_stream`` picks the CUDA stream protocol where CuPy and the
stream have it and CuPy's deprecated ``ExternalStream`` otherwise (a stand-in CuPy; the GPU
test in tests/gpu/test_torch_cuda.py checks the real one)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from metrale.cuda.torch_stream import cupy_stream


class _Stream:
    def __init__(self, ptr: int, protocol: bool) -> None:
        self.cuda_stream = ptr
        if protocol:
            self.__cuda_stream__ = lambda: (0, ptr)


def _fake_cupy(monkeypatch: pytest.MonkeyPatch, from_external: bool) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []

    class Stream:
        pass

    if from_external:
        Stream.from_external = classmethod(lambda cls, obj: calls.append(("from_external", obj)) or "proto")  # type: ignore[attr-defined]

    def external(ptr: int, device: int) -> str:
        calls.append(("ExternalStream", (ptr, device)))
        return "external"

    cuda = types.SimpleNamespace(Stream=Stream, ExternalStream=external)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    return calls


def test_the_protocol_where_both_have_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_cupy(monkeypatch, from_external=True)
    s = _Stream(0xABC, protocol=True)
    assert cupy_stream(s, 3) == "proto" and calls == [("from_external", s)]


@pytest.mark.parametrize(("from_external", "protocol"), [(False, True), (True, False), (False, False)])
def test_external_stream_otherwise(
    monkeypatch: pytest.MonkeyPatch, from_external: bool, protocol: bool
) -> None:
    calls = _fake_cupy(monkeypatch, from_external=from_external)
    assert cupy_stream(_Stream(0xABC, protocol=protocol), 3) == "external"
    assert calls == [("ExternalStream", (0xABC, 3))]
