"""The W8A8 SiLU-quantize launch shapes (CPU): the kernels kernels/w8a8.cu is built with are the
ones metrale/cuda/w8a8.py launches (cluster size, threads, register groups), the 8-CTA cluster
kernel holds a row of MAX_K, and the rows each one-launch kernel takes."""

from __future__ import annotations

import re

import pytest

from metrale.cuda import runtime, w8a8
from metrale.reference.formats.w8a8 import MAX_K


def _builds() -> dict[str, tuple[int, int, int]]:
    """name -> (CTAs per row, threads, groups) of the W8A8_SILU_QUANT lines of the built source."""
    text = runtime.source("w8a8.cu")
    lines = re.findall(r"^W8A8_SILU_QUANT\((\d+), (\d+), (\d+), (\w+)\)$", text, re.M)
    return {name: (int(cl), int(t), int(v)) for cl, t, v, name in lines}


def test_launch_constants_match_the_kernels() -> None:
    built = _builds()
    assert built["w8a8_silu_quant"][0] == 8
    for cl, (threads, groups) in w8a8.SILU_QUANT_BUILDS.items():
        name = "w8a8_silu_quant" if cl == 8 else f"w8a8_silu_quant_c{cl}"
        assert built[name] == (cl, threads, groups), name
    assert len(built) == len(w8a8.SILU_QUANT_BUILDS)
    slice_ = re.search(r"^#define SILU_SLICE (\d+)$", (runtime.KERNEL_DIR / "w8a8.cu").read_text(), re.M)
    assert slice_ is not None and int(slice_.group(1)) == w8a8.SILU_SLICE


def test_cluster_kernel_registers_hold_the_longest_row() -> None:
    """Each thread keeps its groups of 8 elements: the 8-CTA cluster covers MAX_K exactly (a
    larger MAX_K would leave elements unprocessed; the GPU tests run K = MAX_K); every cluster
    is of the portable size (no opt-in attribute at launch)."""
    cl, threads, groups = _builds()["w8a8_silu_quant"]
    assert 8 * groups * threads * cl == MAX_K
    assert all(c <= 8 and threads <= 1024 for c, threads, _ in _builds().values())


def test_silu_quant_kernel_routing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster kernel to SILU_QUANT_CLUSTER_MAX_ROWS rows, then SILU_ROW_KERNELS' kernels
    where their registers hold K, else (None) the slice pair."""
    monkeypatch.setattr(w8a8, "SILU_QUANT_CLUSTER_MAX_ROWS", 32)
    monkeypatch.setattr(w8a8, "SILU_ROW_KERNELS", ())
    assert w8a8.silu_quant_kernel(1, MAX_K) == ("w8a8_silu_quant", 8, 256)
    assert w8a8.silu_quant_kernel(32, 12288) == ("w8a8_silu_quant", 8, 256)
    assert w8a8.silu_quant_kernel(33, 12288) is None
    monkeypatch.setattr(w8a8, "SILU_ROW_KERNELS", ((128, 2), (1 << 30, 1)))
    assert w8a8.silu_quant_kernel(33, 12288) == ("w8a8_silu_quant_c2", 2, 512)
    assert w8a8.silu_quant_kernel(128, MAX_K) == ("w8a8_silu_quant_c2", 2, 512)
    assert w8a8.silu_quant_kernel(129, 12288) == ("w8a8_silu_quant_c1", 1, 512)
    assert w8a8.silu_quant_kernel(4096, 65536) == ("w8a8_silu_quant_c1", 1, 512)
    assert w8a8.silu_quant_kernel(4096, 65552) is None  # past one CTA's registers: the pair


def test_silu_row_kernels_from_the_environment() -> None:
    """METRALE_W8A8_SILU_ROW_KERNELS: parsed in order, empty for none, unset for the config; a
    bad item or falling rows refused naming the variable."""
    from metrale.cuda import configs
    from metrale.errors import MetraleError

    assert w8a8._silu_row_kernels("64:4,128:2,4096:1") == ((64, 4), (128, 2), (4096, 1))
    assert w8a8._silu_row_kernels("") == ()
    assert w8a8._silu_row_kernels(None) == configs.W8A8_SILU_ROW_KERNELS
    for bad in ("64:3", "64", "a:4", "128:2,64:4"):
        with pytest.raises(MetraleError, match="METRALE_W8A8_SILU_ROW_KERNELS"):
            w8a8._silu_row_kernels(bad)
