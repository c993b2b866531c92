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


def _plan(
    m: int,
    n: int,
    k: int,
    *,
    rows_first: bool,
    colscale: tuple | None = (None, None),
    prefix: str = "fp8_bf16",
    min_part_steps: int = mma.GEMM_MIN_PART_STEPS,
) -> bool:
    out = np.zeros((m, n), dtype=np.uint16)
    args = ("w", "pw", np.float32(1.0), out, np.int64(n))
    return mma.gemm(
        "fp8_bf16_mma.cu",
        prefix,
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
        min_part_steps=min_part_steps,
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


@pytest.mark.parametrize(
    ("m", "n", "k"), [(4, 4096, 12288), (16, 4096, 12288), (64, 4096, 12288), (8, 12288, 4096)]
)
def test_chain_split_keeps_whole_parts(calls: list, m: int, n: int, k: int) -> None:
    """BF16 on the chain (``bf16c_gemm_*``, ``min_part_steps`` 8): K is split only at chain part
    edges (kp8 a multiple of 8 steps = 64 blocks), where the tree's plan splits finer, and the
    kernel is a built chain GEMM."""
    assert _plan(m, n, k, rows_first=True)
    tree_kp8 = int(_gemm_calls(calls)[0][2][17])
    calls.clear()
    assert _plan(m, n, k, rows_first=True, prefix="bf16c", min_part_steps=8)
    (name, grid, args), *rest = _gemm_calls(calls)
    assert not rest
    kp8 = int(args[17])
    assert kp8 % 8 == 0 and kp8 >= tree_kp8, (kp8, tree_kp8)
    assert grid[2] == -(-k // 16 // 8 // kp8)
    built = [
        f"bf16c_gemm_nt{a.split(', ')[0]}_d{a.split(', ')[1]}_b{a.split(', ')[2]}_{a.split(', ')[3]}"
        for a in (ln[ln.index("(") + 1 : -1] for ln in configs.instances("BF16_CHAIN_GEMM"))
    ]
    assert name in built, (name, built)


def test_wide_ksplit_instances_carry_their_flags() -> None:
    """The K-split wide kernels' instance lines: the FP8 output scale exactly for ``fp8_mma``, the
    chain form exactly for ``bf16c_mma`` (a generator that compared the wrong name once built
    ``bf16c_mma`` as the tree and ``fp8_mma`` without its scale: GPU-caught)."""
    lines = configs.instances("FP8_BF16_MMA")
    assert len(lines) == 3 * len(configs.FP8_BF16_MMA_TILES)
    for ln in lines:
        name, fp8, nt, chain = (a.strip() for a in ln[ln.index("(") + 1 : -1].split(","))
        assert (fp8, chain) == {
            "fp8_mma": ("true", "false"),
            "bf16_mma": ("false", "false"),
            "bf16c_mma": ("false", "true"),
        }[name], ln
        assert int(nt) in configs.FP8_BF16_MMA_TILES.values()
