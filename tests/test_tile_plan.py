"""The tiled NVFP4 GEMM's launch plan (metrale/cuda/tile.py) on the CPU: K parts are aligned
power-of-two runs of steps that cover K, within the counter's shared-memory levels, every
plan fits the shared memory a launch may take, and the kernel picked (wgmma where it builds)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.cuda import configs, mma, pdl, runtime, tile


@pytest.mark.parametrize("s8", [1, 2, 3, 9, 31, 32, 33, 96, 112, 4096])
@pytest.mark.parametrize("ctas", [1, 8, 31, 132, 10_000])
def test_parts_are_aligned_subtrees_covering_k(s8: int, ctas: int) -> None:
    dlog, parts = tile.plan_parts(s8, ctas, 132)
    kp8 = 1 << dlog
    assert kp8 <= tile.MAX_PART_STEPS
    assert (parts - 1) * kp8 < s8 <= parts * kp8  # every part holds a step, the last may be short
    if parts > 1:
        assert kp8 >= min(tile.MIN_PART_STEPS, tile.MAX_PART_STEPS)
    # mma_finish folds at most 64 part roots (s8 = 4096 on one CTA once planned 256 parts); past
    # 64 parts of 32 steps the launcher refuses the plan (test_tile_refuses_more_parts_than_finish_folds)
    assert parts <= tile.MAX_PARTS == 64 or (kp8 == tile.MAX_PART_STEPS and s8 > 64 * kp8)
    if ctas * parts < 132 and kp8 > tile.MIN_PART_STEPS and -(-s8 // (kp8 // 2)) <= tile.MAX_PARTS:
        pytest.fail(f"s8={s8} ctas={ctas}: the grid ({ctas * parts}) could split further")
    for nf in tile.FRAGS:
        assert tile.smem_bytes(nf, dlog) <= mma.SMEM_LIMIT, (nf, dlog)
    for nf in tile.WG_FRAGS:
        assert tile.smem_bytes(nf, dlog, tile.NVFP4, wg=True) <= mma.SMEM_LIMIT, (nf, dlog)
        assert tile.smem_bytes(nf, dlog, tile.Q2_0, wg=True) <= mma.SMEM_LIMIT, (nf, dlog)


@pytest.mark.parametrize("fmt", [tile.NVFP4, tile.Q2_0], ids=lambda f: f.prefix)
@pytest.mark.parametrize("nf", tile.WG_FRAGS)
def test_wgmma_stages_are_swizzle_aligned(fmt: tile.TileFormat, nf: int) -> None:
    """nvfp4_wgmma.cu's stages start on 1024-byte boundaries (its 128-byte swizzle's period): the
    launcher's smem holds the alignment slack, the rounded stages and the counter levels."""
    stage = 8 * nf * 256 + tile.COLS * fmt.wrow + tile.COLS * fmt.sb
    rounded = -(-stage // 1024) * 1024
    assert rounded % 1024 == 0 and rounded - stage < 1024
    assert (8 * nf * 256 // 2) % 1024 == 0  # each activation half is swizzle-aligned too
    for dlog in (0, 1, 5):
        want = 1024 + tile.STAGES * rounded + max(0, dlog - 1) * nf * tile.THREADS * 16
        assert tile.smem_bytes(nf, dlog, fmt, wg=True) == want


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
    assert tile.plan_parts(32, 150, 264) == (3, 4)  # two CTAs per SM: 600 CTAs of 8 steps, 3 waves


@pytest.mark.parametrize("waves", [True, False])
def test_k_splits_further_where_whole_waves_finish_sooner(
    monkeypatch: pytest.MonkeyPatch, waves: bool
) -> None:
    """Qwen3-8B at 33..64 rows on 132 multiprocessors: gate + up (96 column tiles each, K = 4096)
    as 384 CTAs of 16 steps (3 waves of 18 step-times, against 2 of 34), down (32 column tiles,
    K = 12288) as 384 CTAs of 8 (3 waves of 10, against 2 of 18); the first plan that fills the
    slots without WAVES."""
    monkeypatch.setattr(tile, "WAVES", waves)
    assert tile.plan_parts(32, 192, 132) == ((4, 2) if waves else (5, 1))
    assert tile.plan_parts(96, 32, 132) == ((3, 12) if waves else (4, 6))
    assert tile.plan_parts(96, 64, 132) == ((4, 6) if waves else (5, 3))  # down at 65..128 rows
    # full grids keep whole parts: halving doubles the waves
    assert tile.plan_parts(32, 96 * 2 * 64, 132) == (5, 1)


@pytest.mark.parametrize(("rows", "nf"), [(1, 2), (16, 2), (17, 4), (32, 4), (33, 8), (64, 8), (4096, 8)])
def test_tile_height_covers_the_rows(rows: int, nf: int) -> None:
    assert tile.frags_for(rows) == nf


class _FakeRuntime:
    """get_kernel answering from a set of (file, name) that built."""

    def __init__(self, built: set[tuple[str, str]]) -> None:
        self.built = built

    def get_kernel(self, cu: str, name: str) -> Any:
        return object() if (cu, name) in self.built else None


def _all(fmt: tile.TileFormat, wg: bool) -> set[tuple[str, str]]:
    if wg:
        return {(tile.WG_FILE, f"{fmt.wg_prefix}_gemm_f{nf}") for nf in tile.WG_FRAGS}
    return {(tile.FILE, f"{fmt.prefix}_gemm_f{nf}") for nf in fmt.frags or tile.FRAGS}


@pytest.mark.parametrize("fmt", [tile.NVFP4, tile.NVFP4_A4, tile.Q2_0], ids=lambda f: f.wg_prefix)
@pytest.mark.parametrize("rows", [1, 33, 64, 4096])
def test_pick_prefers_wgmma_where_it_builds(
    monkeypatch: pytest.MonkeyPatch, fmt: tile.TileFormat, rows: int
) -> None:
    monkeypatch.setattr(tile, "WG_ENABLED", True)
    monkeypatch.setattr(tile, "runtime", _FakeRuntime(_all(fmt, True) | _all(fmt, False)))
    pick = tile.pick_kernel(fmt, rows)
    nf = tile.frags_for(rows, tile.WG_FRAGS)
    ctas = configs.NVFP4_WGMMA_TILE_CTAS[nf]
    assert pick == tile.TileKernel(tile.WG_FILE, f"{fmt.wg_prefix}_gemm_f{nf}", nf, ctas, True)
    # not built (any device but sm_90), or turned off: nvfp4_tile.cu's kernel, its CTAs per SM
    old_nf = tile.frags_for(rows, fmt.frags)
    old = tile.TileKernel(tile.FILE, f"{fmt.prefix}_gemm_f{old_nf}", old_nf, fmt.ctas_per_sm, False)
    monkeypatch.setattr(tile, "runtime", _FakeRuntime(_all(fmt, False)))
    assert tile.pick_kernel(fmt, rows) == old
    monkeypatch.setattr(tile, "runtime", _FakeRuntime(_all(fmt, True) | _all(fmt, False)))
    monkeypatch.setattr(tile, "WG_ENABLED", False)
    assert tile.pick_kernel(fmt, rows) == old
    monkeypatch.setattr(tile, "runtime", _FakeRuntime(set()))
    assert tile.pick_kernel(fmt, rows) is None


@pytest.mark.parametrize("fmt", [tile.NVFP4, tile.NVFP4_A4, tile.Q2_0], ids=lambda f: f.wg_prefix)
def test_the_tile_takes_small_row_counts_only_on_wgmma(
    monkeypatch: pytest.MonkeyPatch, fmt: tile.TileFormat
) -> None:
    monkeypatch.setattr(tile, "MIN_ROWS", 25)
    monkeypatch.setattr(tile, "SMALL_ROWS", (9, 16))
    monkeypatch.setattr(tile, "WG_ENABLED", True)
    monkeypatch.setattr(tile, "runtime", _FakeRuntime(_all(fmt, True) | _all(fmt, False)))
    assert [m for m in range(1, 41) if tile.takes(m, fmt)] == [*range(9, 17), *range(25, 41)]
    # mma.sync's tile (no wgmma build, or turned off) only from MIN_ROWS
    monkeypatch.setattr(tile, "runtime", _FakeRuntime(_all(fmt, False)))
    assert [m for m in range(1, 41) if tile.takes(m, fmt)] == list(range(25, 41))
    monkeypatch.setattr(tile, "runtime", _FakeRuntime(_all(fmt, True) | _all(fmt, False)))
    monkeypatch.setattr(tile, "WG_ENABLED", False)
    assert [m for m in range(1, 41) if tile.takes(m, fmt)] == list(range(25, 41))


def test_wgmma_kernels_are_the_configured_ones() -> None:
    ctas = configs.NVFP4_WGMMA_TILE_CTAS
    for macro in ("NVFP4_WGMMA_TILE", "NVFP4_A4_WGMMA_TILE", "Q2_WGMMA_TILE"):
        assert configs.instances(macro) == [f"{macro}({nf}, {ctas[nf]})" for nf in tile.WG_FRAGS]
    assert set(ctas) == set(tile.WG_FRAGS) and ctas[2] == 2


@pytest.mark.parametrize("fmt", [tile.NVFP4, tile.NVFP4_A4, tile.Q2_0], ids=lambda f: f.wg_prefix)
@pytest.mark.parametrize("s8", [1, 9, 32, 96, 768])
def test_the_wgmma_ctas_per_multiprocessor_fit_its_shared_memory(fmt: tile.TileFormat, s8: int) -> None:
    """Every wgmma plan's CTAs (two at NF = 2) fit one multiprocessor's shared memory, the plan
    counting them as slots (else fewer run at once than the kernel's 128 registers were for)."""
    for ctas in (1, 96, 10_000):
        for nf in tile.WG_FRAGS:
            per_sm = configs.NVFP4_WGMMA_TILE_CTAS[nf]
            dlog, _ = tile.plan_parts(s8, ctas, 132 * per_sm)
            smem = tile.smem_bytes(nf, dlog, fmt, wg=True)
            assert per_sm * (smem + CTA_RESERVED) <= SM_SMEM, (nf, dlog, smem)


def test_tile_refuses_more_parts_than_finish_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    """K past 64 parts of 32 steps (K > 32768) is not the tiled GEMM's: ``_run`` launches nothing
    and returns False (the caller's next path serves it), before any device work."""
    monkeypatch.setattr(runtime, "get_kernel", lambda cu, name: object())
    monkeypatch.setattr(runtime, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(tile.mma, "workspace", lambda n: pytest.fail("the plan was launched"))
    args = (None, None, None, None, None)
    assert tile._run(lambda *a: pytest.fail("prologue launched"), 16, 8 * 2049, args, args, 1, 128) is False


@pytest.mark.parametrize(
    ("b", "threads"), [(8, 256), (256, 256), (257, 288), (768, 768), (1024, 1024), (1280, 1024)]
)
def test_prologue_threads_one_block_each_up_to_1024(b: int, threads: int) -> None:
    """``w4a16b_prep``'s CTA: one thread per block (its words kept between the two passes), in
    whole warps, at least 256 threads, at most 1024 (past that a thread loops)."""
    assert tile.prep_threads(b) == threads


CHAIN_KERNELS = [(fmt, nf) for fmt in (tile.NVFP4, tile.Q2_0, tile.FP8) for nf in tile.chain_builds(fmt)]


@pytest.mark.parametrize(
    ("fmt", "nf"), CHAIN_KERNELS, ids=[f"{f.chain_prefix}-f{nf}" for f, nf in CHAIN_KERNELS]
)
@pytest.mark.parametrize("s8", [1, 5, 8, 9, 32, 96, 112, 768])
@pytest.mark.parametrize("ctas", [1, 132, 10_000])
def test_chain_parts_hold_whole_chains(fmt: tile.TileFormat, nf: int, s8: int, ctas: int) -> None:
    """A chain kernel's CTA K part is whole chain parts of 8 steps (or all of K: a chain cannot be
    cut), its counter over parts fits the shared memory of the CTAs per multiprocessor it is built
    for, and K splits no further than needed."""
    kern = tile.chain_kernel(fmt, nf)
    dlog, parts = tile.chain_plan(kern, fmt, s8, ctas, 132)
    kp8 = 1 << dlog
    assert (parts - 1) * kp8 < s8 <= parts * kp8
    assert parts == 1 or kp8 % tile.CHAIN_PART_STEPS == 0, (dlog, parts)
    assert parts <= tile.MAX_PARTS
    assert not kern.local or kp8 <= tile.CHAIN_PART_STEPS << configs.TILE_CHAIN_LEVELS  # its levels
    smem = tile.smem_bytes(nf, dlog, fmt, True, kern.stages, True, kern.local)
    assert smem <= mma.SMEM_LIMIT
    assert kern.ctas_per_sm * (smem + CTA_RESERVED) <= SM_SMEM  # the CTAs it is built for
    if ctas >= 132 and fmt is not tile.FP8:  # a full grid: K = 4096 (32 steps) in one CTA
        assert parts == 1 or kp8 >= 32, (dlog, parts)


def test_chain_counter_levels() -> None:
    """The chain kernels' shared memory: 1024 bytes of alignment, the stages, then one level of
    nf x 256 threads x 16 bytes per doubling of chain parts (levels 0 .. dlog - 4)."""
    stage = -(-(8 * 16 * 256 + tile.COLS * 80 + tile.COLS * 8) // 1024) * 1024
    assert tile.smem_bytes(16, 3, tile.NVFP4, True, 2, True) == 1024 + 2 * stage
    assert tile.smem_bytes(16, 5, tile.NVFP4, True, 2, True) == 1024 + 2 * stage + 2 * 16 * 256 * 16
    assert tile.smem_bytes(16, 0, tile.NVFP4, True, 2, True) == 1024 + 2 * stage
    assert tile.smem_bytes(16, 7, tile.NVFP4, True, 3, True, local=True) == 1024 + 3 * stage  # no levels


def test_fp8_tile_bytes_layout() -> None:
    """FP8 chain weights (fp8_bf16.tile_fp8_bytes): the rounded e4m3 of fp8_effective, row-major,
    16 bytes per block in K order (the tile's ldmatrix and the decode's 16-byte loads read
    block b of row n at bytes 16 b of the row), for any K."""
    from metrale.cuda.fp8_bf16 import tile_fp8_bytes
    from metrale.reference.chain import fp8_effective
    from metrale.reference.formats import Fp8Weight

    rng = np.random.default_rng(3)
    src = rng.standard_normal((3, 384)) * np.exp2(rng.integers(-12, 1, (3, 384)))
    q = Fp8Weight.quantize(src.astype(np.float32)).weight
    eff = fp8_effective(q)
    assert not np.array_equal(eff.view(np.uint8), q.view(np.uint8))  # some blocks were rounded
    for k in (384, 144, 176, 368):  # whole steps; last steps of 1, 3 and 7 blocks
        got = tile_fp8_bytes(q[:, :k])
        assert got.dtype == np.uint8 and got.shape == (3, k) and got.flags.c_contiguous
        e = fp8_effective(q[:, :k]).view(np.uint8)
        for b in range(k // 16):
            assert np.array_equal(got[:, 16 * b : 16 * b + 16], e[:, 16 * b : 16 * b + 16]), (k, b)


def test_fp8_chain_plan() -> None:
    """The FP8 tile's stage holds two activation limbs, 144-byte weight rows without block
    scales and the step's 8 x 8 NF factors; NF = 8 keeps its counter in local memory, so its CTA K
    parts reach CHAIN_CTA_STEPS (128 steps) beside three stages."""
    stage = -(-(2 * 8 * 8 * 256 + tile.COLS * 144 + 8 * 64 * 4) // 1024) * 1024
    assert tile.smem_bytes(8, 5, tile.FP8, True, 3, True) == 1024 + 3 * stage + 2 * 8 * 256 * 16
    kern = tile.chain_kernel(tile.FP8, 8)
    assert kern.local and kern.stages == 3
    assert tile.chain_smem(kern, tile.FP8, 7) == 1024 + 3 * stage
    dlog, parts = tile.chain_plan(kern, tile.FP8, 1536, 2, 1)
    assert (dlog, parts) == (7, 12)


ROW_GROUP_GRIDS = [(0, (7 * 3, 1)), (1, (3, 7)), (3, (9, 3)), (7, (21, 1)), (9, (21, 1))]


@pytest.mark.parametrize(("group", "grid_xy"), ROW_GROUP_GRIDS)
def test_tile_grid_in_row_groups(monkeypatch: pytest.MonkeyPatch, group: int, grid_xy: tuple) -> None:
    """The tile GEMM's grid for ROW_GROUP (tile.cuh ``tile_at`` reads it back): 7 row tiles of 16
    rows (m = 100, NF = 2) and 3 column tiles (N = 300) as (group x 3, ceil(7 / group)) CTAs,
    the group at most the row tiles; 0 is one group of all seven (each column tile's row tiles in
    turn); z the K parts of both sets."""
    launches: list[tuple[Any, ...]] = []
    monkeypatch.setattr(tile, "ROW_GROUP", group)
    monkeypatch.setattr(tile, "WG_ENABLED", False)
    monkeypatch.setattr(tile, "FRAGS", (2,))
    monkeypatch.setattr(runtime, "get_kernel", lambda cu, name: name)
    monkeypatch.setattr(runtime, "set_dynamic_smem", lambda kern, nbytes: None)
    monkeypatch.setattr(runtime, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(tile.mma, "workspace", lambda n: np.zeros(n, dtype=np.uint8))
    monkeypatch.setattr(pdl, "launch", lambda k, g, b, args, smem=0: launches.append((k, g)))
    out = np.zeros((100, 300), dtype=np.uint16)
    args = (None, None, np.float32(1), out, np.int64(300))
    assert tile._run(lambda *a: None, 100, 256, args, args, 2, 300, tile.NVFP4)
    ((kern, grid), *finish) = launches
    assert kern == "w4a16b_gemm_f2" and grid[:2] == grid_xy, (kern, grid)
    assert grid[2] % 2 == 0 and all(k == "mma_finish" for k, _ in finish)


def test_chain_tile_part_size_is_the_references() -> None:
    """The wgmma chain tiles' steps per part (configs.TILE_CHAIN_PART_LOG, the kernels' define)
    are the reference's chain parts: 8 blocks a step, chain.PART_BLOCKS blocks a part."""
    from metrale.reference import chain

    assert 8 << configs.TILE_CHAIN_PART_LOG == chain.PART_BLOCKS
    assert tile.CHAIN_PART_STEPS == chain.PART_BLOCKS // 8 == tile.CHAIN_CTA_STEPS[0]
    assert f"#define CHAIN_PART_LOG {configs.TILE_CHAIN_PART_LOG}" in runtime.source(tile.WG_FILE)
