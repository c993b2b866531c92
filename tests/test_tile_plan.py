"""The tiled NVFP4 GEMM's launch plan (metrale/cuda/tile.py) on the CPU: K parts are aligned
power-of-two runs of steps that cover K, within the counter's shared-memory levels, and every
plan fits the shared memory a launch may take."""

from __future__ import annotations

import pytest

from metrale.cuda import mma, tile


@pytest.mark.parametrize("s8", [1, 2, 3, 9, 31, 32, 33, 96, 112, 4096])
@pytest.mark.parametrize("ctas", [1, 8, 31, 132, 10_000])
def test_parts_are_aligned_subtrees_covering_k(s8: int, ctas: int) -> None:
    dlog, parts = tile.plan_parts(s8, ctas, 132)
    kp8 = 1 << dlog
    assert kp8 <= tile.MAX_PART_STEPS
    assert (parts - 1) * kp8 < s8 <= parts * kp8  # every part holds a step, the last may be short
    if parts > 1:
        assert kp8 >= min(tile.MIN_PART_STEPS, tile.MAX_PART_STEPS)
    if ctas * parts < 132 and kp8 > tile.MIN_PART_STEPS:
        pytest.fail(f"s8={s8} ctas={ctas}: the grid ({ctas * parts}) could split further")
    for nf in tile.FRAGS:
        assert tile.smem_bytes(nf, dlog) <= mma.SMEM_LIMIT, (nf, dlog)


#: Shared memory of one H200 (sm_90) multiprocessor, and what the runtime reserves per CTA.
SM_SMEM, CTA_RESERVED = 228 * 1024, 1024


@pytest.mark.parametrize("fmt", [tile.NVFP4, tile.Q2_0], ids=lambda f: f.prefix)
@pytest.mark.parametrize("s8", [1, 9, 32, 96, 768])
def test_the_ctas_a_format_is_built_for_fit_one_multiprocessor(fmt: tile.TileFormat, s8: int) -> None:
    """``ctas_per_sm`` CTAs of every plan fit one multiprocessor's shared memory (else the kernel
    runs fewer at once than it was built for, its registers capped for nothing)."""
    for ctas in (1, 96, 10_000):
        dlog, _ = tile.plan_parts(s8, ctas, 132 * fmt.ctas_per_sm)
        for nf in fmt.frags or tile.FRAGS:
            smem = tile.smem_bytes(nf, dlog, fmt)
            assert fmt.ctas_per_sm * (smem + CTA_RESERVED) <= SM_SMEM, (nf, dlog, smem)


def test_one_part_when_the_grid_is_full() -> None:
    assert tile.plan_parts(32, 10_000, 132) == (5, 1)  # Qwen3-8B gate/up, K = 4096
    assert tile.plan_parts(96, 10_000, 132) == (5, 3)  # its down projection: 3 parts of 32 steps
    assert tile.plan_parts(32, 150, 264) == (4, 2)  # two CTAs per SM: split until 264 are there


@pytest.mark.parametrize(("rows", "nf"), [(1, 2), (16, 2), (17, 4), (32, 4), (33, 8), (64, 8), (4096, 8)])
def test_tile_height_covers_the_rows(rows: int, nf: int) -> None:
    assert tile.frags_for(rows) == nf
