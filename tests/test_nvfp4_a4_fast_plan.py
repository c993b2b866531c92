"""The fast-kernel routing of metrale/cuda/nvfp4.py on the CPU: where the fast A4 kernels
``nvfp4_a4f_r{m}`` apply and the dynamic shared memory they get (kernels/nvfp4_a4.cu header:
R * items * 4 * 2304 + 16 * D * 2304 bytes, items = ceil(B / 256)), and which A16 row counts
from MMA_MIN_ROWS take the fast kernel in one pass instead of the tensor cores."""

from __future__ import annotations

import pytest

from metrale.cuda import configs, mma, nvfp4

REC = 2304  # one activation record / one ring slot (kernels/nvfp4.cuh FAST_REC, FAST_SLOT)


def _want(m: int, k: int) -> int:
    items = -(-(k // 16) // 256)
    return m * items * 4 * REC + 16 * configs.NVFP4_A4F_DEPTH[m] * REC


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvfp4, "FAST_ENABLED", True)
    monkeypatch.setattr(nvfp4, "A4_FAST_MAX_ROWS", 4)


@pytest.mark.parametrize("k", [1024, 2048, 4096, 5120, 12288, 32768])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_fast_rows_and_shared_memory(m: int, k: int) -> None:
    want = _want(m, k)
    got = nvfp4.a4_fast_smem(m, k)
    assert got == (want if want <= mma.SMEM_LIMIT else None), (m, k)


def test_explicit_sizes() -> None:
    """Qwen3-8B: gate/up K = 4096 (one item), down K = 12288 (3 items)."""
    assert nvfp4.a4_fast_smem(1, 4096) == 4 * REC + 16 * 3 * REC
    assert nvfp4.a4_fast_smem(3, 12288) == 36 * REC + 16 * configs.NVFP4_A4F_DEPTH[3] * REC
    # K = 32768 at m = 3: 96 records and the rings pass the shared-memory limit
    assert nvfp4.a4_fast_smem(3, 32768) is None
    assert nvfp4.a4_fast_smem(1, 65536) is None
    # Llama-3-8B down (K = 14336, 4 items) at m = 4: 64 records + rings = 258,048 B, over the limit
    assert nvfp4.a4_fast_smem(4, 14336) is None
    assert nvfp4.a4_fast_smem(4, 12288) == 48 * REC + 16 * configs.NVFP4_A4F_DEPTH[4] * REC


@pytest.mark.parametrize(
    ("m", "k"),
    [
        (5, 4096),  # past the fast rows
        (1, 1040),  # B = 65: B % 64 != 0
        (2, 2064),  # B = 129
        (1, 16),  # B = 1
    ],
)
def test_not_fast(m: int, k: int) -> None:
    assert nvfp4.a4_fast_smem(m, k) is None


def test_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A4_FAST_MAX_ROWS = 1 leaves m = 2..4 to the tensor cores; FAST_ENABLED off, every m."""
    monkeypatch.setattr(nvfp4, "A4_FAST_MAX_ROWS", 1)
    assert nvfp4.a4_fast_smem(1, 4096) == _want(1, 4096)
    assert nvfp4.a4_fast_smem(2, 4096) is None
    assert nvfp4.a4_fast_smem(3, 4096) is None
    assert nvfp4.a4_fast_smem(4, 4096) is None
    monkeypatch.setattr(nvfp4, "FAST_ENABLED", False)
    assert nvfp4.a4_fast_smem(1, 4096) is None


def test_every_fast_row_count_has_a_kernel() -> None:
    """The routing's rows 1..A4_FAST_MAX_ROWS (default) all have a configured kernel."""
    assert set(range(1, nvfp4.A4_FAST_MAX_ROWS + 1)) <= set(configs.NVFP4_A4F_DEPTH)


@pytest.mark.parametrize(
    ("k", "one_pass"),
    [
        (4096, True),  # Qwen3-8B / Llama-3-8B gate, up: R = 4 fits (records 36,864 B + rings)
        (12288, True),  # Qwen3-8B down: 3 items, 110,592 + 110,592 B <= SMEM_LIMIT
        (14336, False),  # Llama-3-8B down: 4 items, R = 4 needs 258,048 B (R = 3 + R = 1: two passes)
        (4112, False),  # B = 257, B % 64 != 0: no fast kernel
    ],
)
def test_a16_four_rows_one_pass(k: int, one_pass: bool) -> None:
    records = 4 * 72 * 128 * -(-(k // 16) // 256)
    ring = 16 * configs.NVFP4_FAST_DEPTH[4] * REC
    assert (records + ring <= mma.SMEM_LIMIT and (k // 16) % 64 == 0) == one_pass
    assert nvfp4.fast_one_pass(4, k, 4) is one_pass
    assert nvfp4.fast_one_pass(5, k, 4) is False  # beyond FAST_ONE_PASS_ROWS: the tensor cores


def test_a16_one_pass_off_without_fast_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvfp4, "FAST_ENABLED", False)
    assert nvfp4.fast_one_pass(4, 4096, 4) is False


@pytest.mark.parametrize(
    ("r", "k", "want"),
    [
        # R * 36 B (records) + 12 warps x depth x 2304 (rings) + 12 warps x NBUF x 32 runs x 32 B
        # (scale groups of four slices: NBUF = 2 groups at depths 3-5) + R x 384 roots x 4 B
        (1, 4096, 36 * 256 + 12 * 5 * REC + 12 * 2 * 1024 + 384 * 4),
        (2, 14336, 2 * 36 * 896 + 12 * 4 * REC + 12 * 2 * 1024 + 2 * 384 * 4),
        (4, 12288, 4 * 36 * 768 + 12 * 3 * REC + 12 * 2 * 1024 + 4 * 384 * 4),
        (3, 14336, 3 * 36 * 896 + 12 * 3 * REC + 12 * 2 * 1024 + 3 * 384 * 4),
    ],
)
def test_chain_run_kernels_shared_memory(monkeypatch: pytest.MonkeyPatch, r: int, k: int, want: int) -> None:
    """The fast chain kernels (nvfp4.cuh nvfp4_run_body, tile.CHAIN): 36 bytes of records per block
    and row, the rings of NVFP4_RUN_THREADS / 32 warps, each warp's scale group buffers, a root
    per thread and row; the Qwen3-8B down projection takes four rows in one pass (within
    mma.SMEM_LIMIT), Llama-3-8B's three."""
    from metrale.cuda import tile

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(configs, "NVFP4_RUN_THREADS", 384)
    monkeypatch.setattr(configs, "NVFP4_RUN_SCALE_SLICES", 4)
    monkeypatch.setattr(configs, "NVFP4_RUN_DEPTH", {1: 5, 2: 4, 3: 3, 4: 3})
    assert nvfp4._fast_smem(r, k) == want
    assert nvfp4._fast_rows(r, k) == r
    if k == 14336:  # four rows of K = 14336 exceed mma.SMEM_LIMIT: three per pass
        assert nvfp4._fast_rows(4, k) == 3


@pytest.mark.parametrize(("threads", "k"), [(32, 33 * 1024), (32, 49152), (32, 65536)])
def test_chain_run_kernels_refuse_more_parts_than_threads(
    monkeypatch: pytest.MonkeyPatch, threads: int, k: int
) -> None:
    """A CTA round of the fast chain kernels takes NVFP4_RUN_THREADS // Q whole columns: a column
    of more parts than threads has no fast chain kernel (A16 and A4 alike), one of as many has."""
    from metrale.cuda import tile

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(configs, "NVFP4_RUN_THREADS", threads)
    monkeypatch.setattr(mma, "SMEM_LIMIT", 1 << 30)  # shared memory is not what refuses here
    assert nvfp4._fast_rows(1, k) is None
    assert nvfp4.a4_fast_smem(1, k) is None
    assert nvfp4._fast_rows(1, threads * 1024) == 1
    assert nvfp4.a4_fast_smem(1, threads * 1024) is not None


def test_chain_runs_at_two_ctas_per_sm(monkeypatch: pytest.MonkeyPatch) -> None:
    """tile.CHAIN's fast kernels at NVFP4_RUN_CTAS_PER_SM = 2: grid.x twice the multiprocessors
    (at most one CTA per round of RUN_THREADS // Q columns), and a row count whose records and
    rings pass half a multiprocessor's shared memory runs fewer rows per pass (down projection
    of Qwen3-8B at ring depth 3: R = 1 fits twice, R = 2 once)."""
    from metrale.cuda import runtime, tile

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(runtime, "sm_count", lambda: 132)
    monkeypatch.setattr(configs, "NVFP4_RUN_THREADS", 256)
    monkeypatch.setattr(configs, "NVFP4_RUN_DEPTH", dict.fromkeys((1, 2, 3, 4), 3))
    monkeypatch.setattr(configs, "NVFP4_RUN_SCALE_SLICES", 4)
    monkeypatch.setattr(configs, "NVFP4_RUN_CTAS_PER_SM", 1)
    assert nvfp4._fast_grid_x(4096, 1, 12288) == 132  # 12 parts: 21 columns a round, 196 rounds
    assert nvfp4._fast_smem_limit() == mma.SMEM_LIMIT
    one = {r: nvfp4._fast_rows(r, 12288) for r in (1, 2, 3, 4)}
    monkeypatch.setattr(configs, "NVFP4_RUN_CTAS_PER_SM", 2)
    assert nvfp4._fast_grid_x(4096, 1, 12288) == 196
    assert nvfp4._fast_grid_x(12288, 2, 4096) == 132  # two sets share the 264 slots
    assert nvfp4._fast_smem_limit() == 228 * 1024 // 2 - 1024
    two = {r: nvfp4._fast_rows(r, 12288) for r in (1, 2, 3, 4)}
    for r in (1, 2, 3, 4):
        fits = nvfp4._fast_smem(r, 12288) <= nvfp4._fast_smem_limit()
        assert (two[r] == r) == fits, (r, two[r])
    assert one[2] == 2 and two[1] == 1 and two[2] == 1  # R = 2 needs more than half an SM
