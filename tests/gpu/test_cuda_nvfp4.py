"""CUDA NVFP4, act_mul and LoRA kernels against the numpy reference, bit for bit (arithmetic.md § rule).

Fresh seeds every session (conftest.SESSION_SEED); N not a multiple of any tile, block counts
that are not powers of two (3, 65, 129, 2113), m = 1 .. 64; outputs written into strided views
of buffers whose guard bands (random bits) must survive.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.errors import MetraleError
from metrale.reference.activations import quantize_a4
from metrale.reference.elements import BF16
from metrale.reference.lora import LoraAdapter, lora_expand, lora_shrink
from metrale.reference.projection import project
from metrale.reference.tables import act_mul
from tests.gpu import gen

cp = pytest.importorskip("cupy")

#: (N, K): block counts 3, 65, 129 (odd: 8-byte loads), 1 and 2113 (> 32 chunks: two slots of
#: the tree) on the generic kernels; 64, 2112, 128, 256 and 2048 (B % 64 == 0: the fast kernels,
#: 64 and 2112 with a partly filled 256-block work item).
SHAPES = (
    (37, 48),
    (100, 1040),
    (41, 2064),
    (7, 16),
    (29, 1024),
    (5, 33808),
    (5, 33792),
    (37, 2048),
    (130, 4096),
    (3, 32768),
)
TIER_M = {4: (1, 3, 4), 8: (5, 8), 16: (9, 16), 32: (17, 23, 32)}
FIXED = {"w4a16_gemv": 1, "w4a16_gemv_batch2": 2, "w4a16_gemv_batch3": 3}


def ref(x: np.ndarray, w: Any, mode: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return project(x, w, mode).view(np.uint16)


def dev_rows(x: np.ndarray) -> Any:
    return cp.asarray(np.ascontiguousarray(x).view(np.uint16))


@pytest.mark.parametrize("shape", SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
def test_w4a16_every_kernel_matches_reference(
    cuda: Any, fresh_rng: np.random.Generator, shape: tuple
) -> None:
    n, k = shape
    big = k > 20000
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    mmax = 8 if big else 64
    x = gen.rows(fresh_rng, mmax, k)
    want = ref(x, w, "A16")  # the reference is row-wise: row r of any call is want[r]
    xd = dev_rows(x)
    # fixed-row kernels
    for name, rows in FIXED.items():
        buf, view, init = gen.guarded(cp, fresh_rng, rows, n)
        cuda.launch(name, xd[:rows], dw, view)
        gen.bits_equal(gen.check_guard(buf, init, rows, n), want[:rows], f"{name} {shape}")
    for rows in (2, 3):
        b0, v0, i0 = gen.guarded(cp, fresh_rng, rows, n)
        w1 = gen.nvfp4(fresh_rng, n, k, name="up")
        b1, v1, i1 = gen.guarded(cp, fresh_rng, rows, n)
        cuda.launch(f"w4a16_gemv_dual_batch{rows}", xd[:rows], dw, v0, cuda.upload(w1), v1)
        gen.bits_equal(gen.check_guard(b0, i0, rows, n), want[:rows], f"dual{rows} gate {shape}")
        gen.bits_equal(gen.check_guard(b1, i1, rows, n), ref(x[:rows], w1, "A16"), f"dual{rows} up {shape}")
    # tiers write only their first T rows, from an output buffer with more rows
    for t, ms in TIER_M.items():
        for m in ms:
            if m > mmax:
                continue
            buf, view, init = gen.guarded(cp, fresh_rng, m + 2, n)
            cuda.launch(f"w4a16_gemv_batch{t}", xd[:m], dw, view, m)
            gen.bits_equal(gen.check_guard(buf, init, min(m, t), n), want[:m], f"batch{t} m={m} {shape}")
    # prefill GEMM, every m up to mmax (plus one past 64 when cheap)
    ms = range(1, mmax + 1) if n * k <= 200_000 else (1, 2, 5, 8, mmax)
    for m in ms:
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch("w4a16_gemm", xd[:m], dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"gemm m={m} {shape}")


@pytest.mark.parametrize(
    "shape", [(5000, 1024), (4500, 2048), (2113, 3072)], ids=lambda s: f"N{s[0]}-K{s[1]}"
)
def test_fast_gemv_many_columns_per_warp(cuda: Any, fresh_rng: np.random.Generator, shape: tuple) -> None:
    """N past the grid's warps (2112 on the H200): every warp's ring crosses several columns."""
    n, k = shape
    w0, w1 = gen.nvfp4(fresh_rng, n, k, name="gate"), gen.nvfp4(fresh_rng, n, k, name="up")
    d0, d1 = cuda.upload(w0), cuda.upload(w1)
    x = gen.rows(fresh_rng, 3, k)
    want0, want1 = ref(x, w0, "A16"), ref(x, w1, "A16")
    xd = dev_rows(x)
    for m, name in ((1, "w4a16_gemv"), (2, "w4a16_gemv_batch2"), (3, "w4a16_gemv_batch3")):
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch(name, xd[:m], d0, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want0[:m], f"{name} {shape}")
    for m in (2, 3):
        b0, v0, i0 = gen.guarded(cp, fresh_rng, m, n)
        b1, v1, i1 = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch(f"w4a16_gemv_dual_batch{m}", xd[:m], d0, v0, d1, v1)
        gen.bits_equal(gen.check_guard(b0, i0, m, n), want0[:m], f"dual{m} gate {shape}")
        gen.bits_equal(gen.check_guard(b1, i1, m, n), want1[:m], f"dual{m} up {shape}")


@pytest.mark.parametrize("shape", [(45, 2048), (33, 4096)], ids=["N45-K2048", "N33-K4096"])
def test_w4a16_generic_and_fast_kernels_agree(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, shape: tuple
) -> None:
    """Where the fast kernels apply (B % 64 == 0), the generic ones give the same bits too."""
    from metrale.cuda import nvfp4

    n, k = shape
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, 40, k)
    want = ref(x, w, "A16")
    for fast in (True, False):
        monkeypatch.setattr(nvfp4, "FAST_ENABLED", fast)
        for m in (1, 2, 3, 4, 9, 40):
            out = cp.empty((m, n), dtype=cp.uint16)
            cuda.launch("w4a16_gemm", dev_rows(x[:m]), dw, out)
            gen.bits_equal(out.get(), want[:m], f"gemm fast={fast} m={m} {shape}")


def test_w4a16_gemm_past_64_rows(cuda: Any, fresh_rng: np.random.Generator) -> None:
    n, k = 29, 1040
    w = gen.nvfp4(fresh_rng, n, k)
    x = gen.rows(fresh_rng, 131, k)
    buf, view, init = gen.guarded(cp, fresh_rng, 131, n)
    cuda.launch("w4a16_gemm", dev_rows(x), cuda.upload(w), view)
    gen.bits_equal(gen.check_guard(buf, init, 131, n), ref(x, w, "A16"), "gemm m=131")


@pytest.mark.parametrize("shape", SHAPES[:5], ids=[f"N{n}-K{k}" for n, k in SHAPES[:5]])
def test_w4a4_quantize_and_gemv_match_reference(
    cuda: Any, fresh_rng: np.random.Generator, shape: tuple
) -> None:
    n, k = shape
    w = gen.nvfp4(fresh_rng, n, k, a4=True)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, 64, k)
    xd = dev_rows(x)
    for m in (1, 2, 3, 4, 5, 17, 33, 64):
        with np.errstate(all="ignore"):
            rc = quantize_a4(x[:m], w.input_scale)
            want = project(None, w, "A4", codes=rc).view(np.uint16)
        dc = cuda.launch("w4a4_quantize", xd[:m], w.input_scale)
        hc = dc.to_host()
        gen.bits_equal(hc.codes.view(np.uint8), rc.codes.view(np.uint8), f"a4 codes m={m}")
        gen.bits_equal(hc.scales.view(np.uint8), rc.scales.view(np.uint8), f"a4 scales m={m}")
        assert np.array_equal(hc.finite, rc.finite), f"a4 finite m={m}"
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        cuda.launch("w4a4_gemv_small_m", dc, dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want, f"w4a4 gemv m={m} {shape}")


#: (N, K) of the fast A4 kernels (B % 64 == 0): B = 64, 256, 768 (the 12288-wide down
#: projection), 128 and 320 (a partly filled 256-block item); N = 37, 203 (not multiples of the
#: 16 warps), 4500 (more columns than the grid's warps: rings across columns).
A4_FAST_SHAPES = ((37, 1024), (203, 4096), (45, 12288), (203, 2048), (29, 5120), (4500, 1024))


def _a4_paths(nvfp4: Any, mma_mod: Any, monkeypatch: pytest.MonkeyPatch, path: str) -> str | None:
    """Route w4a4_gemv_small_m to ``path`` (fast, mma, generic); the fast kernel name expected."""
    monkeypatch.setattr(nvfp4, "A4_FAST_MAX_ROWS", 4 if path == "fast" else 0)
    monkeypatch.setattr(mma_mod, "ENABLED", path != "generic")
    return "nvfp4_a4f_r" if path == "fast" else None


@pytest.mark.parametrize("shape", A4_FAST_SHAPES, ids=[f"N{n}-K{k}" for n, k in A4_FAST_SHAPES])
def test_w4a4_fast_kernels_match_reference(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, shape: tuple
) -> None:
    """nvfp4_a4f_r{1,2,3} against the reference's A4 projection of the same codes, and the
    tensor-core and generic paths on the same codes: the same bits. Rows of every kind (±0,
    subnormal, NaN/Inf blocks: afac NaN, near-bf16-max: saturation to Inf), every weight nibble
    and finite scale code (gen.nvfp4); outputs into a guarded row slice (ldo != N)."""
    from metrale.cuda import mma as mma_mod
    from metrale.cuda import nvfp4, runtime

    w, dw, x, want = _a4_case(cuda, fresh_rng, shape, 1)
    asked = gen.kernels_fetched(monkeypatch, runtime)
    for path in ("fast", "mma", "generic"):
        fast = _a4_paths(nvfp4, mma_mod, monkeypatch, path)
        _a4_rows_match(cuda, fresh_rng, x, w, dw, want, asked, fast, f"w4a4 {path} {shape}")


def _a4_case(
    cuda: Any, rng: np.random.Generator, shape: tuple[int, int], gauss: int
) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """An A4 NVFP4 weight of ``shape`` (host, device), rows of every kind then ``gauss`` Gaussian
    ones, and the reference's A4 projection of their codes (bits)."""
    n, k = shape
    w = gen.nvfp4(rng, n, k, a4=True)
    kinds = np.stack([gen.row(rng, k, kind) for kind in gen.ROW_KINDS])
    x = np.concatenate([kinds, gen.rows(rng, gauss, k)])
    with np.errstate(all="ignore"):
        want = project(None, w, "A4", codes=quantize_a4(x, w.input_scale)).view(np.uint16)
    return w, cuda.upload(w), x, want


def _a4_rows_match(
    cuda: Any,
    rng: np.random.Generator,
    x: np.ndarray,
    w: Any,
    dw: Any,
    want: np.ndarray,
    asked: list[str],
    fast: str | None,
    what: str,
) -> None:
    """w4a4_quantize + w4a4_gemv_small_m over groups of m = 1..4 of the rows x into guarded
    outputs, bit for bit against ``want``; the fast kernel ``fast``{m} fetched exactly when
    ``fast`` is given."""
    xd = dev_rows(x)
    for m in (1, 2, 3, 4):
        for r0 in range(0, x.shape[0] - m + 1, m):
            dc = cuda.launch("w4a4_quantize", xd[r0 : r0 + m], w.input_scale)
            buf, view, init = gen.guarded(cp, rng, m, w.n)
            asked.clear()
            cuda.launch("w4a4_gemv_small_m", dc, dw, view)
            assert (f"{fast}{m}" in asked) == (fast is not None), (what, m, asked)
            gen.bits_equal(gen.check_guard(buf, init, m, w.n), want[r0 : r0 + m], f"{what} m={m} rows {r0}..")


@pytest.mark.parametrize("shape", [(5000, 1024), (45, 12288)], ids=["N5000-K1024", "N45-K12288"])
def test_fast_kernels_ring_early(
    cuda: Any, fresh_rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, shape: tuple
) -> None:
    """The tree's fast decode kernels built with the other setting of
    ``configs.NVFP4_FAST_RING_EARLY`` than the routed one for every kernel (their rings' first
    items copied before the PDL wait or after it): A16 single rows, batches of 2 and 3 and the dual
    launches (``test_fast_gemv_many_columns_per_warp``), and A4 on the fast path at 1..4 rows
    (its records' group waited for behind the ring's)."""
    from metrale.cuda import configs, nvfp4, runtime
    from metrale.cuda import mma as mma_mod

    other = configs.NVFP4_FAST_KERNELS - configs.NVFP4_FAST_RING_EARLY
    gen.rebuild_with(monkeypatch, (nvfp4.A16_FILE, nvfp4.A4_FILE), NVFP4_FAST_RING_EARLY=other)
    assert f"#define FAST_RING_EARLY {configs.fast_ring_early_mask(other)}" in runtime.source(nvfp4.A16_FILE)
    test_fast_gemv_many_columns_per_warp(cuda, fresh_rng, shape)
    w, dw, x, want = _a4_case(cuda, fresh_rng, shape, 2)
    asked = gen.kernels_fetched(monkeypatch, runtime)
    fast = _a4_paths(nvfp4, mma_mod, monkeypatch, "fast")
    _a4_rows_match(cuda, fresh_rng, x, w, dw, want, asked, fast, f"w4a4 fast ring early {shape}")


@pytest.mark.parametrize("pad", [16, 8], ids=["ldc16", "ldc8"])
def test_w4a4_fast_codes_row_stride(cuda: Any, fresh_rng: np.random.Generator, pad: int) -> None:
    """Codes rows in a wider buffer: stride K + 16 runs the fast kernels with ldc != K (the
    reference's bits); K + 8 (rows off 16-byte boundaries) is refused with a MetraleError."""
    from metrale.cuda.nvfp4 import DeviceA4Codes

    n, k = 77, 2048
    w = gen.nvfp4(fresh_rng, n, k, a4=True)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, 4, k)
    with np.errstate(all="ignore"):
        want = project(None, w, "A4", codes=quantize_a4(x, w.input_scale)).view(np.uint16)
    dc = cuda.launch("w4a4_quantize", dev_rows(x), w.input_scale)
    wide = cp.full((4, k + pad), 0x55, dtype=cp.int8)
    wide[:, :k] = dc.codes
    strided = DeviceA4Codes(wide[:, :k], dc.scales, dc.finite, dc.afac, dc.input_scale)
    for m in (1, 2, 3, 4):
        buf, view, init = gen.guarded(cp, fresh_rng, m, n)
        if pad % 16:
            with pytest.raises(MetraleError, match="16-byte boundaries"):
                cuda.launch("w4a4_gemv_small_m", strided[:m], dw, view)
            continue
        cuda.launch("w4a4_gemv_small_m", strided[:m], dw, view)
        gen.bits_equal(gen.check_guard(buf, init, m, n), want[:m], f"w4a4 ldc=K+{pad} m={m}")


def test_w4a4_quantize_scale_extremes(cuda: Any, fresh_rng: np.random.Generator) -> None:
    """Global scales that push block scales to 0, subnormal e4m3, and past 448 (saturation)."""
    k = 64
    x = gen.rows(fresh_rng, 16, k, finite=True)
    for s in (2.0**-20, 1e-3, 0.37, 1.0, 7.5, 2.0**20):
        with np.errstate(all="ignore"):
            rc = quantize_a4(x, np.float32(s))
        hc = cuda.launch("w4a4_quantize", dev_rows(x), np.float32(s)).to_host()
        gen.bits_equal(hc.codes.view(np.uint8), rc.codes.view(np.uint8), f"codes s={s}")
        gen.bits_equal(hc.scales.view(np.uint8), rc.scales.view(np.uint8), f"scales s={s}")


@pytest.mark.parametrize("k", [1040, 2048])
def test_batch_invariance_on_gpu(cuda: Any, fresh_rng: np.random.Generator, k: int) -> None:
    """Row r of every m-row kernel equals the 1-row kernel on row r (A16 and A4)."""
    n = 53
    w = gen.nvfp4(fresh_rng, n, k)
    dw = cuda.upload(w)
    x = gen.rows(fresh_rng, 64, k)
    xd = dev_rows(x)
    single = cp.empty((64, n), dtype=cp.uint16)
    single_a4 = cp.empty((64, n), dtype=cp.uint16)
    for r in range(64):
        cuda.launch("w4a16_gemv", xd[r : r + 1], dw, single[r : r + 1])
        cuda.launch(
            "w4a4_gemv_small_m",
            cuda.launch("w4a4_quantize", xd[r : r + 1], w.input_scale),
            dw,
            single_a4[r : r + 1],
        )
    s, s4 = single.get(), single_a4.get()
    for m in (2, 3, 4, 7, 8, 16, 31, 32, 33, 64):
        out = cp.empty((m, n), dtype=cp.uint16)
        kernel = "w4a16_gemm" if m > 32 else f"w4a16_gemv_batch{next(t for t in (4, 8, 16, 32) if m <= t)}"
        if m > 32:
            cuda.launch(kernel, xd[:m], dw, out)
        else:
            cuda.launch(kernel, xd[:m], dw, out, m)
        gen.bits_equal(out.get(), s[:m], f"{kernel} m={m} vs 1-row")
        cuda.launch("w4a4_gemv_small_m", cuda.launch("w4a4_quantize", xd[:m], w.input_scale), dw, out)
        gen.bits_equal(out.get(), s4[:m], f"w4a4 m={m} vs 1-row")


def test_torch_bf16_cuda_input_is_zero_copy(cuda: Any, fresh_rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    n, k = 19, 80
    w = gen.nvfp4(fresh_rng, n, k)
    x = gen.rows(fresh_rng, 5, k)
    t = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16).cuda()
    xd = cuda.rows(t, k, name="x")
    assert xd.data.ptr == t.data_ptr(), "rows() copied a torch CUDA tensor"
    out = torch.empty((5, n), dtype=torch.bfloat16, device="cuda")
    od = cuda.rows(out, n, name="out") if n % 16 == 0 else None
    o = cuda.empty_bf16((5, n))
    cuda.launch("w4a16_gemm", xd, cuda.upload(w), o)
    gen.bits_equal(o.get(), ref(x, w, "A16"), "torch input")
    assert od is None or od.data.ptr == out.data_ptr()
    with pytest.raises(MetraleError, match="dtype"):
        cuda.rows(t.float(), k, name="x")
    with pytest.raises(MetraleError, match="K=80, the weight wants K=96"):
        cuda.rows(t, 96, name="x")


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_act_mul_every_gate_pattern(cuda: Any, fresh_rng: np.random.Generator, activation: str) -> None:
    gate = np.arange(65536, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    up = fresh_rng.integers(0, 1 << 16, (256, 256), dtype=np.uint16)
    up[fresh_rng.random(up.shape) < 0.3] = 0x3F80  # 1.0: the table value itself, rounded
    with np.errstate(all="ignore"):
        want = act_mul(gate.view(BF16), up.view(BF16), activation).view(np.uint16)  # type: ignore[arg-type]
    buf, view, init = gen.guarded(cp, fresh_rng, 256, 256)
    cuda.launch(f"act_mul_{activation}", cp.asarray(gate), cp.asarray(up), view)
    gen.bits_equal(gen.check_guard(buf, init, 256, 256), want, f"act_mul_{activation}")
    g = cp.asarray(gate)
    cuda.launch(f"act_mul_{activation}", g, cp.asarray(up), g)  # in place, as the layer calls it
    gen.bits_equal(g.get(), want, f"act_mul_{activation} in place")


@pytest.mark.parametrize("activation", ["silu", "gelu"])
@pytest.mark.parametrize(("m", "n"), [(256, 256), (37, 1040), (400, 8320)])
def test_act_mul_st_matches_reference(
    cuda: Any,
    fresh_rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
    activation: str,
    m: int,
    n: int,
) -> None:
    """``act_mul_st`` (the compact table in shared memory, persistent CTAs over 8-element groups):
    every gate code (256 x 256), 37 rows of N = 1040 (130 groups a row, the CTAs' last step
    partly filled), and 400 rows of N = 8320, more groups than one step of every CTA (each CTA
    loops); out beside guard bands, then in place."""
    from metrale.cuda import configs, elementwise
    from metrale.cuda.runtime import get_kernel

    monkeypatch.setattr(elementwise, "ST_MIN_ROWS", 1)
    assert get_kernel(elementwise.FILE, "act_mul_st") is not None
    codes = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    gate = np.resize(codes[fresh_rng.permutation(65536)] if m * n != 65536 else codes, (m, n))
    up = fresh_rng.integers(0, 1 << 16, (m, n), dtype=np.uint16)
    up[fresh_rng.random(up.shape) < 0.3] = 0x3F80
    with np.errstate(all="ignore"):
        want = act_mul(gate.view(BF16), up.view(BF16), activation).view(np.uint16)  # type: ignore[arg-type]
    buf, view, init = gen.guarded(cp, fresh_rng, m, n, g=8)  # 16-byte aligned rows
    g, u = cp.asarray(gate), cp.asarray(up)
    ctas = elementwise.act_mul_st_grid(m, n, (g, n), (u, n), (view, n + 16))
    threads, per_thread, _ = configs.ACT_MUL_ST
    assert ctas > 0 and (m < 400 or ctas * threads * per_thread < m * n // 8)
    odd = gen.guarded(cp, fresh_rng, m, n)[1]  # rows 3 elements into a line: the plain kernel
    assert elementwise.act_mul_st_grid(m, n, (g, n), (u, n), (odd, n + 6)) == 0
    assert elementwise.act_mul_st_grid(m, n - 1, (g, n), (u, n), (view, n + 16)) == 0
    cuda.launch(f"act_mul_{activation}", g, u, view)
    gen.bits_equal(gen.check_guard(buf, init, m, n, g=8), want, f"act_mul_st {activation} m={m} n={n}")
    cuda.launch(f"act_mul_{activation}", g, u, g)
    gen.bits_equal(g.get(), want, f"act_mul_st {activation} m={m} n={n} in place")


@pytest.mark.parametrize("rank", [1, 5, 16, 20, 64])
def test_lora_matches_reference(cuda: Any, fresh_rng: np.random.Generator, rank: int) -> None:
    k, n, m = 1040, 75, 9
    a = (
        (fresh_rng.standard_normal((rank, k)) * np.exp2(fresh_rng.integers(-20, 4, (rank, k))))
        .astype(np.float32)
        .astype(BF16)
    )
    b = (
        (fresh_rng.standard_normal((n, rank)) * np.exp2(fresh_rng.integers(-8, 2, (n, rank))))
        .astype(np.float32)
        .astype(BF16)
    )
    ad = LoraAdapter(a=a, b=b, scale=np.float32(fresh_rng.uniform(0.1, 4)))
    x = gen.rows(fresh_rng, m, k)
    base = gen.rows(fresh_rng, m, n * 16)[:, :n].copy()
    with np.errstate(all="ignore"):
        t_want = lora_shrink(x, ad)
        o_want = lora_expand(t_want, ad, base).view(np.uint16)
    dad = cuda.upload(ad)
    t = cuda.launch("lora_shrink", dev_rows(x), dad)
    gen.bits_equal(t.get(), t_want.view(np.uint16), f"lora_shrink r={rank}")
    buf, view, init = gen.guarded(cp, fresh_rng, m, n)
    view[...] = cp.asarray(base.view(np.uint16))
    init[3 : 3 + m, 3 : 3 + n] = base.view(np.uint16)
    cuda.launch("lora_expand", t, dad, view)
    gen.bits_equal(gen.check_guard(buf, init, m, n), o_want, f"lora_expand r={rank}")


def test_bad_arguments_raise_metrale_errors(cuda: Any, fresh_rng: np.random.Generator) -> None:
    w = cuda.upload(gen.nvfp4(fresh_rng, 8, 64))
    with pytest.raises(MetraleError, match="K=32, the weight wants K=64"):
        cuda.launch("w4a16_gemm", cp.zeros((2, 32), dtype=cp.uint16), w, cp.zeros((2, 8), dtype=cp.uint16))
    with pytest.raises(MetraleError, match="output shape"):
        cuda.launch("w4a16_gemm", cp.zeros((2, 64), dtype=cp.uint16), w, cp.zeros((2, 9), dtype=cp.uint16))
    with pytest.raises(MetraleError, match="uint16"):
        cuda.launch("w4a16_gemv", cp.zeros((1, 64), dtype=cp.float32), w, cp.zeros((1, 8), dtype=cp.uint16))
