"""Q2_0 × A16 on the GPU against the numpy reference, bit for bit (arithmetic.md § projection): the three
Q2 entry points, m = 1..64, K whose block count is no power of two, N off every tile, named
activation edge cases, guard bands, batch invariance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.reference.formats import Q2_0Weight
from metrale.reference.projection import project
from tests.gpu.gen import bits_equal, check_guard, guarded, rows

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


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_q2_batchm_matches_reference(cuda: Any, fresh_rng: np.random.Generator, n: int, k: int) -> None:
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
def test_q2_tensor_cores_match_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, n: int, k: int
) -> None:
    """The MMA kernels and the prefill GEMM (forced at every m, chunks of 48 rows) against the
    reference, with rows of every edge kind (NaN/Inf blocks, subnormals, zeros, ties, huge)."""
    from metrale.cuda import mma
    from tests.gpu import gen

    host = q2_weight(fresh_rng, n, k)
    w = cuda.upload(host)
    kinds = [gen.row(fresh_rng, k, kind) for kind in gen.ROW_KINDS]
    x = np.concatenate([np.stack(kinds), rows(fresh_rng, 70 - len(kinds), k)])
    with np.errstate(all="ignore"):
        want = project(x, host, "A16").view(np.uint16)
    monkeypatch.setattr(mma, "GEMM_ROWS", 48)
    for gemm in (False, True):
        monkeypatch.setattr(mma, "GEMM_MIN_ROWS", 2 if gemm else 1 << 30)
        monkeypatch.setattr(mma, "GEMM_ANY_GRID", gemm)
        for m in (2, 3, 9, 24, 33, 47, 49, 70):
            got = _launch(cuda, "q2_0_gemv_vec_batchm", x[:m], w, m, fresh_rng, m)
            bits_equal(got, want[:m], f"q2 tensor cores gemm={gemm} m={m} ({n}, {k})")
