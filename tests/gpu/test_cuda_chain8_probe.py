"""The fast NVFP4 decode kernels on the chain with 8-block parts (nvfp4.cuh ``nvfp4_fast_body``
CH8: ``nvfp4_a16f8_r{R}``, ``nvfp4_a4f8_r{R}``; docs/chain-revision.md, "The part size"), a probe
of that part size, against ``chain.project_chain`` with ``chain.PART_BLOCKS`` = 8, bit for bit:
one and two rows, gate and up in one launch, K of one item to twelve and a partial last item,
rows of every edge kind, extreme block exponents, guard bands. The reference at 8-block parts
against the oracle, and that the part size changes bits: tests/test_chain.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.cuda import configs
from tests.gpu import gen
from tests.gpu.test_cuda_chain_gemv import run_a4
from tests.gpu.test_cuda_chain_tile import ref, run_nvfp4, run_nvfp4_dual
from tests.gpu.test_cuda_nvfp4_tile import window_rows

cp = pytest.importorskip("cupy")

ROWS = configs.NVFP4_CH8_ROWS


@pytest.fixture
def chain8(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The 8-block chain probe kernels at their rows, every other path off (none gives these
    bits, so a miss fails), the reference on 8-block parts; returns the kernels launched."""
    from metrale.cuda import mma, nvfp4, tile
    from metrale.reference import chain

    monkeypatch.setattr(tile, "CHAIN", False)
    monkeypatch.setattr(tile, "ENABLED", False)
    monkeypatch.setattr(mma, "ENABLED", False)
    monkeypatch.setattr(chain, "PART_BLOCKS", 8)
    names: list[str] = []

    def fast_name(mode: str, r: int) -> str:
        assert r in ROWS, f"{mode} R={r}: no 8-block chain probe kernel"
        names.append(f"nvfp4_{mode}f8_r{r}")
        return names[-1]

    def no_generic(*a: Any) -> int:
        raise AssertionError(f"the generic (tree) kernels ran: {a}")

    monkeypatch.setattr(nvfp4, "_fast_name", fast_name)
    monkeypatch.setattr(nvfp4, "_rows_per_pass", no_generic)
    return names


#: (N, K): one item (K = 4096, Qwen3-8B gate / up), a partial last item (K = 5120: 320 blocks,
#: 8 of the second item's 32 parts), three items (its down), one chunk (K = 1024), 14 (Llama).
SHAPES = ((130, 4096), (37, 5120), (45, 12288), (70, 1024), (20, 14336))


@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
def test_chain8_a16(cuda: Any, fresh_rng: np.random.Generator, chain8: list[str], shape: tuple) -> None:
    n, k = shape
    w, w1 = gen.nvfp4(fresh_rng, n, k), gen.nvfp4(fresh_rng, n, k, name="up")
    dw, dw1 = cuda.upload(w), cuda.upload(w1)
    x = np.concatenate([window_rows(fresh_rng, 2, k, tuple(range(-30, 31))), gen.rows(fresh_rng, 2, k)])
    x = x[fresh_rng.permutation(len(x))]
    want, want1 = ref(x, w), ref(x, w1)
    for m in ROWS:
        gen.bits_equal(run_nvfp4(cuda, fresh_rng, x[:m], dw, n), want[:m], f"chain8 m={m} {shape}")
        got, got1 = run_nvfp4_dual(fresh_rng, x[:m], dw, dw1, n)
        gen.bits_equal(got, want[:m], f"chain8 dual m={m} gate {shape}")
        gen.bits_equal(got1, want1[:m], f"chain8 dual m={m} up {shape}")
    assert {f"nvfp4_a16f8_r{r}" for r in ROWS} <= set(chain8), chain8


@pytest.mark.parametrize("shape", SHAPES[:3], ids=[f"N{n}-K{k}" for n, k in SHAPES[:3]])
def test_chain8_a4(cuda: Any, fresh_rng: np.random.Generator, chain8: list[str], shape: tuple) -> None:
    w = gen.nvfp4(fresh_rng, *shape)
    dw = cuda.upload(w)
    # blocks far apart (the chains round: tests/test_chain.py), then rows of every edge kind
    x = np.concatenate([window_rows(fresh_rng, 2, w.k, tuple(range(-12, 13))), gen.rows(fresh_rng, 2, w.k)])
    want = ref(x, w, "A4")
    for lo in (0, 2):
        for m in ROWS:
            got = run_a4(fresh_rng, x[lo : lo + m], w, dw)
            gen.bits_equal(got, want[lo : lo + m], f"chain8 A4 rows {lo}..{lo + m - 1} {shape}")
    assert {f"nvfp4_a4f8_r{r}" for r in ROWS} <= set(chain8), chain8


@pytest.mark.parametrize("exp", [-133, -110, 100, 127])
def test_chain8_extreme_blocks(
    cuda: Any, fresh_rng: np.random.Generator, chain8: list[str], exp: int
) -> None:
    """Blocks whose exponent makes P_b subnormal or the chain overflow, beside ordinary ones."""
    w = gen.nvfp4(fresh_rng, 66, 4096)
    dw = cuda.upload(w)
    x = window_rows(fresh_rng, 2, 4096, (-20, 0, 20))
    for r, b in enumerate((3, 130)):
        x[r, 16 * b : 16 * b + 16] = window_rows(fresh_rng, 1, 16, (exp,))[0]
    want = ref(x, w)
    for m in ROWS:
        gen.bits_equal(run_nvfp4(cuda, fresh_rng, x[:m], dw, 66), want[:m], f"chain8 E={exp} m={m}")
