"""CPU checks of the prefill GEMM's launch plan (``metrale/cuda/mma.py`` ``gemm``) for the FP8/BF16
wide kernels: the kernel chosen per counter depth (tile table and ``p``/``l`` suffix), the raster
(``rows_first``: grid (row tiles, column CTAs, parts) and the flag as the last argument; the
column raster the other way round) and the split of K where the grid would be small. The kernels
are recorded, not run: every launch is a call of a stand-in for ``runtime.get_kernel``'s kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.cuda import configs, mma, pdl, runtime

SMS = 132


class _Kernel:
    def __init__(self, name: str, calls: list[tuple[str, tuple, tuple]]) -> None:
        self.name, self.calls = name, calls

    def __call__(self, grid: tuple, block: tuple, args: tuple, **_: Any) -> None:
        self.calls.append((self.name, grid, args))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple, tuple]]:
    recorded: list[tuple[str, tuple, tuple]] = []
    monkeypatch.setattr(runtime, "get_kernel", lambda cu, name: _Kernel(name, recorded))
    monkeypatch.setattr(runtime, "sm_count", lambda dev=None: SMS)
    monkeypatch.setattr(pdl, "ENABLED", False)  # plain launches: the recorder is no CuPy kernel
    monkeypatch.setattr(mma, "workspace", lambda nbytes: np.zeros(nbytes, dtype=np.uint8))
    return recorded


def _plan(m: int, n: int, k: int, *, rows_first: bool, colscale: tuple | None = (None, None)) -> bool:
    out = np.zeros((m, n), dtype=np.uint16)
    args = ("w", "pw", np.float32(1.0), out, np.int64(n))
    return mma.gemm(
        "fp8_bf16_mma.cu",
        "fp8_bf16",
        lambda *a: None,
        m,
        k // 16,
        args,
        args,
        1,
        n,
        tiles=configs.FP8_BF16_GEMM_TILES,
        small_tiles=configs.FP8_BF16_GEMM_SMALL_TILES,
        suffix=configs.FP8_BF16_GEMM_SUFFIX,
        colscale=colscale,
        rows_first=rows_first,
    )


def _gemm_calls(calls: list[tuple[str, tuple, tuple]]) -> list[tuple[str, tuple, tuple]]:
    return [c for c in calls if "_gemm_nt" in c[0]]


@pytest.mark.parametrize("rows_first", [True, False])
@pytest.mark.parametrize(("n", "k", "depth"), [(12288, 4096, 5), (4096, 12288, 7), (14336, 4096, 5)])
def test_kernel_and_raster(calls: list, rows_first: bool, n: int, k: int, depth: int) -> None:
    """m = 512 of a Qwen3-8B / Llama-3-8B projection: one launch of the depth's routed kernel,
    its grid in the asked raster, the raster flag last."""
    assert _plan(512, n, k, rows_first=rows_first)
    (name, grid, args), *rest = _gemm_calls(calls)
    assert not rest
    nt, minb = configs.FP8_BF16_GEMM_TILES[depth]
    assert name == f"fp8_bf16_gemm_nt{nt}_d{depth}_b{minb}_{configs.FP8_BF16_GEMM_SUFFIX[depth]}"
    tiles, col_ctas = -(-512 // (8 * nt)), -(-n // (16 * mma.GEMM_WARPS))
    assert grid == ((tiles, col_ctas, 1) if rows_first else (col_ctas, tiles, 1))
    assert args[-1] == np.int32(rows_first) and args[-1].dtype == np.int32


def test_split_k_keeps_the_raster(calls: list) -> None:
    """m = 64, N = 4096, K = 12288: 32 column CTAs x 8 row tiles would not fill the GPU twice, so
    K is split into aligned parts along grid.z (finished by mma_finish); row tiles stay along x."""
    assert _plan(64, 4096, 12288, rows_first=True)
    (_, grid, _), *rest = _gemm_calls(calls)
    assert not rest
    assert grid[:2] == (-(-64 // 8), 4096 // 128) and grid[2] > 1
    assert grid[0] * grid[1] * grid[2] >= 2 * SMS
    assert [c[0] for c in calls if c[0] == "mma_finish"] == ["mma_finish"]


def test_rows_first_is_for_the_wide_kernels_only(calls: list) -> None:
    with pytest.raises(ValueError, match="rows_first"):
        _plan(512, 12288, 4096, rows_first=True, colscale=None)


def test_every_routed_kernel_is_built() -> None:
    """Each depth's (NT, MINB) of both tables is built with the suffix the routing asks for."""
    built = {"p": set(configs.fp8_bf16_gemm_builds()), "l": set(configs.fp8_bf16_gemm_late_builds())}
    for table in (configs.FP8_BF16_GEMM_TILES, configs.FP8_BF16_GEMM_SMALL_TILES):
        for depth, (nt, minb) in table.items():
            assert (depth, nt, minb) in built[configs.FP8_BF16_GEMM_SUFFIX[depth]], (depth, nt, minb)
