"""Q2_0 × A16 on the GPU against the numpy reference, bit for bit (arithmetic.md § projection): the three
Q2 entry points, m = 1..64, K whose block count is no power of two, N off every tile, named
activation edge cases, guard bands, batch invariance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.cuda import configs
from metrale.reference.formats import Q2_0Weight
from metrale.reference.projection import project
from tests.gpu.gen import bits_equal, check_guard, guarded, rebuild_with, rows

cp = pytest.importorskip("cupy")

#: (N, K): K = 64·{3, 37, 65} gives 12, 148, 260 A16 blocks (1, 2, 3 tree chunks).
SHAPES = [(37, 192), (29, 2368), (70, 4160)]
M_VALUES = [1, 2, 3, 4, 5, 8, 9, 16, 33, 64]


def q2_weight(rng: np.random.Generator, n: int, k: int) -> Q2_0Weight:
    """Uniform 2-bit codes; f16 scales of random sign and magnitude, with zero and subnormals."""
    q = rng.integers(0, 4, (n, k), dtype=np.uint8)
    d = rng.standard_normal((n, k // 64)) * np.exp2(rng.integers(-26, 8, (n, k // 64)))
    d = d.astype(np.float16)
    d.flat[0] = 0.0
    d.flat[-1] = np.float16(-(2.0**-24))  # the smallest subnormal, negative
    return Q2_0Weight.from_parts(q, d, name="q2")


def _launch(
    cuda: Any, name: str, x: np.ndarray, w: Any, m: int, rng: np.random.Generator, *extra: Any
) -> np.ndarray:
    xb = cp.asarray(x.view(np.uint16))
    buf, inner, init = guarded(cp, rng, x.shape[0], w.n)
    cuda.launch(name, xb, w, inner, *extra)
    return check_guard(buf, init, m, w.n)


@pytest.mark.parametrize("path", ["default", "gemv"])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_q2_batchm_matches_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, n: int, k: int, path: str
) -> None:
    """``default``: the routing as shipped; ``gemv``: no decode kernels, no tensor cores (the
    ``q2_0_gemv_r*`` kernels at every m)."""
    from metrale.cuda import mma, q2_0

    if path == "gemv":
        monkeypatch.setattr(q2_0, "DEC_VARIANT", "off")
        monkeypatch.setattr(mma, "ENABLED", False)
    host = q2_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    x = rows(fresh_rng, 64, k)
    single = np.stack([_launch(cuda, "q2_0_gemv_vec", x[i : i + 1], w, 1, fresh_rng)[0] for i in range(64)])
    bits_equal(single, project(x, host, "A16").view(np.uint16), "q2_0_gemv_vec rows")
    for m in M_VALUES:
        got = _launch(cuda, "q2_0_gemv_vec_batchm", x, w, m, fresh_rng, m)
        want = project(x[:m], host, "A16").view(np.uint16)
        bits_equal(got, want, f"q2_0_gemv_vec_batchm m={m}")
        bits_equal(got, single[:m], f"batch invariance m={m}")


def rebuild_q2_decode(monkeypatch: pytest.MonkeyPatch, ring_early: int) -> None:
    """``configs.Q2_0_DEC_RING_EARLY`` set for this test, kernels/q2_0_dec.cu rebuilt with it."""
    from metrale.cuda import q2_0, runtime

    rebuild_with(monkeypatch, (q2_0.DEC_FILE,), Q2_0_DEC_RING_EARLY=ring_early)
    assert f"#define Q2D_RING_EARLY {ring_early}" in runtime.source(q2_0.DEC_FILE)


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_q2_decode_ring_early(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, n: int, k: int
) -> None:
    """The decode kernels built with the other setting of ``configs.Q2_0_DEC_RING_EARLY`` than the
    routed one (their first weight loads before the PDL wait or after it): the routed entry
    points at m = 1..64 as above."""
    rebuild_q2_decode(monkeypatch, 1 - configs.Q2_0_DEC_RING_EARLY)
    test_q2_batchm_matches_reference(cuda, fresh_rng, monkeypatch, n, k, "default")


@pytest.mark.parametrize(("n", "k"), SHAPES[:2])
def test_q2_gemm_matches_reference(cuda: Any, fresh_rng: np.random.Generator, n: int, k: int) -> None:
    host = q2_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    for m in (1, 7, 64, 100):
        x = rows(fresh_rng, m, k)
        got = _launch(cuda, "q2_0_gemm", x, w, m, fresh_rng)
        bits_equal(got, project(x, host, "A16").view(np.uint16), f"q2_0_gemm m={m}")


def test_q2_reads_row_slices(cuda: Any, fresh_rng: np.random.Generator) -> None:
    """x may be the first rows of a bigger buffer; only out[:m] is written."""
    host = q2_weight(fresh_rng, 33, 256)
    w = cuda.upload(host)
    x = rows(fresh_rng, 10, 256, finite=True)
    xb = cp.asarray(x.view(np.uint16))
    buf, inner, init = guarded(cp, fresh_rng, 10, 33)
    cuda.launch("q2_0_gemv_vec_batchm", xb[:6], w, inner, 6)
    got = check_guard(buf, init, 6, 33)
    bits_equal(got, project(x[:6], host, "A16").view(np.uint16), "row slice")


#: Tensor-core shapes: B % 8 == 4 (``_u``) and == 0 (``_a``), every GEMM counter depth
#: (S8 = 2, 16, 96, 129 steps), N off the 16-column tile and the 128-column CTA.
MMA_SHAPES = [(37, 192), (50, 2048), (133, 12288), (9, 16512)]


@pytest.mark.parametrize(("n", "k"), MMA_SHAPES)
@pytest.mark.parametrize("block_dot", ["s8", "f16"])
def test_q2_tensor_cores_match_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, n: int, k: int, block_dot: str
) -> None:
    """The MMA kernels and the prefill GEMM (forced at every m, chunks of 48 rows) against the
    reference, with rows of every edge kind (NaN/Inf blocks, subnormals, zeros, ties, huge), in
    both block-dot families (q2_*: s8 limbs, q2h_*: the f16 MMA)."""
    from metrale.cuda import mma, tile

    monkeypatch.setattr(mma, "BLOCK_DOT", block_dot)
    monkeypatch.setattr(tile, "ENABLED", False)  # tests/gpu/test_cuda_nvfp4_tile.py tests that GEMM
    from tests.gpu import gen

    host = q2_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    kinds = [gen.row(fresh_rng, k, kind) for kind in gen.ROW_KINDS]
    x = np.concatenate([np.stack(kinds), rows(fresh_rng, 70 - len(kinds), k)])
    with np.errstate(all="ignore"):
        want = project(x, host, "A16").view(np.uint16)
    from metrale.cuda import q2_0

    monkeypatch.setattr(q2_0, "DEC_VARIANT", "off")  # m = 2, 3 on the tensor cores too
    monkeypatch.setattr(mma, "GEMM_ROWS", 48)
    for gemm in (False, True):
        monkeypatch.setattr(mma, "GEMM_MIN_ROWS", 2 if gemm else 1 << 30)
        monkeypatch.setattr(mma, "GEMM_ANY_GRID", gemm)
        for m in (2, 3, 9, 24, 33, 47, 49, 70):
            got = _launch(cuda, "q2_0_gemv_vec_batchm", x[:m], w, m, fresh_rng, m)
            bits_equal(got, want[:m], f"q2 tensor cores gemm={gemm} m={m} ({n}, {k})")


#: Decode kernels (kernels/q2_0_dec.cu): K = 64 k for k = 1, 2, 3 (one partly filled chunk), 31,
#: 32, 33 (around one chunk of 32 Q2 blocks), 67 (three chunks), 160, 2048 (64 chunks: the
#: counter's deepest level; the staged kernels fall back to L1 there); N off every column group
#: (4, 8 columns per warp); CTAs of 1 warp (small N), 2 or 4 (N = 2100 on 132 multiprocessors) and
#: 8 (N = 8451).
DEC_SHAPES = [
    (37, 64),
    (5, 128),
    (29, 192),
    (9, 1984),
    (13, 2048),
    (11, 2112),
    (70, 4288),
    (7, 10240),
    (3, 131072),
    (2100, 2112),
    (8451, 192),
]
DEC_VARIANTS = list(configs.Q2_0_DEC_VARIANTS)


def _dec_rows(rng: np.random.Generator, k: int) -> np.ndarray:
    """Nine rows: every edge kind of tests/gpu/gen.py (NaN/Inf blocks, subnormals, zeros, ties, huge,
    tiny) and Gaussian ones, so that m = 1, 2, 3 over consecutive slices meet each kind."""
    from tests.gpu import gen

    kinds = [gen.row(rng, k, kind) for kind in gen.ROW_KINDS]
    return np.concatenate([np.stack(kinds), rows(rng, 1, k, finite=True)])


@pytest.mark.parametrize("variant", DEC_VARIANTS)
@pytest.mark.parametrize(("n", "k"), DEC_SHAPES)
def test_q2_decode_kernels_match_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, variant: str, n: int, k: int
) -> None:
    """Every decode variant at m = 1, 2, 3 against the reference, bit for bit, and against its own
    single rows (the output of a row never depends on m)."""
    from metrale.cuda import q2_0

    monkeypatch.setattr(q2_0, "DEC_VARIANT", variant)
    host = q2_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    x = _dec_rows(fresh_rng, k)
    with np.errstate(all="ignore"):
        want = project(x, host, "A16").view(np.uint16)
    for m in (1, 2, 3):
        for r0 in range(0, x.shape[0] - m + 1, m):
            got = _launch(cuda, "q2_0_gemv_vec_batchm", x[r0 : r0 + m], w, m, fresh_rng, m)
            bits_equal(got, want[r0 : r0 + m], f"q2 decode {variant} m={m} rows {r0}.. ({n}, {k})")
    got = _launch(cuda, "q2_0_gemv_vec", x[:1], w, 1, fresh_rng)
    bits_equal(got, want[:1], f"q2_0_gemv_vec {variant} ({n}, {k})")


@pytest.mark.parametrize("variant", [v for v in DEC_VARIANTS if configs.Q2_0_DEC_VARIANTS[v][2]])
def test_q2_decode_persistent_grid(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    """More column groups than the capped grid's warps: every warp takes several groups (its
    loads of the next group's first chunk issued before the last chunk's arithmetic)."""
    from metrale.cuda import q2_0, runtime

    monkeypatch.setattr(q2_0, "DEC_VARIANT", variant)
    nc, _, per_sm, _ = configs.Q2_0_DEC_VARIANTS[variant]
    n = 3 * per_sm * runtime.sm_count() * q2_0.DEC_WARPS * nc + 5
    for k in (64, 2112):
        host = q2_weight(fresh_rng, n, k)
        w = cuda.upload(host)
        x = _dec_rows(fresh_rng, k)[[0, 4, 6]]  # Gaussian, NaN/Inf, ties
        with np.errstate(all="ignore"):
            want = project(x, host, "A16").view(np.uint16)
        for m in (1, 3):
            got = _launch(cuda, "q2_0_gemv_vec_batchm", x[:m], w, m, fresh_rng, m)
            bits_equal(got, want[:m], f"q2 decode {variant} persistent m={m} N={n} K={k}")


def test_q2_decode_rejects_unknown_variant(cuda: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from metrale.cuda import q2_0
    from metrale.errors import MetraleError

    monkeypatch.setattr(q2_0, "DEC_VARIANT", "c5x")
    w = cuda.upload(q2_weight(np.random.default_rng(0), 8, 64))
    x = cp.zeros((1, 64), dtype=cp.uint16)
    with pytest.raises(MetraleError, match="METRALE_Q2_DEC='c5x'"):
        cuda.launch("q2_0_gemv_vec", x, w, cp.zeros((1, 8), dtype=cp.uint16))


def test_q2_decode_back_to_back(cuda: Any, fresh_rng: np.random.Generator) -> None:
    """Programmatic launches (sm_90+): 24 projections queued without a host synchronisation, each
    prologue reusing the activation buffer the previous GEMV may still read (a kernel touching
    memory before its pdl_wait would race); every output must be the reference's."""
    from metrale.cuda import pdl

    host = q2_weight(fresh_rng, 300, 2112)
    w = cuda.upload(host)
    x = rows(fresh_rng, 8, 2112)
    with np.errstate(all="ignore"):
        want = project(x, host, "A16").view(np.uint16)
    xd = cp.asarray(x.view(np.uint16))
    outs = cp.full((3, 8, 300), 0xDEAD, dtype=cp.uint16)
    cp.cuda.get_current_stream().synchronize()
    pdl.entry_start()
    for r in range(3):
        for i in range(8):
            cuda.launch("q2_0_gemv_vec_batchm", xd[i : i + 1], w, outs[r, i : i + 1], 1)
    got = outs.get()
    for r in range(3):
        bits_equal(got[r], want, f"back-to-back round {r}")
