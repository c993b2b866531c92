"""FP8 (W8A16) and BF16 dense × A16 on the GPU against the numpy reference, bit for bit
(arithmetic.md § codes24, § projection): GEMV, the decode kernels (every built configuration
at m = 1, 2, 3) and GEMM, every finite e4m3 code, bf16 weight blocks spanning far more than
2^15 (rounded codes), m = 1..64, odd N and block counts, named activation edge cases, guard
bands, batch invariance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.cuda import configs, fp8_bf16
from metrale.reference.formats import DenseWeight, Fp8Weight
from metrale.reference.projection import project
from tests.gpu.gen import (
    BF16,
    E4M3,
    E4M3_FINITE,
    F32,
    ROW_KINDS,
    bits_equal,
    check_guard,
    guarded,
    rebuild_with,
    row,
    rows,
)

cp = pytest.importorskip("cupy")

#: (N, K): 1, 3, 65 and 67 blocks of 16 (65, 67: two tree chunks).
SHAPES = [(9, 16), (37, 48), (30, 1040), (21, 1072)]
M_VALUES = [1, 2, 3, 4, 5, 8, 9, 17, 33, 64]


def fp8_weight(rng: np.random.Generator, n: int, k: int) -> Fp8Weight:
    """Random finite e4m3 codes (every one of them when n·k allows) and positive row scales."""
    codes = rng.choice(E4M3_FINITE, (n, k))
    flat = codes.reshape(-1)
    flat[: min(flat.size, E4M3_FINITE.size)] = E4M3_FINITE[: min(flat.size, E4M3_FINITE.size)]
    scale = np.exp2(rng.uniform(-12, 4, n)).astype(F32)
    return Fp8Weight(weight=codes.view(E4M3), weight_scale=scale, name="fp8")


def bf16_weight(rng: np.random.Generator, n: int, k: int) -> DenseWeight:
    """Gaussian rows of random magnitude, and rows whose blocks span the whole bf16 range."""
    w = np.stack([row(rng, k, ("gauss", "spread", "tiny", "subnormal")[i % 4]) for i in range(n)])
    return DenseWeight(weight=w.astype(BF16), name="bf16")


def _launch(cuda: Any, name: str, x: np.ndarray, w: Any, m: int, rng: np.random.Generator) -> np.ndarray:
    buf, inner, init = guarded(cp, rng, x.shape[0], w.n)
    cuda.launch(name, cp.asarray(x.view(np.uint16)), w, inner)
    return check_guard(buf, init, m, w.n)


@pytest.mark.parametrize("ksplit", [False, True])
@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_wide_matches_reference(
    cuda: Any,
    fresh_rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
    fmt: str,
    n: int,
    k: int,
    ksplit: bool,
) -> None:
    """The routing's kernels at m = 1..64 (the prefill GEMM where its grid fills the GPU, else the
    K-split kernels) and, with ``ksplit``, the K-split ``{fp8,bf16}_mma_nt*`` at every m >= 4."""
    if ksplit:
        monkeypatch.setattr(fp8_bf16, "GEMM_MIN_ROWS", 1 << 30)
    host = fp8_weight(fresh_rng, n, k) if fmt == "fp8" else bf16_weight(fresh_rng, n, k)
    gemv, gemm = ("w8a16_gemv", "w8a16_gemm") if fmt == "fp8" else ("dense_gemv", "dense_gemm")
    w = cuda.upload(host)
    x = rows(fresh_rng, 64, k)
    want = project(x, host, "A16").view(np.uint16)
    single = np.stack([_launch(cuda, gemv, x[i : i + 1], w, 1, fresh_rng)[0] for i in range(64)])
    bits_equal(single, want, f"{gemv} rows")
    for m in M_VALUES:
        got = _launch(cuda, gemm, x[:m], w, m, fresh_rng)
        bits_equal(got, want[:m], f"{gemm} m={m} (reference and batch invariance)")


def test_dense_upload_keeps_the_host_weight(cuda: Any, fresh_rng: np.random.Generator) -> None:
    """The device copy of a BF16 weight holds its 24-bit code values; the host stays as it was."""
    host = bf16_weight(fresh_rng, 8, 64)
    before = host.weight.view(np.uint16).copy()
    cuda.upload(host)
    bits_equal(host.weight.view(np.uint16), before, "host weight")


def test_wide_large_m_gemm(cuda: Any, fresh_rng: np.random.Generator) -> None:
    host = fp8_weight(fresh_rng, 19, 64)
    w = cuda.upload(host)
    x = rows(fresh_rng, 130, 64)
    got = _launch(cuda, "w8a16_gemm", x, w, 130, fresh_rng)
    bits_equal(got, project(x, host, "A16").view(np.uint16), "w8a16_gemm m=130")


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
def test_wide_mma_prefill_chunks(cuda: Any, fresh_rng: np.random.Generator, fmt: str) -> None:
    """The tensor-core GEMM over 1100 rows (two row chunks of the launcher, a last row tile of
    4 rows), 67 blocks (a partial 8-block step) and N = 37 (a partial 16-column tile), with
    every activation edge kind among the rows: all rows bit-equal to the reference."""
    host = fp8_weight(fresh_rng, 37, 1072) if fmt == "fp8" else bf16_weight(fresh_rng, 37, 1072)
    w = cuda.upload(host)
    x = rows(fresh_rng, 1100, 1072)
    kernel = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
    got = _launch(cuda, kernel, x, w, 1100, fresh_rng)
    bits_equal(got, project(x, host, "A16").view(np.uint16), f"{kernel} m=1100")


def test_wide_mma_extreme_weight_codes(cuda: Any, fresh_rng: np.random.Generator) -> None:
    """BF16 weights at the code extremes (|c| near 2^23, a block of the bf16 maximum beside
    subnormals, ±0) times activations at |c_a| = 32640 and huge rows: every limb carries, and
    products overflow to Inf after the one rounding."""
    k = 256
    w = np.stack([row(fresh_rng, k, kind) for kind in ("huge", "spread", "subnormal", "zeros", "ties") * 4])
    host = DenseWeight(weight=w.astype(BF16), name="bf16")
    wd = cuda.upload(host)
    x = np.concatenate([rows(fresh_rng, 24, k), np.stack([row(fresh_rng, k, "huge") for _ in range(5)])])
    got = _launch(cuda, "dense_gemm", x, wd, x.shape[0], fresh_rng)
    bits_equal(got, project(x, host, "A16").view(np.uint16), "dense_gemm extremes")


#: (N, K) for the decode kernels: one block; odd N below one CTA's columns; 65 and 67 blocks
#: (a last 512-element chunk of 1 and 3 blocks); 293 blocks = 10 chunks (more chunks than warps:
#: each warp streams several, with the next one prefetched); the Qwen3-8B down projection's K.
DEC_SHAPES = [(9, 16), (37, 1040), (21, 1072), (43, 4688), (19, 12288)]
DEC_BUILDS = configs.fp8_bf16_dec_builds()


def _dec_rows(rng: np.random.Generator, k: int) -> np.ndarray:
    """24 rows: every activation edge kind (NaN/Inf blocks, near-max, subnormal, zeros, ties,
    tiny) at least once, the rest Gaussian."""
    return np.concatenate([np.stack([row(rng, k, kind) for kind in ROW_KINDS]), rows(rng, 16, k)])


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize(("m", "cfg"), DEC_BUILDS, ids=[d.name("dec", r) for r, d in DEC_BUILDS])
def test_decode_kernels_match_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str, m: int, cfg: Any
) -> None:
    """Every built decode kernel (routing table and variants) at its row count: each group of m
    rows, over shapes with odd N, partial chunks and many chunks per warp, equals the reference
    bit for bit, and the call went through the decode path."""
    calls: list[str] = []
    real = fp8_bf16._project_dec

    def spy(*args: Any) -> None:
        calls.append(args[-1].name(fmt, m))
        real(*args)

    monkeypatch.setattr(fp8_bf16, "DECODE", "dec")
    monkeypatch.setattr(fp8_bf16, "DEC_TIERS", {m: cfg})
    monkeypatch.setattr(fp8_bf16, "_project_dec", spy)
    kernel = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
    for n, k in DEC_SHAPES:
        host = fp8_weight(fresh_rng, n, k) if fmt == "fp8" else bf16_weight(fresh_rng, n, k)
        w = cuda.upload(host)
        x = _dec_rows(fresh_rng, k)
        want = project(x, host, "A16").view(np.uint16)
        for i in range(0, x.shape[0] - m + 1, m):
            got = _launch(cuda, kernel, x[i : i + m], w, m, fresh_rng)
            bits_equal(got, want[i : i + m], f"{cfg.name(fmt, m)} N={n} K={k} rows {i}..{i + m - 1}")
    assert calls and set(calls) == {cfg.name(fmt, m)}, calls


def rebuild_decode(monkeypatch: pytest.MonkeyPatch, w_early: int) -> None:
    """``configs.FP8_BF16_DEC_W_EARLY`` set for this test, kernels/fp8_bf16_gemv.cu rebuilt with it."""
    from metrale.cuda import runtime

    rebuild_with(monkeypatch, (fp8_bf16.CU_FILE,), FP8_BF16_DEC_W_EARLY=w_early)
    assert f"#define DEC_W_EARLY {w_early}" in runtime.source(fp8_bf16.CU_FILE)


ROUTED_DEC = list(configs.FP8_BF16_DEC.items())


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize(("m", "cfg"), ROUTED_DEC, ids=[d.name("dec", r) for r, d in ROUTED_DEC])
def test_decode_kernels_w_early(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str, m: int, cfg: Any
) -> None:
    """The routed decode kernels built with the other setting of ``configs.FP8_BF16_DEC_W_EARLY``
    than the routed one (each warp's first weight load before the PDL wait or after it), as
    ``test_decode_kernels_match_reference``."""
    rebuild_decode(monkeypatch, 1 - configs.FP8_BF16_DEC_W_EARLY)
    test_decode_kernels_match_reference(cuda, fresh_rng, monkeypatch, fmt, m, cfg)


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
def test_decode_single_row_entry_points(cuda: Any, fresh_rng: np.random.Generator, fmt: str) -> None:
    """w8a16_gemv / dense_gemv (the routing table's m = 1 kernel) on every edge row."""
    n, k = 45, 2064
    host = fp8_weight(fresh_rng, n, k) if fmt == "fp8" else bf16_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    x = _dec_rows(fresh_rng, k)
    want = project(x, host, "A16").view(np.uint16)
    gemv = "w8a16_gemv" if fmt == "fp8" else "dense_gemv"
    got = np.stack([_launch(cuda, gemv, x[i : i + 1], w, 1, fresh_rng)[0] for i in range(x.shape[0])])
    bits_equal(got, want, f"{gemv} decode rows")


@pytest.mark.parametrize("m", [1, 2, 3])
def test_decode_extreme_weight_codes(cuda: Any, fresh_rng: np.random.Generator, m: int) -> None:
    """BF16 weights at the code extremes (near the bf16 maximum, blocks spanning the whole
    range, subnormals, ±0, ties) times huge and edge activations: block values overflow to Inf
    after their one rounding, subnormal block values round once, Inf − Inf gives NaN."""
    k = 1600
    w = np.stack(
        [row(fresh_rng, k, kind) for kind in ("huge", "spread", "subnormal", "zeros", "ties", "tiny") * 3]
    )
    host = DenseWeight(weight=w.astype(BF16), name="bf16")
    wd = cuda.upload(host)
    x = np.concatenate([_dec_rows(fresh_rng, k), np.stack([row(fresh_rng, k, "huge") for _ in range(6)])])
    want = project(x, host, "A16").view(np.uint16)
    for i in range(0, x.shape[0] - m + 1, m):
        got = _launch(cuda, "dense_gemm", x[i : i + m], wd, m, fresh_rng)
        bits_equal(got, want[i : i + m], f"dense_gemm extremes m={m} rows {i}")


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize("pdl_on", [True, False])
@pytest.mark.parametrize("m", [1, 2, 3])
def test_decode_chain_without_sync(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str, pdl_on: bool, m: int
) -> None:
    """Five decode projections back to back, each reading the previous one's output, with no
    host synchronisation (programmatic launches with PDL on): a prep or kernel that read before
    its pdl_wait would see a stale input. Every stage equals the reference chain's bits."""
    from metrale.cuda import pdl

    monkeypatch.setattr(pdl, "ENABLED", pdl_on)
    k = 1536
    hosts = []
    for i in range(5):
        w = fresh_rng.standard_normal((k, k)).astype(F32) * F32(2.0 / np.sqrt(k))
        hosts.append(
            Fp8Weight.quantize(w, name=f"w{i}") if fmt == "fp8" else DenseWeight.quantize(w, name=f"w{i}")
        )
    ws = [cuda.upload(h) for h in hosts]
    x = rows(fresh_rng, m, k, finite=True)
    kernel = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
    bufs = [cp.asarray(x.view(np.uint16))] + [cp.zeros((m, k), dtype=cp.uint16) for _ in hosts]
    pdl.entry_start()
    for i, w in enumerate(ws):
        cuda.launch(kernel, bufs[i], w, bufs[i + 1])
    want = x
    for i, h in enumerate(hosts):
        want = project(want, h, "A16")
        bits_equal(bufs[i + 1].get(), want.view(np.uint16), f"{kernel} chain stage {i} pdl={pdl_on} m={m}")


# ---- the prefill GEMM (kernels/fp8_bf16_mma.cu on mma_gemm.cuh's wide mode) ----

#: (N, K): every counter depth D of the tables (S8 = ceil(B / 8) steps: 1, 9, 17, 96, 129),
#: B % 8 != 0 (3, 65, 130, 1032 blocks: zero-padded last steps) and N off every 16-column tile
#: and 128-column CTA.
GEMM_SHAPES = ((37, 48), (16, 1040), (50, 2080), (133, 12288), (9, 16512))
#: m around the 8 NT-row tiles and the GEMM_ROWS = 48 chunks the tests lower it to.
GEMM_M = (1, 2, 3, 8, 9, 16, 17, 23, 24, 25, 47, 48, 49, 100)


def _gemm_only(monkeypatch: pytest.MonkeyPatch, rows_: int = 48, max_parts: int | None = None) -> None:
    """Route every m to the prefill GEMM (any grid, chunks of ``rows_`` rows) and make a fallback
    to the K-split kernels fail the test."""
    from metrale.cuda import fp8_bf16, mma

    def forbidden(*_: Any) -> None:
        raise AssertionError("the FP8/BF16 prefill GEMM did not run")

    monkeypatch.setattr(fp8_bf16, "MMA_MIN_M", 1)
    monkeypatch.setattr(fp8_bf16, "GEMM_MIN_ROWS", 1)
    monkeypatch.setattr(fp8_bf16, "_project_mma", forbidden)
    monkeypatch.setattr(mma, "ENABLED", True)
    monkeypatch.setattr(mma, "GEMM_ANY_GRID", True)
    monkeypatch.setattr(mma, "GEMM_ROWS", rows_)
    if max_parts is not None:
        monkeypatch.setattr(mma, "GEMM_MAX_PARTS", max_parts)


@pytest.mark.parametrize("parts", ["split", "whole"])
@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=[f"N{n}-K{k}" for n, k in GEMM_SHAPES])
def test_prefill_gemm_matches_reference(
    cuda: Any,
    fresh_rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple,
    fmt: str,
    parts: str,
) -> None:
    """Every m around the tiles and chunks, K whole per warp or split into aligned parts (the
    grid of these small N is what makes the launcher split), against the reference."""
    _gemm_only(monkeypatch, max_parts=1 if parts == "whole" else None)
    n, k = shape
    host = fp8_weight(fresh_rng, n, k) if fmt == "fp8" else bf16_weight(fresh_rng, n, k)
    kernel = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
    w = cuda.upload(host)
    x = rows(fresh_rng, max(GEMM_M), k)
    want = project(x, host, "A16").view(np.uint16)
    for m in GEMM_M:
        got = _launch(cuda, kernel, x[:m], w, m, fresh_rng)
        bits_equal(got, want[:m], f"{kernel} GEMM m={m} {shape} {parts}")


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
def test_prefill_gemm_edge_rows_every_kind(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """Each activation edge kind (NaN/Inf blocks, subnormals, zeros, ties, huge) in every row of
    a tile, against the reference; BF16 weights whose blocks span > 2^15 and reach the extremes."""
    from tests.gpu.gen import ROW_KINDS

    _gemm_only(monkeypatch)
    n, k = 29, 1040
    if fmt == "fp8":
        host: Any = fp8_weight(fresh_rng, n, k)
    else:
        kinds = ("huge", "spread", "subnormal", "zeros", "ties", "tiny")
        wrows = np.stack([row(fresh_rng, k, kinds[i % len(kinds)]) for i in range(n)])
        host = DenseWeight(weight=wrows.astype(BF16), name="bf16")
    kernel = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
    w = cuda.upload(host)
    for kind in ROW_KINDS:
        x = np.stack([row(fresh_rng, k, kind) for _ in range(37)])
        got = _launch(cuda, kernel, x, w, 37, fresh_rng)
        with np.errstate(all="ignore"):
            want = project(x, host, "A16").view(np.uint16)
        bits_equal(got, want, f"{kernel} GEMM edge rows {kind}")


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
def test_prefill_gemm_batch_invariant(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """Each row of a 300-row GEMM (default routing and chunks: N = 2048 fills the grid) equals
    that row projected alone by the single-row GEMV, and the reference."""
    n, k = 2048, 512
    host = fp8_weight(fresh_rng, n, k) if fmt == "fp8" else bf16_weight(fresh_rng, n, k)
    gemv, gemm = ("w8a16_gemv", "w8a16_gemm") if fmt == "fp8" else ("dense_gemv", "dense_gemm")
    w = cuda.upload(host)
    x = rows(fresh_rng, 300, k)
    from metrale.cuda import fp8_bf16

    def forbidden(*_: Any) -> None:
        raise AssertionError("the FP8/BF16 prefill GEMM did not run")

    with monkeypatch.context() as mp:
        mp.setattr(fp8_bf16, "_project_mma", forbidden)
        got = _launch(cuda, gemm, x, w, 300, fresh_rng)
    picks = fresh_rng.choice(300, 12, replace=False)
    single = np.stack([_launch(cuda, gemv, x[i : i + 1], w, 1, fresh_rng)[0] for i in picks])
    bits_equal(got[picks], single, f"{gemm} rows against {gemv}")
    bits_equal(got, project(x, host, "A16").view(np.uint16), f"{gemm} m=300")


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
def test_prefill_gemm_variants_match_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """Every built GEMM (configs.fp8_bf16_gemm_builds with prefetch, fp8_bf16_gemm_late_builds
    without) at counter depths 5 and 7, K whole per warp, in both rasters, against the reference."""
    from metrale.cuda import configs, fp8_bf16

    _gemm_only(monkeypatch, max_parts=1)
    builds = [(*v, "p") for v in configs.fp8_bf16_gemm_builds()]
    builds += [(*v, "l") for v in configs.fp8_bf16_gemm_late_builds()]
    for n, k in ((50, 2080), (133, 12288)):
        host = fp8_weight(fresh_rng, n, k) if fmt == "fp8" else bf16_weight(fresh_rng, n, k)
        kernel = "w8a16_gemm" if fmt == "fp8" else "dense_gemm"
        w = cuda.upload(host)
        x = rows(fresh_rng, 41, k)
        want = project(x, host, "A16").view(np.uint16)
        depth = 5 if k // 16 <= 8 * 32 else 7
        for d, nt, b, suffix in builds:
            if d != depth:
                continue
            for rows_first in (False, True):
                monkeypatch.setattr(fp8_bf16, "GEMM_ROWS_FIRST", rows_first)
                monkeypatch.setitem(fp8_bf16.GEMM_SUFFIX, d, suffix)
                monkeypatch.setitem(configs.FP8_BF16_GEMM_TILES, d, (nt, b))
                got = _launch(cuda, kernel, x, w, 41, fresh_rng)
                what = f"{kernel} variant d{d} nt{nt} b{b} {suffix} rows_first={rows_first} N{n} K{k}"
                bits_equal(got, want, what)
