"""The fast NVFP4 decode kernels on the block-value chain (nvfp4.cuh ``nvfp4_run_body``:
``nvfp4_a16fc_r{R}``, ``nvfp4_a4fc_r{R}``, tile.CHAIN; docs/chain-revision.md) against the
revision's reference ``chain.project_chain``, bit for bit: every R (1-4 rows per pass, and more
rows in groups of R over grid.y), gate and up in one launch, K of one part to 32 (CTA rounds of
384 to 1 columns, idle threads), CTAs of one warp that run several rounds, rows of every edge
kind (non-finite blocks, subnormal and saturated exponents), every weight code against every
finite e4m3 scale, guard bands."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.gpu import gen
from tests.gpu.test_cuda_chain_tile import ref, run_nvfp4, run_nvfp4_dual
from tests.gpu.test_cuda_nvfp4_tile import dev_rows, window_rows

cp = pytest.importorskip("cupy")


@pytest.fixture
def chained(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The fast chain kernels for every row count here, every other path off (none gives the
    chain's bits, so a miss fails); returns the fast kernels' names as launched."""
    from metrale.cuda import mma, nvfp4, tile

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(tile, "ENABLED", False)
    monkeypatch.setattr(mma, "ENABLED", False)
    names: list[str] = []
    real_name = nvfp4._fast_name

    def fast_name(mode: str, r: int) -> str:
        names.append(real_name(mode, r))
        return names[-1]

    def no_generic(*a: Any) -> int:
        raise AssertionError(f"the generic (tree) kernels ran: {a}")

    monkeypatch.setattr(nvfp4, "_fast_name", fast_name)
    monkeypatch.setattr(nvfp4, "_rows_per_pass", no_generic)
    return names


@pytest.fixture
def threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The fast chain kernels built for CTAs of ``request.param`` threads (32: one warp, so that
    a CTA runs several rounds and a round's columns are few), this test's own modules of their
    files."""
    from metrale.cuda import nvfp4

    gen.rebuild_with(monkeypatch, (nvfp4.A16_FILE, nvfp4.A4_FILE), NVFP4_RUN_THREADS=request.param)
    return int(request.param)


def run_a4(rng: np.random.Generator, x: np.ndarray, w: Any, dw: Any) -> np.ndarray:
    """NVFP4 × A4 of host rows ``x`` (w4a4_quantize with w's input scale, w4a4_gemv_small_m on
    its device copy ``dw``) into a guarded output: its bits."""
    from metrale.cuda import nvfp4

    m = x.shape[0]
    codes = nvfp4.w4a4_quantize(dev_rows(x), w.input_scale)
    buf, view, init = gen.guarded(cp, rng, m, w.n)
    nvfp4.w4a4_gemv_small_m(codes, dw, view)
    return gen.check_guard(buf, init, m, w.n)


def check_a4_rows(
    cuda: Any, rng: np.random.Generator, shape: tuple[int, int], ms: tuple[int, ...], what: str
) -> None:
    """NVFP4 × A4 (w4a4_quantize's codes) of (N, K) = ``shape`` at each row count of ``ms``, rows
    of every edge kind, against project_chain(..., "A4")."""
    w = gen.nvfp4(rng, *shape)
    dw = cuda.upload(w)
    x = gen.rows(rng, max(ms), w.k)
    want = ref(x, w, "A4")
    for m in ms:
        gen.bits_equal(run_a4(rng, x[:m], w, dw), want[:m], f"{what} A4 m={m} {shape}")


def check_a16_rows(cuda: Any, rng: np.random.Generator, shape: tuple[int, int], what: str) -> None:
    """NVFP4 × A16 of (N, K) = ``shape`` through ``w4a16_gemm`` at 1, 2, 3, 4, 7 and 11 rows and
    through one dual launch at 1 and 3, in-window and edge rows shuffled, against project_chain."""
    n, k = shape
    w, w1 = gen.nvfp4(rng, n, k), gen.nvfp4(rng, n, k, name="up")
    dw, dw1 = cuda.upload(w), cuda.upload(w1)
    x = np.concatenate([window_rows(rng, 4, k, tuple(range(-30, 31))), gen.rows(rng, 7, k)])
    x = x[rng.permutation(len(x))]
    want, want1 = ref(x, w), ref(x, w1)
    for m in (1, 2, 3, 4, 7, 11):
        gen.bits_equal(run_nvfp4(cuda, rng, x[:m], dw, n), want[:m], f"{what} m={m} {shape}")
    for m in (1, 3):
        got, got1 = run_nvfp4_dual(rng, x[:m], dw, dw1, n)
        gen.bits_equal(got, want[:m], f"{what} dual m={m} gate {shape}")
        gen.bits_equal(got1, want1[:m], f"{what} dual m={m} up {shape}")


#: (threads, (N, K)). At 384 threads: Q = 1 part (384 columns per round), 3 (128), 4 (Qwen3-8B
#: gate / up: 96), 12 (its down: 32), 14 (Llama-3-8B's down: 27, six threads idle), 20 (19, four
#: idle); at 32 threads more rounds than CTAs (rounds of 8, 2 and 1 columns), K of 32 parts (one
#: row's records fit beside one warp's ring).
SHAPES = ((37, 1024), (70, 3072), (130, 4096), (45, 12288), (20, 14336), (11, 20480))
CASES = [(384, s) for s in SHAPES] + [(32, (1100, 4096)), (32, (300, 12288)), (32, (140, 32768))]


@pytest.mark.parametrize(
    ("threads", "shape"), CASES, ids=[f"T{t}-N{n}-K{k}" for t, (n, k) in CASES], indirect=["threads"]
)
def test_chain_gemv_a16_matches_chain_reference(
    cuda: Any, fresh_rng: np.random.Generator, chained: list[str], threads: int, shape: tuple
) -> None:
    """R = 1..4 in one pass, 7 rows (groups of 4), in-window and edge rows, single and dual."""
    from metrale.cuda import nvfp4

    check_a16_rows(cuda, fresh_rng, shape, "chain gemv")
    k = shape[1]
    fits = {r for r in nvfp4.A16_ROWS if nvfp4._fast_rows(r, k) == r}  # R = 4 of K = 14336 does not
    assert {f"nvfp4_a16fc_r{r}" for r in fits} <= set(chained), chained


EARLY_CASES = [(384, (45, 12288)), (384, (130, 4096)), (32, (300, 12288))]
EARLY_IDS = [f"T{t}-N{n}-K{k}" for t, (n, k) in EARLY_CASES]


@pytest.mark.parametrize(("threads", "shape"), EARLY_CASES, ids=EARLY_IDS, indirect=["threads"])
def test_chain_gemv_ring_early(
    cuda: Any,
    fresh_rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
    chained: list[str],
    threads: int,
    shape: tuple,
) -> None:
    """The fast chain kernels built with the other setting of ``configs.NVFP4_RUN_RING_EARLY``
    than the routed one (the rings' first slices copied before the PDL wait or after it): A16
    single and dual, and A4, against project_chain, with more rounds than CTAs at 32 threads."""
    from metrale.cuda import configs, nvfp4, runtime

    other = 1 - configs.NVFP4_RUN_RING_EARLY
    gen.rebuild_with(monkeypatch, (nvfp4.A16_FILE, nvfp4.A4_FILE), NVFP4_RUN_RING_EARLY=other)
    assert f"#define RUN_RING_EARLY {other}" in runtime.source(nvfp4.A16_FILE)
    check_a16_rows(cuda, fresh_rng, shape, "chain gemv ring early")
    check_a4_rows(cuda, fresh_rng, shape, (1, 2, 3, 4), "chain gemv ring early")
    assert {"nvfp4_a16fc_r1", "nvfp4_a4fc_r1"} <= set(chained), chained


@pytest.mark.parametrize("exp", [-133, -126, -110, 100, 127])
def test_chain_gemv_extreme_blocks(
    cuda: Any, fresh_rng: np.random.Generator, chained: list[str], exp: int
) -> None:
    """Blocks whose exponent makes P_b subnormal (one rounding, as ldexpf's) or the chain
    overflow, beside ordinary blocks of the same rows."""
    check_extreme_blocks(cuda, fresh_rng, 4096, (3, 64, 255, 130), exp, "chain gemv")


def check_extreme_blocks(
    cuda: Any, rng: np.random.Generator, k: int, blocks: tuple[int, ...], exp: int, what: str
) -> None:
    """NVFP4 × A16 (N = 66, K = ``k``) of four in-window rows whose block ``blocks[r]`` of row r
    has its largest exponent at ``exp``, through ``w4a16_gemm`` at 1 and 4 rows, against
    project_chain."""
    w = gen.nvfp4(rng, 66, k)
    dw = cuda.upload(w)
    x = window_rows(rng, 4, k, (-20, 0, 20))
    for r, b in enumerate(blocks):
        x[r, 16 * b : 16 * b + 16] = window_rows(rng, 1, 16, (exp,))[0]
    want = ref(x, w)
    for m in (1, 4):
        gen.bits_equal(run_nvfp4(cuda, rng, x[:m], dw, 66), want[:m], f"{what} E={exp} m={m}")


A4_CASES = [(384, (37, 1024)), (384, (130, 4096)), (384, (45, 12288)), (32, (300, 12288))]


@pytest.mark.parametrize(
    ("threads", "shape"), A4_CASES, ids=[f"T{t}-K{k}" for t, (_, k) in A4_CASES], indirect=["threads"]
)
def test_chain_gemv_a4(
    cuda: Any, fresh_rng: np.random.Generator, chained: list[str], threads: int, shape: tuple
) -> None:
    """NVFP4 × A4 (w4a4_quantize's codes) on the fast chain kernels, m = 1..4, rows of every edge
    kind, against project_chain(..., "A4")."""
    check_a4_rows(cuda, fresh_rng, shape, (1, 2, 3, 4), "chain gemv")
    assert {f"nvfp4_a4fc_r{r}" for r in (1, 2, 3, 4)} <= set(chained), chained


def test_chain_gemv_codes_exhaustive(cuda: Any, fresh_rng: np.random.Generator, chained: list[str]) -> None:
    """Every NVFP4 nibble in every k position against every finite e4m3 scale (gen.nvfp4's
    scales): one-hot rows pick element r of every block, 16 rows in groups of four."""
    from metrale.reference.elements import BF16
    from metrale.reference.formats import Nvfp4Weight

    n, k = 128, 1024
    w = gen.nvfp4(fresh_rng, n, k)
    nib = ((np.arange(k)[None, :] + np.arange(n)[:, None]) % 16).astype(np.uint8)
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    w = Nvfp4Weight(weight=packed, weight_scale=w.weight_scale, weight_scale_2=w.weight_scale_2, name="w")
    x = np.zeros((16, k), dtype=np.float32)
    for r in range(16):
        x[r, np.arange(r, k, 16)] = 1.0 + r / 4
    x = x.astype(BF16)
    gen.bits_equal(run_nvfp4(cuda, fresh_rng, x, cuda.upload(w), n), ref(x, w), "chain gemv one-hot")
