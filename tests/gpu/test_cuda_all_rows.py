"""The ``w4a4-all`` tier on the CUDA backend (arithmetic.md § tier): a layer declaring A4 runs
prefill-size row counts A4 (``w4a4_gemv_small_m`` on the tensor-core A4 GEMM from
GEMM_MIN_ROWS rows) with the reference's bits and launch log, and row r of every call has the
one-row call's bits."""

from __future__ import annotations

import numpy as np
import pytest

from metrale.backend import get_backend
from metrale.cuda import mma
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.layer import DenseFfnLayer, FfnActivation, FfnWeights
from tests.gpu import gen

cp = pytest.importorskip("cupy")

#: (hidden, inter, row counts): 5 and 13 blocks (the ``u`` kernels) up to 2100 rows, past one
#: GEMM chunk (GEMM_ROWS = 2048); 16 and 32 blocks (the ``a`` kernels).
CASES = ((80, 208, (65, 200, 1030, 2100)), (256, 512, (65, 200, 1030)))


def _layers(rng: np.random.Generator, hidden: int, inter: int) -> tuple[DenseFfnLayer, DenseFfnLayer]:
    cfg = FfnConfig(hidden, inter)
    ws = FfnWeights(
        gen.nvfp4(rng, inter, hidden, name="gate"),
        gen.nvfp4(rng, inter, hidden, name="up"),
        gen.nvfp4(rng, hidden, inter, name="down"),
    )
    kw = {"weights": ws, "activation": FfnActivation.SiLU, "weight_quant": "w4a4-all"}
    return (
        DenseFfnLayer(cfg, backend=get_backend("reference"), **kw),  # type: ignore[arg-type]
        DenseFfnLayer(cfg, backend=get_backend("cuda"), **kw),  # type: ignore[arg-type]
    )


def _prefill(layer: DenseFfnLayer, x: np.ndarray) -> tuple[np.ndarray, list[str]]:
    m = x.shape[0]
    ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=m)
    layer.backend.launches.clear()
    layer.forward_prefill(layer.backend.rows(x, layer.config.hidden_size, name="x"), m, ctx)
    return layer.backend.to_numpy(ctx.buffers.output()[:m]).view(np.uint16), list(layer.backend.launches)


@pytest.mark.parametrize(("hidden", "inter", "row_counts"), CASES, ids=["80x208", "256x512"])
def test_all_rows_prefill_matches_reference(
    fresh_rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
    hidden: int,
    inter: int,
    row_counts: tuple[int, ...],
) -> None:
    """forward_prefill and layer(x) at m = 65, 200, 1030 (2100), NaN/Inf rows included: the
    reference's bits and launches (A4 only), with the GEMM where its grid fills the GPU and with
    GEMM_ANY_GRID (the A4 GEMM at these small N too)."""
    ref, gpu = _layers(fresh_rng, hidden, inter)
    x = gen.rows(fresh_rng, max(row_counts), hidden)
    for m in row_counts:
        with np.errstate(all="ignore"):
            want, ref_launches = _prefill(ref, x[:m])
        assert ref_launches.count("w4a4_gemv_small_m") == 3, ref_launches
        assert not [k for k in ref_launches if k.startswith("w4a16")], ref_launches
        for any_grid in (False, True):
            monkeypatch.setattr(mma, "GEMM_ANY_GRID", any_grid)
            what = f"m={m} shape={hidden}x{inter} any_grid={any_grid}"
            got, gpu_launches = _prefill(gpu, x[:m])
            assert gpu_launches == ref_launches, f"{what}: launches"
            gen.bits_equal(got, want, f"forward_prefill {what}")
            gen.bits_equal(gpu(x[:m]).view(np.uint16), want, f"layer(x) {what}")


def test_all_rows_prefill_rows_equal_one_row_decode(fresh_rng: np.random.Generator) -> None:
    """On the GPU, each row of a 1030-row prefill equals that row's one-row decode call."""
    _, gpu = _layers(fresh_rng, 256, 512)
    x = gen.rows(fresh_rng, 1030, 256)
    got = gpu(x).view(np.uint16)
    ctx = ForwardContext(gpu.config, backend=gpu.backend, max_rows=1)
    for r in fresh_rng.choice(1030, size=48, replace=False):
        gpu.forward(gpu.backend.rows(x[r : r + 1], gpu.config.hidden_size, name="x"), ctx)
        one = gpu.backend.to_numpy(ctx.buffers.output()[:1]).view(np.uint16)
        gen.bits_equal(one, got[r : r + 1], f"row {r}")
