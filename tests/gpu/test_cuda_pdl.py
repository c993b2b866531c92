"""Programmatic dependent launch (metrale/cuda/pdl.py) on the FFN's fast A16 path, the W8A8 arm,
the W4A4 decode rows and the NVFP4 tensor-core paths: every launch of an entry point after its
first is programmatic on sm_90+, and the bits are the reference's with PDL on, off, and over
back-to-back calls without a host synchronisation in between (a kernel that read before its
pdl_wait would race)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.backend import get_backend
from metrale.cuda import pdl, runtime
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.layer import DenseFfnLayer, FfnActivation, FfnWeights
from tests.gpu import gen

cp = pytest.importorskip("cupy")

# K = 1024 and 5120: B = 64 and 320 blocks (B % 64 == 0: the fast kernels; 320 = one full and
# one partly filled 256-block item); N = 5120 gate/up columns: more than one per warp of the grid
# (16 x 132 on the H200).
HIDDEN, INTER = 1024, 5120
ENTRIES = {1: "forward", 2: "forward_k2", 3: "forward_k3"}
#: Programmatic launches per entry point: m = 1 up, act_mul, down; m = 2, 3 act_mul, down
#: (gate and up are one dual launch).
CHAINED = {1: 3, 2: 2, 3: 2}


def _pdl_expected() -> bool:
    props = runtime.device_props(runtime.device_id())
    return pdl.ENABLED and int(props["major"]) >= 9 and pdl._driver() is not None


def _layers(rng: np.random.Generator, act: FfnActivation) -> tuple[DenseFfnLayer, DenseFfnLayer]:
    cfg = FfnConfig(HIDDEN, INTER)
    ws = FfnWeights(
        gen.nvfp4(rng, INTER, HIDDEN, a4=False, name="gate"),
        gen.nvfp4(rng, INTER, HIDDEN, a4=False, name="up"),
        gen.nvfp4(rng, HIDDEN, INTER, a4=False, name="down"),
    )
    ref = DenseFfnLayer(cfg, weights=ws, activation=act, backend=get_backend("reference"))
    gpu = DenseFfnLayer(cfg, weights=ws, activation=act, backend=get_backend("cuda"))
    return ref, gpu


def _forward(layer: DenseFfnLayer, ctx: ForwardContext, x: Any, m: int) -> None:
    getattr(layer, ENTRIES[m])(x, ctx)


def _reference(ref: DenseFfnLayer, x: np.ndarray) -> np.ndarray:
    m = x.shape[0]
    ctx = ForwardContext(ref.config, backend=ref.backend, max_rows=m)
    with np.errstate(all="ignore"):
        _forward(ref, ctx, ref.backend.rows(x, HIDDEN), m)
    return np.asarray(ctx.buffers.output()[:m]).view(np.uint16)


@pytest.mark.parametrize("act", [FfnActivation.SiLU, FfnActivation.GELU])
def test_pdl_chain_kinds_and_bits(
    fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, act: Any
) -> None:
    ref, gpu = _layers(fresh_rng, act)
    x = gen.rows(fresh_rng, 3, HIDDEN)
    for m in (1, 2, 3):
        want = _reference(ref, x[:m])
        for enabled in (True, False):
            monkeypatch.setattr(pdl, "ENABLED", enabled)
            ctx = ForwardContext(gpu.config, backend=gpu.backend, max_rows=m)
            xd = gpu.backend.rows(x[:m], HIDDEN)
            before = dict(pdl.counts)
            _forward(gpu, ctx, xd, m)
            got = ctx.buffers.output()[:m].get()
            programmatic = pdl.counts["programmatic"] - before["programmatic"]
            plain = pdl.counts["plain"] - before["plain"]
            chained = CHAINED[m] if enabled and _pdl_expected() else 0
            assert (programmatic, plain) == (chained, CHAINED[m] + 1 - chained), f"m={m} pdl={enabled}"
            gen.bits_equal(got, want, f"{ENTRIES[m]} pdl={enabled}")


def test_pdl_back_to_back_calls(fresh_rng: np.random.Generator) -> None:
    """Rounds over 8 inputs at m = 1 with no synchronisation: each FFN's outputs are copied to
    their own slot as soon as the FFN is queued; every slot must hold the reference's bits."""
    ref, gpu = _layers(fresh_rng, FfnActivation.SiLU)
    n_in, rounds = 8, 4
    x = gen.rows(fresh_rng, n_in, HIDDEN)
    want = np.stack([_reference(ref, x[i : i + 1])[0] for i in range(n_in)])
    be = gpu.backend
    ctx = ForwardContext(gpu.config, backend=be, max_rows=1)
    xd = be.rows(x, HIDDEN)
    slots = cp.full((rounds, n_in, HIDDEN), 0xDEAD, dtype=cp.uint16)
    hs = cp.full((rounds, n_in, INTER), 0xDEAD, dtype=cp.uint16)
    cp.cuda.get_current_stream().synchronize()
    for r in range(rounds):
        for i in range(n_in):
            _forward(gpu, ctx, xd[i : i + 1], 1)
            slots[r, i] = ctx.buffers.output()[0]
            hs[r, i] = ctx.buffers.gate_out()[0]
    got, h = slots.get(), hs.get()
    for r in range(rounds):
        gen.bits_equal(got[r], want, f"round {r}")
        gen.bits_equal(h[r], h[0], f"round {r}: h")


def test_pdl_w8a8_arm_back_to_back(fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The W8A8 arm (quantize, gate and up in one launch or two, SiLU-quantize in one kernel or
    two, down: every kernel PDL-capable) at m = 1, 3 (split-K wgmma: a shared workspace the last
    CTA clears; the cluster SiLU-quantize), 40 (stream-K, the slice pair) and 100 (GEMM): PDL on
    and off, and 3 rounds queued without synchronisation, each FFN's output copied to its own
    slot: every slot holds the reference's bits; where PDL is available every launch of an FFN
    after its first is programmatic (how many launches the arm makes depends on the routing)."""
    import layer_cases as lc

    parts = lc.make_parts("w8a8_only", hidden=1024, inter=2080, seed=int(fresh_rng.integers(1 << 30)))
    ref, gpu = parts.layer(get_backend("reference")), parts.layer(get_backend("cuda"))
    x = gen.rows(fresh_rng, 100, 1024)
    for m in (1, 3, 40, 100):
        rctx = ForwardContext(ref.config, backend=ref.backend, max_rows=m)
        with np.errstate(all="ignore"):
            ref.forward_prefill(ref.backend.rows(x[:m], 1024), m, rctx)
        want = np.asarray(rctx.buffers.output()[:m]).view(np.uint16)
        for enabled in (True, False):
            monkeypatch.setattr(pdl, "ENABLED", enabled)
            ctx = ForwardContext(gpu.config, backend=gpu.backend, max_rows=m)
            xd = gpu.backend.rows(x[:m], 1024)
            slots = cp.zeros((3, m, 1024), dtype=cp.uint16)
            before = dict(pdl.counts)
            for r in range(3):
                gpu.forward_prefill(xd, m, ctx)
                slots[r] = ctx.buffers.output()[:m]
            got = slots.get()
            if enabled and _pdl_expected():
                prog = pdl.counts["programmatic"] - before["programmatic"]
                total = prog + pdl.counts["plain"] - before["plain"]
                # at least quantize, gate and up, SiLU-quantize and down per FFN; at most its
                # first launch plain
                assert total >= 3 * 4 and prog >= total - 3, f"m={m}: {prog} of {total} programmatic"
            for r in range(3):
                gen.bits_equal(got[r], want, f"w8a8 m={m} pdl={enabled} round {r}")


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_pdl_w4a4_back_to_back(cuda: Any, fresh_rng: np.random.Generator, m: int) -> None:
    """w4a4_quantize -> the fast A4 kernel nvfp4_a4f_r{m} (both PDL-capable) over 8 inputs and 3
    rounds without synchronisation, each output copied to its own slot as soon as it is queued:
    every slot holds the reference's bits; every launch after the first is programmatic where
    PDL is available (a kernel that read before its pdl_wait would race its producer)."""
    from metrale.reference.activations import quantize_a4
    from metrale.reference.projection import project

    n, k, n_in, rounds = INTER, HIDDEN, 8, 3
    w = gen.nvfp4(fresh_rng, n, k, a4=True)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, n_in + m, k)
    with np.errstate(all="ignore"):
        want = np.stack(
            [project(None, w, "A4", codes=quantize_a4(x[i : i + m], w.input_scale)) for i in range(n_in)]
        ).view(np.uint16)
    xd = cp.asarray(np.ascontiguousarray(x).view(np.uint16))
    out = cp.empty((m, n), dtype=cp.uint16)
    slots = cp.full((rounds, n_in, m, n), 0xDEAD, dtype=cp.uint16)
    cp.cuda.get_current_stream().synchronize()
    pdl.entry_start()
    before = dict(pdl.counts)
    for r in range(rounds):
        for i in range(n_in):
            dc = cuda.launch("w4a4_quantize", xd[i : i + m], w.input_scale)
            cuda.launch("w4a4_gemv_small_m", dc, dw, out)
            slots[r, i] = out
    got = slots.get()
    launched = pdl.counts["programmatic"] - before["programmatic"] + pdl.counts["plain"] - before["plain"]
    assert launched == 2 * rounds * n_in, "w4a4_quantize or nvfp4_a4f went around pdl.launch"
    if _pdl_expected():
        assert pdl.counts["programmatic"] - before["programmatic"] == launched - 1
    for r in range(rounds):
        gen.bits_equal(got[r], want, f"w4a4 m={m} round {r}")


@pytest.mark.parametrize("path", ["mma", "tile", "gemm"])
def test_pdl_tensor_core_paths_back_to_back(
    fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """NVFP4 × A16 on the tensor-core paths, whose prologues, kernels and ``mma_finish`` are
    PDL-capable: the K-split MMA kernels (m = 8), the tiled GEMM with K split into parts (m = 40)
    and mma_gemm.cuh's GEMM with the tile off (m = 40). PDL on and off, 3 rounds queued without
    synchronisation, each output copied to its own slot: every slot holds the reference's bits,
    and with PDL every launch but each FFN's first is programmatic."""
    from metrale.cuda import mma, tile

    m = 8 if path == "mma" else 40
    if path == "gemm":
        monkeypatch.setattr(tile, "ENABLED", False)
        monkeypatch.setattr(mma, "GEMM_ANY_GRID", True)
    ref, gpu = _layers(fresh_rng, FfnActivation.SiLU)
    x = gen.rows(fresh_rng, m, HIDDEN)
    rctx = ForwardContext(ref.config, backend=ref.backend, max_rows=m)
    with np.errstate(all="ignore"):
        ref.forward_prefill(ref.backend.rows(x, HIDDEN), m, rctx)
    want = np.asarray(rctx.buffers.output()[:m]).view(np.uint16)
    rounds = 3
    for enabled in (True, False):
        monkeypatch.setattr(pdl, "ENABLED", enabled)
        ctx = ForwardContext(gpu.config, backend=gpu.backend, max_rows=m)
        xd = gpu.backend.rows(x, HIDDEN)
        slots = cp.full((rounds, m, HIDDEN), 0xDEAD, dtype=cp.uint16)
        cp.cuda.get_current_stream().synchronize()
        before = dict(pdl.counts)
        for r in range(rounds):
            gpu.forward_prefill(xd, m, ctx)
            slots[r] = ctx.buffers.output()[:m]
        got = slots.get()
        programmatic = pdl.counts["programmatic"] - before["programmatic"]
        plain = pdl.counts["plain"] - before["plain"]
        assert programmatic + plain >= rounds * 5, f"{path}: launches went around pdl.launch"
        if enabled and _pdl_expected():
            assert plain == rounds, f"{path}: {plain} plain launches in {rounds} FFNs"
        else:
            assert programmatic == 0
        for r in range(rounds):
            gen.bits_equal(got[r], want, f"{path} m={m} pdl={enabled} round {r}")
