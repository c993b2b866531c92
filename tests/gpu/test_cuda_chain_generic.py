"""The generic NVFP4 kernels on the block-value chain (nvfp4.cuh ``nvfp4_chain_body``:
``nvfp4_a16c_r{R}``, ``nvfp4_a4c_r{R}``, tile.CHAIN; docs/chain-revision.md) against the
revision's reference ``chain.project_chain``, bit for bit: B odd, B of one partial part, a last
part of a few blocks, K up to the kernels' largest (64 parts, one row per pass), CTA
rounds of 256 columns down to 4, N off the rounds, rows in groups of R over grid.y, gate and up
in one launch, rows of every edge kind, A16 and A4; and the routing under tile.CHAIN: no K-split
MMA kernel (the tree's) runs at any row count; Q2_0, FP8 and BF16 on their generic chain kernels."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.gpu import gen
from tests.gpu.test_cuda_chain_gemv import check_a4_rows, check_a16_rows, check_extreme_blocks, run_a4
from tests.gpu.test_cuda_chain_tile import ref, run_nvfp4
from tests.gpu.test_cuda_nvfp4_tile import dev_rows, window_rows

cp = pytest.importorskip("cupy")


@pytest.fixture
def generic(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The generic chain kernels for every row count here, every other path off (none gives
    their bits, so a miss fails); returns the generic kernels' names as launched."""
    from metrale.cuda import mma, nvfp4, tile

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(tile, "ENABLED", False)
    monkeypatch.setattr(mma, "ENABLED", False)
    monkeypatch.setattr(nvfp4, "FAST_ENABLED", False)
    names: list[str] = []
    real = nvfp4._generic_name

    def generic_name(mode: str, r: int, b: int) -> str:
        names.append(real(mode, r, b))
        return names[-1]

    monkeypatch.setattr(nvfp4, "_generic_name", generic_name)
    return names


#: (N, K): B = 8 (one part of 8 blocks, 256 columns per round), B = 77 (odd: two parts, the last
#: of 13 blocks), B = 197 (four parts, the last of 5; N off the round of 64), Qwen3-8B's gate
#: (4 parts), its down (12), K = 65536 (64 parts: rounds of 4 columns; R cut to 1 by shared
#: memory).
SHAPES = ((300, 128), (130, 1232), (70, 3152), (130, 4096), (45, 12288), (9, 65536))


@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
def test_chain_generic_a16(
    cuda: Any, fresh_rng: np.random.Generator, generic: list[str], shape: tuple
) -> None:
    """R = 1..4 in one pass, 7 and 11 rows (groups of 4), in-window and edge rows, single and
    dual launches."""
    check_a16_rows(cuda, fresh_rng, shape, "chain generic")
    assert generic and all(name.startswith("nvfp4_a16c_r") for name in generic), generic


@pytest.mark.parametrize("exp", [-133, -126, -110, 100, 127])
def test_chain_generic_extreme_blocks(
    cuda: Any, fresh_rng: np.random.Generator, generic: list[str], exp: int
) -> None:
    """Blocks whose exponent makes P_b subnormal (one rounding, as ldexpf's) or the chain
    overflow, beside ordinary blocks of the same rows; a part's last block among them."""
    check_extreme_blocks(cuda, fresh_rng, 16 * 197, (3, 63, 196, 130), exp, "chain generic")


A4_SHAPES = ((37, 1232), (130, 4096), (45, 12288))


@pytest.mark.parametrize("shape", A4_SHAPES, ids=[f"K{k}" for _, k in A4_SHAPES])
def test_chain_generic_a4(
    cuda: Any, fresh_rng: np.random.Generator, generic: list[str], shape: tuple
) -> None:
    """NVFP4 × A4 (w4a4_quantize's codes) on the generic chain kernels (R = 1 and 4), 1..6 rows
    of every edge kind, against project_chain(..., "A4")."""
    check_a4_rows(cuda, fresh_rng, shape, (1, 2, 4, 6), "chain generic")
    assert {"nvfp4_a4c_r1", "nvfp4_a4c_r4"} <= set(generic), generic


def test_chain_routes_no_tree_kernel(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tile.CHAIN as routed (tile, fast and generic kernels on): row counts from 1 to 40, NVFP4
    A16 (B % 8 == 0 and not, B % 64 == 0 and not), A4 and Q2_0, give the chain's bits; the
    K-split MMA kernels (the tree's) never launch."""
    from metrale.cuda import mma, tile

    monkeypatch.setattr(tile, "CHAIN", True)

    def no_mma(*a: Any, **k: Any) -> bool:
        raise AssertionError("a K-split MMA kernel (the tree's bits) ran under tile.CHAIN")

    monkeypatch.setattr(mma, "launch", no_mma)
    for n, k in ((70, 4096), (40, 1232), (24, 16 * 200)):
        w = gen.nvfp4(fresh_rng, n, k)
        dw = cuda.upload(w)
        x = gen.rows(fresh_rng, 40, k)
        want, want4 = ref(x, w), ref(x, w, "A4")
        for m in (1, 2, 3, 4, 5, 8, 9, 16, 17, 24, 25, 40):
            gen.bits_equal(run_nvfp4(cuda, fresh_rng, x[:m], dw, n), want[:m], f"chain routed m={m} K={k}")
            gen.bits_equal(run_a4(fresh_rng, x[:m], w, dw), want4[:m], f"chain routed A4 m={m} K={k}")
    for n, k in ((70, 4096), (40, 1216)):  # Q2_0: B % 8 == 0 and not
        w = gen.q2_0(fresh_rng, n, k)
        dw = cuda.upload(w)
        x = gen.rows(fresh_rng, 40, k)
        want = ref(x, w)
        for m in (1, 2, 3, 4, 5, 8, 9, 16, 17, 24, 25, 40):
            buf, view, init = gen.guarded(cp, fresh_rng, m, n)
            cuda.launch("q2_0_gemm", dev_rows(x[:m]), dw, view)
            gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"chain routed Q2_0 m={m} K={k}")


def check_rows(cuda: Any, rng: np.random.Generator, entry: str, w: Any, what: str) -> Any:
    """``entry`` on w's device copy at 1, 2, 3, 4 and 9 rows (in-window and edge rows shuffled)
    into guarded outputs, bit for bit against project_chain; returns the device weight."""
    n, k = w.n, w.k
    dw = cuda.upload(w)
    x = np.concatenate([window_rows(rng, 3, k, tuple(range(-30, 31))), gen.rows(rng, 6, k)])
    x = x[rng.permutation(len(x))]
    want = ref(x, w)
    for m in (1, 2, 3, 4, 9):
        buf, view, init = gen.guarded(cp, rng, m, n)
        cuda.launch(entry, dev_rows(x[:m]), dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"{what} m={m} N={n} K={k}")
    return dw


#: Q2_0 (N, K): one part of 16 Q2 blocks, two parts the last of 3 Q2 blocks, Qwen3-8B's gate (4
#: parts) and down (12), K = 131072 (128 parts: rounds of 2 columns).
Q2_SHAPES = ((300, 1024), (70, 1216), (130, 4096), (45, 12288), (5, 131072))


@pytest.mark.parametrize("shape", Q2_SHAPES, ids=[f"N{n}-K{k}" for n, k in Q2_SHAPES])
def test_chain_generic_q2_0(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, shape: tuple
) -> None:
    """Q2_0 × A16 on ``q2_0_chain_r{R}`` (tile, decode and MMA kernels off): R = 1, 2, 4 and rows
    in groups of 4 over grid.y, in-window and edge rows, against project_chain."""
    from metrale.cuda import configs, mma, q2_0, tile

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(tile, "Q2_ENABLED", False)
    monkeypatch.setattr(mma, "ENABLED", False)
    monkeypatch.setattr(q2_0, "DEC_VARIANT", "off")
    names = gen.kernels_fetched(monkeypatch, q2_0)
    check_rows(cuda, fresh_rng, "q2_0_gemm", gen.q2_0(fresh_rng, *shape), "q2 chain generic")
    assert {f"q2_0_chain_r{r}" for r in configs.CHAIN_GENERIC_ROWS} <= set(names), names
    assert not any(name.startswith(("q2_0_gemv_r", "q2_dec_")) for name in names), names


#: FP8 / BF16 (N, K): one block, 3 blocks, 65 (two parts, the last of 1 block), 197 (a last step
#: of 5 blocks), Qwen3-8B's gate (4 parts) and down (12).
WIDE_SHAPES = ((9, 16), (37, 48), (30, 1040), (21, 3152), (130, 4096), (45, 12288))


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize("shape", WIDE_SHAPES, ids=[f"N{n}-K{k}" for n, k in WIDE_SHAPES])
def test_chain_generic_wide(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str, shape: tuple
) -> None:
    """FP8 (every finite e4m3 code, weights rounded by the 11-bit codes) and BF16 (blocks spanning
    the whole range) × A16 on ``{fp8,bf16}_chain_r{R}`` (the FP8 chain tile and the tensor-core
    kernels off): R = 1, 2, 4, rows in groups of 4 over grid.y, in-window and edge rows, against
    project_chain; the FP8 chain bytes added to the device weight once."""
    from metrale.cuda import fp8_bf16, mma, tile
    from tests.gpu.test_cuda_fp8_bf16 import bf16_weight, fp8_weight

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(tile, "ENABLED", False)
    monkeypatch.setattr(mma, "ENABLED", False)
    monkeypatch.setattr(fp8_bf16, "CHAIN_DEC_TIERS", {})
    names = gen.kernels_fetched(monkeypatch, fp8_bf16)
    w = fp8_weight(fresh_rng, *shape) if fmt == "fp8" else bf16_weight(fresh_rng, *shape)
    entry = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
    dw = check_rows(cuda, fresh_rng, entry, w, f"{fmt} chain generic")
    assert {f"{fmt}_chain_r{r}" for r in (1, 2, 4)} <= set(names), names
    assert not any("_gemv_r" in name or "_dec_" in name or "_mma_" in name for name in names), names
    assert ("chain_w" in dw.arrays) == (fmt == "fp8")


@pytest.mark.parametrize("fmt", ["fp8", "q2_0"])
def test_chain_routes_fp8_and_q2_0(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """FP8 and Q2_0 under tile.CHAIN as routed: the decode kernels' chain form at their rows (FP8:
    ``fp8_bf16.CHAIN_DEC_TIERS`` where ``fp8_bf16.CHAIN_DEC_FP8``; Q2_0: ``q2c_dec_*`` at 1..3
    rows, ``q2cp_dec_*`` at ``q2_0.CHAIN_PIPE_ROWS``); else the chain tile from one row (their
    ``chain_min_rows``) where B % 8 == 0, the generic chain kernels elsewhere: the chain's bits at
    1 to 40 rows, each row count on the kernel it should take."""
    from metrale.cuda import configs, fp8_bf16, q2_0, runtime, tile
    from tests.gpu.test_cuda_fp8_bf16 import fp8_weight

    monkeypatch.setattr(tile, "CHAIN", True)
    names = gen.kernels_fetched(monkeypatch, runtime)
    decs = gen.kernels_fetched(monkeypatch, fp8_bf16 if fmt == "fp8" else q2_0)
    entry, stem = ("w8a16_gemm", "w8c_gemm_f") if fmt == "fp8" else ("q2_0_gemm", "q2c_gemm_f")
    for n, k in ((70, 4096), (40, 1040) if fmt == "fp8" else (40, 1216)):
        w = fp8_weight(fresh_rng, n, k) if fmt == "fp8" else gen.q2_0(fresh_rng, n, k)
        dw = cuda.upload(w)
        x = gen.rows(fresh_rng, 40, k)
        want = ref(x, w)
        for m in (1, 2, 3, 4, 5, 8, 9, 24, 25, 40):
            del names[:], decs[:]
            buf, view, init = gen.guarded(cp, fresh_rng, m, n)
            cuda.launch(entry, dev_rows(x[:m]), dw, view)
            gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"chain routed {fmt} m={m} K={k}")
            if fmt == "fp8":
                on_dec = fp8_bf16.CHAIN_DEC_FP8 and m in fp8_bf16.CHAIN_DEC_TIERS
            else:
                on_dec = m <= min(configs.Q2_0_DEC_MAX_ROWS, max(configs.Q2_0_DEC_ROWS))
            on_tile = any(name.startswith(stem) for name in names)
            assert on_tile == (k // 16 % 8 == 0 and not on_dec), (m, k, names)
            dec = "fp8c_dec_" if fmt == "fp8" else "q2cp_dec_" if m in q2_0.CHAIN_PIPE_ROWS else "q2c_dec_"
            assert any(name.startswith(dec) for name in decs) == on_dec, (m, k, decs)


#: BF16 (N, K) on the wide tensor-core kernels' chain form: one block (one partial part), B = 65
#: (two parts, the last of one block and seven padding blocks), a last part of 5 blocks, Qwen3-8B's
#: gate (4 parts) and down (12: the GEMM's K split into whole parts on a small grid).
BF16_MMA_SHAPES = ((9, 16), (37, 1040), (21, 3152), (70, 4096), (45, 12288))


@pytest.mark.parametrize("gemm", [False, True], ids=["ksplit", "gemm"])
@pytest.mark.parametrize("shape", BF16_MMA_SHAPES, ids=[f"N{n}-K{k}" for n, k in BF16_MMA_SHAPES])
def test_chain_routes_bf16(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, gemm: bool, shape: tuple
) -> None:
    """BF16 under tile.CHAIN as routed: from configs.FP8_BF16_CHAIN_MMA_MIN_M rows the K-split
    ``bf16c_mma_nt{1,2,4}`` (``gemm`` off) or the prefill GEMM ``bf16c_gemm_*`` on any grid from
    MMA_MIN_M (K split into whole chain parts where the grid is small); the chain's bits at 1
    to 70 rows (in-window and edge rows), and no kernel of the tree."""
    from metrale.cuda import fp8_bf16, mma, runtime, tile
    from tests.gpu.test_cuda_fp8_bf16 import bf16_weight

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(mma, "GEMM_ANY_GRID", gemm)
    monkeypatch.setattr(fp8_bf16, "GEMM_MIN_ROWS", fp8_bf16.MMA_MIN_M if gemm else 1 << 30)
    names = gen.kernels_fetched(monkeypatch, fp8_bf16)
    gemms = gen.kernels_fetched(monkeypatch, runtime)
    n, k = shape
    w = bf16_weight(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = np.concatenate([window_rows(fresh_rng, 8, k, tuple(range(-30, 31))), gen.rows(fresh_rng, 62, k)])
    x = x[fresh_rng.permutation(len(x))]
    want = ref(x, w)
    for m in (1, 3, 4, 5, 8, 9, 16, 17, 32, 33, 70):
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch("dense_gemm", dev_rows(x[:m]), dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"chain routed BF16 m={m} N={n} K={k}")
    launched = {*names, *gemms}
    assert {f"bf16c_mma_nt{nt}" for nt in (1, 2, 4)} <= launched or gemm, sorted(launched)
    assert any(name.startswith("bf16c_gemm_") for name in launched) == gemm, sorted(launched)
    tree = ("bf16_mma", "fp8_bf16_gemm_nt", "bf16_dec", "bf16_gemv")
    assert not any(name.startswith(tree) for name in launched), sorted(launched)


def edge_rows(rng: np.random.Generator, k: int) -> np.ndarray:
    """14 rows in random order: one of every edge kind (NaN/Inf blocks, subnormal, huge, ties, ...),
    three in-window rows, three Gaussian."""
    x = np.concatenate(
        [
            np.stack([gen.row(rng, k, kind) for kind in gen.ROW_KINDS]),
            window_rows(rng, 3, k, tuple(range(-30, 31))),
            gen.rows(rng, 3, k),
        ]
    )
    return x[rng.permutation(len(x))]


def check_decode(
    cuda: Any,
    rng: np.random.Generator,
    entry: str,
    dw: Any,
    x: np.ndarray,
    want: np.ndarray,
    m: int,
    names: list[str],
    launched: set[str],
) -> None:
    """``entry`` on groups of m of the rows x (starting every 2 m + 1 rows) into guarded outputs,
    bit for bit against ``want``; each call fetches exactly the kernels ``launched``."""
    n = dw.n
    for i in range(0, len(x) - m + 1, 2 * m + 1):
        del names[:]
        buf, view, init = gen.guarded(cp, rng, m, n)
        cuda.launch(entry, dev_rows(x[i : i + m]), dw, view)
        got = gen.check_guard(buf, init, m, n)
        gen.bits_equal(got, want[i : i + m], f"{sorted(launched)} N={n} K={dw.k} rows {i}..{i + m - 1}")
        assert set(names) == launched, names


#: (N, K) for the decode kernels' chain form: one block (one part of one block); odd N below a
#: CTA's columns with B = 65 (two parts, the last of one block) and 67; B = 293 (five parts, the
#: last of 37: more chunks than warps, the next one prefetched); Qwen3-8B's gate (4 parts) and
#: down (12); K = 65536 (64 parts, the roots' tree at its widest).
DEC_CHAIN_SHAPES = ((9, 16), (37, 1040), (21, 1072), (43, 4688), (70, 4096), (19, 12288), (5, 65536))


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
def test_chain_decode_wide_w_early(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """``test_chain_decode_wide`` at K = 1072 and 12288 built with the other setting of
    ``configs.FP8_BF16_DEC_W_EARLY`` than the routed one (each warp's first weight load before the
    PDL wait or after it)."""
    from metrale.cuda import configs
    from tests.gpu.test_cuda_fp8_bf16 import rebuild_decode

    rebuild_decode(monkeypatch, 1 - configs.FP8_BF16_DEC_W_EARLY)
    for shape in ((21, 1072), (19, 12288)):
        test_chain_decode_wide(cuda, fresh_rng, monkeypatch, fmt, shape)


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize("shape", DEC_CHAIN_SHAPES, ids=[f"N{n}-K{k}" for n, k in DEC_CHAIN_SHAPES])
def test_chain_decode_wide(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str, shape: tuple
) -> None:
    """FP8 (every finite e4m3 code; the chain tile's bytes, B % 8 != 0 included) and BF16 (blocks
    spanning the whole range) on the decode kernels' chain form ``{fp8,bf16}c_dec_*`` at each of
    their row counts: in-window and edge rows (NaN/Inf blocks, subnormal and huge values) against
    project_chain, bit for bit, into guarded outputs; only those kernels launch (their prep
    aside)."""
    from metrale.cuda import fp8_bf16, tile
    from tests.gpu.test_cuda_fp8_bf16 import bf16_weight, fp8_weight

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(fp8_bf16, "CHAIN_DEC_FP8", True)
    names = gen.kernels_fetched(monkeypatch, fp8_bf16)
    n, k = shape
    w = fp8_weight(fresh_rng, n, k) if fmt == "fp8" else bf16_weight(fresh_rng, n, k)
    dw = cuda.upload(w)
    entry = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
    x = edge_rows(fresh_rng, k)
    want = ref(x, w)
    for m, cfg in fp8_bf16.CHAIN_DEC_TIERS.items():
        check_decode(
            cuda, fresh_rng, entry, dw, x, want, m, names, {"fp8_bf16_dec_prep", cfg.name(fmt + "c", m)}
        )


@pytest.mark.parametrize("m", [1, 2, 3])
def test_chain_decode_extreme_bf16(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, m: int
) -> None:
    """BF16 weights at the code extremes (near the bf16 maximum, whole-range blocks, subnormals,
    ±0, ties) times huge and edge activations on ``bf16c_dec_*``: block values overflow to Inf
    after their one rounding, Inf − Inf in a chain gives NaN, subnormal block values round once."""
    from metrale.cuda import tile
    from metrale.reference.elements import BF16
    from metrale.reference.formats import DenseWeight

    monkeypatch.setattr(tile, "CHAIN", True)
    k = 1600
    kinds = ("huge", "spread", "subnormal", "zeros", "ties", "tiny")
    codes = np.stack([gen.row(fresh_rng, k, kind) for kind in kinds * 3])
    w = DenseWeight(weight=codes.astype(BF16), name="bf16")
    dw = cuda.upload(w)
    x = np.concatenate(
        [
            np.stack([gen.row(fresh_rng, k, kind) for kind in gen.ROW_KINDS]),
            np.stack([gen.row(fresh_rng, k, "huge") for _ in range(3)]),
        ]
    )
    want = ref(x, w)
    for i in range(0, len(x) - m + 1, m):
        buf, view, init = gen.guarded(cp, fresh_rng, m, w.n)
        cuda.launch("dense_gemm", dev_rows(x[i : i + m]), dw, view)
        got = gen.check_guard(buf, init, m, w.n)
        gen.bits_equal(got, want[i : i + m], f"bf16c_dec extremes m={m} rows {i}")


@pytest.mark.parametrize("pipe", [False, True], ids=["q2c", "q2cp"])
def test_chain_decode_q2_0_ring_early(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, pipe: bool
) -> None:
    """``test_chain_decode_q2_0`` at K = 4096 and 12288 built with the other setting of
    ``configs.Q2_0_DEC_RING_EARLY`` than the routed one (the decode kernels' first weight loads
    before the PDL wait or after it)."""
    from metrale.cuda import configs
    from tests.gpu.test_cuda_q2_0 import rebuild_q2_decode

    rebuild_q2_decode(monkeypatch, 1 - configs.Q2_0_DEC_RING_EARLY)
    for shape in ((130, 4096), (45, 12288)):
        test_chain_decode_q2_0(cuda, fresh_rng, monkeypatch, shape, pipe)


@pytest.mark.parametrize("pipe", [False, True], ids=["q2c", "q2cp"])
@pytest.mark.parametrize("shape", Q2_SHAPES, ids=[f"N{n}-K{k}" for n, k in Q2_SHAPES])
def test_chain_decode_q2_0(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, shape: tuple, pipe: bool
) -> None:
    """Q2_0 × A16 on the decode kernels' chain form ``q2c_dec_*`` (``pipe``: ``q2cp_dec_*`` where
    built, each step's chains after the next step's block dots), every routed variant at its row
    count (staged or through L1 as K decides; K = 131072 forces L1): one part, a partial last
    part, 4 to 128 parts, columns off the warps' groups; in-window and edge rows (NaN/Inf blocks,
    subnormal and huge values) against project_chain, bit for bit, into guarded outputs; only
    those kernels launch (their prep aside)."""
    from metrale.cuda import configs, q2_0, tile

    monkeypatch.setattr(tile, "CHAIN", True)
    monkeypatch.setattr(q2_0, "CHAIN_PIPE_ROWS", configs.Q2_0_CHAIN_PIPE_ROWS_BUILT if pipe else ())
    names = gen.kernels_fetched(monkeypatch, q2_0)
    n, k = shape
    w = gen.q2_0(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = edge_rows(fresh_rng, k)
    want = ref(x, w)
    for m, _, variant in configs.Q2_0_DEC_ROUTE:
        monkeypatch.setattr(q2_0, "DEC_VARIANT", variant)
        name = q2_0.dec_kernel_name(variant, m, k, chain=True)[0]
        check_decode(cuda, fresh_rng, "q2_0_gemm", dw, x, want, m, names, {"q2_dec_prep", name})
