"""Activation modes (arithmetic.md § modes) against independent derivations.

* A16: float64 / ``math.frexp`` derivation of E and c = rne(x·2^(14−E)), no bit fields.
* A4: vLLM's ``ref_nvfp4_quant`` (tests/kernels/quantization/nvfp4_utils.py) transcribed with
  torch ops on the CPU in float32, with its ``get_reciprocal`` and ``cast_to_fp4``.
* A8: vLLM's ``dynamic_scaled_int8_quant`` rule (csrc/quantization/compressed_tensors/
  int8_quant_kernels.cu) in torch: scale = amax/127, inv = 127/amax, cvt.rni.sat.s8.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import (
    BF16,
    F32,
    assert_bits_equal,
    bf16,
    bf16_block_exponent,
    bf16_from_bits,
    cast_to_fp4,
    rand_bf16,
    torch_bf16,
)

from metrale.errors import MetraleError
from metrale.reference.activations import quantize_a4, quantize_a8, quantize_a16
from metrale.reference.elements import e2m1_rne

# --------------------------------------------------------------------------- A16


def a16_oracle(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes float64 [m, B, 16], E [m, B]) by float64 math: c = round-half-even(x·2^(14−E))."""
    e = bf16_block_exponent(x)
    xf = x.astype(np.float64).reshape(*e.shape, 16)
    scaled = xf * np.exp2(14.0 - e)[..., None]  # exact: a power-of-two scaling of a bf16
    c = np.vectorize(round, otypes=[np.float64])(scaled)  # Python round(): ties to even
    return c, e


def _random_finite_bf16(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Uniform over all finite bf16 bit patterns (every exponent, subnormals, ±0)."""
    u = rng.integers(0, 2**16, size=shape, dtype=np.uint32).astype(np.uint16)
    u = np.where(((u >> 7) & 0xFF) == 0xFF, u & 0x807F, u).astype(np.uint16)
    return bf16_from_bits(u)


def test_a16_matches_float64_derivation(rng: np.random.Generator) -> None:
    """Random rows: normal values, every-exponent bit patterns, and mixed block scales."""
    rows = [
        rand_bf16(rng, (3, 64)),
        _random_finite_bf16(rng, (4, 128)),
        (rng.standard_normal((3, 96)) * np.exp2(rng.integers(-140, 120, size=(3, 96))))
        .astype(F32)
        .astype(BF16),
    ]
    for x in rows:
        a = quantize_a16(x)
        c, e = a16_oracle(x)
        assert (a.exp == e).all()
        assert_bits_equal(a.codes.astype(np.int64), c.astype(np.int64), "A16 codes")
        assert a.finite.all()
        assert (np.abs(a.codes) < 2**15).all()
        assert ((a.exp >= -126) & (a.exp <= 127)).all()


@pytest.mark.parametrize(
    ("name", "block", "want_e", "want_c"),
    [
        ("all zero", [0.0] * 16, -126, [0.0] * 16),
        ("negative zeros", [-0.0] * 16, -126, [0.0] * 16),
        # bf16 subnormals k·2^-133: field 0 counts as 1, so E = -126 and c = k·2^7
        ("subnormal only", [k * 2.0**-133 for k in range(1, 17)], -126, [k * 128.0 for k in range(1, 17)]),
        # 2^-20 next to 2^10: E = 10; 2^-20·2^4 = 2^-16 rounds to 0; 2^10 -> 2^14
        ("wide spread", [2.0**-20, 2.0**10] + [0.0] * 14, 10, [0.0, 2.0**14] + [0.0] * 14),
        # within 2^7 of the max everything is exact: max 8 -> E = 3, c = x·2^11
        (
            "exact range",
            [8.0, 0.125, -1.5, 2.0**-4 * 3] + [0.0] * 12,
            3,
            [2.0**14, 2.0**8, -3 * 2.0**10, 3 * 2.0**7] + [0.0] * 12,
        ),
        # E = 0: 3·2^-16 -> 0.75 -> 1; 2^-15 -> 0.5 -> 0 (even); 5·2^-16 -> 1.25 -> 1
        (
            "tie to even",
            [1.0, 3 * 2.0**-16, 2.0**-15, 5 * 2.0**-16] + [0.0] * 12,
            0,
            [2.0**14, 1.0, 0.0, 1.0] + [0.0] * 12,
        ),
    ],
)
def test_a16_named_blocks(name: str, block: list[float], want_e: int, want_c: list[float]) -> None:
    x = bf16([block])
    a = quantize_a16(x)
    assert int(a.exp[0, 0]) == want_e, name
    assert (a.codes[0, 0] == np.array(want_c)).all(), (name, a.codes[0, 0].tolist())
    assert bool(a.finite[0, 0])


def test_a16_tie_cases_hand_worked() -> None:
    """With E = 0 (max 1.0): 3·2^-16 -> 0.75 -> 1; 2^-15 -> 0.5 -> 0 (even); 5·2^-16 -> 1.25 -> 1;
    3·2^-15 -> 1.5 -> 2 (even)."""
    x = bf16([[1.0, 3 * 2.0**-16, 2.0**-15, 5 * 2.0**-16, 3 * 2.0**-15] + [0.0] * 11])
    assert quantize_a16(x).codes[0, 0, :5].tolist() == [2.0**14, 1.0, 0.0, 1.0, 2.0]


def test_a16_max_bf16() -> None:
    """Max bf16 (0x7F7F = 255·2^120): E = 127, c = 255·2^7 = 32640 < 2^15."""
    x = bf16_from_bits([[0x7F7F, 0xFF7F] + [0] * 14])
    a = quantize_a16(x)
    assert int(a.exp[0, 0]) == 127
    assert a.codes[0, 0, :2].tolist() == [32640.0, -32640.0]


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a16_non_finite_block_is_flagged(rng: np.random.Generator, bad: float) -> None:
    x = rand_bf16(rng, (2, 48))
    x[1, 20] = bad
    a = quantize_a16(x)
    assert a.finite.tolist() == [[True, True, True], [True, False, True]]
    c, e = a16_oracle(np.where(np.isfinite(x.astype(F32)), x, bf16([[0.0]])).astype(BF16))
    ok = a.finite
    assert (a.exp[ok] == e[ok]).all()
    assert_bits_equal(a.codes[ok].astype(np.int64), c[ok].astype(np.int64), "finite blocks unaffected")


def test_a16_every_bf16_code_quietly() -> None:
    """Every bf16 bit pattern (NaNs of every payload among them) quantizes without a numpy
    warning: a block holding one is flagged non-finite with codes 0, the other blocks' codes
    exact integers."""
    import warnings

    x = np.arange(1 << 16, dtype=np.uint16).view(BF16).reshape(-1, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = quantize_a16(x)
    bad = ((x.view(np.uint16) & 0x7F80) == 0x7F80).any(axis=-1, keepdims=True)  # [m, B = 1]
    assert (a.finite == ~bad).all() and not a.codes[bad].any()
    assert (a.codes == np.rint(a.codes)).all()


# --------------------------------------------------------------------------- A4


def _get_reciprocal(x: torch.Tensor | float) -> torch.Tensor | float:
    if isinstance(x, torch.Tensor):
        return torch.where(x == 0, torch.tensor(0.0, dtype=x.dtype), 1.0 / x)
    return 0.0 if x == 0 else 1.0 / x


def vllm_ref_nvfp4_quant(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's ref_nvfp4_quant (block 16): (fp4 values float32 [m, K], scales float32 [m, B])."""
    assert global_scale.dtype == torch.float32
    m, n = x.shape
    x = torch.reshape(x, (m, n // 16, 16))
    vec_max = torch.max(torch.abs(x), dim=-1, keepdim=True)[0].to(torch.float32)
    scale = global_scale * (vec_max * _get_reciprocal(6.0))
    scale = torch.clamp(scale, max=448, min=-448)
    scale = scale.to(torch.float8_e4m3fn).to(torch.float32)
    output_scale = _get_reciprocal(scale * _get_reciprocal(global_scale))
    scaled_x = x.to(torch.float32) * output_scale
    clipped_x = torch.clamp(scaled_x, -6.0, 6.0).reshape(m, n)
    return cast_to_fp4(clipped_x.numpy()), scale.squeeze(-1).numpy()


def _check_a4(x: np.ndarray, input_scale: np.float32, blocks: np.ndarray | None = None) -> None:
    g = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(float(input_scale), dtype=torch.float32)
    want_q, want_s = vllm_ref_nvfp4_quant(torch_bf16(x), g)
    a = quantize_a4(x, input_scale)
    m, k = x.shape
    ok = np.ones((m, k // 16), bool) if blocks is None else blocks
    want_codes = np.nan_to_num(2 * want_q).astype(np.int8).reshape(m, -1, 16)
    assert_bits_equal(a.codes.reshape(m, -1, 16)[ok], want_codes[ok], "A4 codes")
    assert_bits_equal(a.scales.astype(F32)[ok], want_s[ok], "A4 scales")


@pytest.mark.parametrize("calib", [1.0, 0.25, 4.0])
def test_a4_matches_vllm_random(rng: np.random.Generator, calib: float) -> None:
    """Seeded rows; input_scale = calib·amax/(6·448): calib < 1 saturates scales at 448 and
    codes at ±6, calib > 1 leaves headroom."""
    for _ in range(8):
        x = rand_bf16(rng, (4, 128), scale=float(np.exp2(rng.uniform(-20, 20))))
        amax = float(np.abs(x.astype(F32)).max())
        input_scale = F32(F32(calib * amax) / F32(6.0 * 448.0))
        _check_a4(x, input_scale)


def test_a4_matches_vllm_edge_rows(rng: np.random.Generator) -> None:
    x = rand_bf16(rng, (5, 64))
    x[0] = 0.0  # zero row: scale 0, output scale 0, codes 0
    x[1, :16] = 0.0  # a zero block in a live row
    x[2, 3] = 3e38  # one huge element: its block scale saturates at 448
    x[3, 16:32] = bf16(np.array([2.0**-100] * 16))  # tiny block: scale underflows to 0 in e4m3
    x[4] = -x[4]
    _check_a4(x, F32(np.abs(x[1:2].astype(F32)).max() / 2688.0))
    a = quantize_a4(x, F32(1.0))
    assert (a.codes[0] == 0).all() and (a.scales[0].astype(F32) == 0).all()


def test_a4_midpoints_tie_to_even() -> None:
    """input_scale 1 (g = 1) and a block max of 6: 6·f32(1/6) rounds to 1.0, so the block scale
    is exactly 1 and every element lands on an e2m1 midpoint as is."""
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    block = [6.0, *mids, *[-v for v in mids], 5.5]
    x = bf16([block])
    a = quantize_a4(x, F32(1.0))
    assert a.scales.astype(F32).tolist() == [[1.0]]
    want = [12, 0, 2, 2, 4, 4, 8, 8, 0, -2, -2, -4, -4, -8, -8, 12]
    assert a.codes[0].tolist() == want
    _check_a4(x, F32(1.0))


def test_a4_codes_range_and_dtype(rng: np.random.Generator) -> None:
    x = rand_bf16(rng, (3, 64), scale=100.0)
    a = quantize_a4(x, F32(0.01))
    assert a.codes.dtype == np.int8 and a.codes.shape == (3, 64)
    assert int(np.abs(a.codes).max()) <= 12
    assert a.scales.shape == (3, 4)


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_a4_non_finite_block(rng: np.random.Generator, bad: float) -> None:
    """A block with Inf/NaN is flagged non-finite; the row's other blocks still equal vLLM."""
    x = rand_bf16(rng, (2, 48))
    x[0, 17] = bad
    a = quantize_a4(x, F32(0.001))
    assert a.finite.tolist() == [[True, False, True], [True, True, True]]
    _check_a4(x, F32(0.001), blocks=a.finite)


# --------------------------------------------------------------------------- A8


def vllm_per_token_int8(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """vLLM dynamic per-token int8: s = amax/127, inv = 127/amax; q = cvt.rni.sat.s8(x·inv)
    (NaN -> 0, as the PTX conversion does)."""
    xf = x.to(torch.float32)
    amax = xf.abs().amax(dim=-1)
    scale = amax / 127.0
    inv = 127.0 / amax
    q = xf * inv[:, None]
    q = torch.nan_to_num(torch.round(q), nan=0.0).clamp(-128, 127).to(torch.int8)
    return q.numpy(), scale.numpy()


def test_a8_matches_vllm(rng: np.random.Generator) -> None:
    for _ in range(10):
        x = rand_bf16(rng, (5, 80), scale=float(np.exp2(rng.uniform(-30, 30))))
        x[1] = 0.0
        x[2, 7] = 1e6
        want_q, want_s = vllm_per_token_int8(torch_bf16(x))
        a = quantize_a8(x)
        assert_bits_equal(a.q, want_q, "A8 q")
        assert_bits_equal(a.scale, want_s, "A8 scale")


def test_a8_ties_and_zero_row() -> None:
    """amax 127: inv = 1, so 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0 (half to even)."""
    x = bf16([[127.0, 0.5, 1.5, 2.5, -0.5, -127.0] + [0.0] * 10, [0.0] * 16])
    a = quantize_a8(x)
    assert a.q[0, :6].tolist() == [127, 0, 2, 2, 0, -127]
    assert a.scale.tolist() == [1.0, 0.0]
    assert (a.q[1] == 0).all()


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a8_non_finite_row(rng: np.random.Generator, bad: float) -> None:
    """The reference's decision: a row holding Inf/NaN gets q = 0 and s = NaN; other rows
    are untouched."""
    x = rand_bf16(rng, (3, 32))
    x[1, 9] = bad
    a = quantize_a8(x)
    assert (a.q[1] == 0).all() and np.isnan(a.scale[1])
    want_q, want_s = vllm_per_token_int8(torch_bf16(x[[0, 2]]))
    assert_bits_equal(a.q[[0, 2]], want_q, "other rows q")
    assert_bits_equal(a.scale[[0, 2]], want_s, "other rows s")


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("quant", [quantize_a16, quantize_a8, lambda x: quantize_a4(x, F32(1.0))])
def test_activation_validation(quant: object) -> None:
    with pytest.raises(MetraleError, match=r"x: K=24 is not a multiple of 16"):
        quant(np.zeros((2, 24), BF16))  # type: ignore[operator]
    with pytest.raises(MetraleError, match=r"x: dtype float32, want bfloat16"):
        quant(np.zeros((2, 16), F32))  # type: ignore[operator]
    with pytest.raises(MetraleError, match=r"x: shape \(16,\), want 2-D"):
        quant(np.zeros(16, BF16))  # type: ignore[operator]


def test_activations_do_not_modify_input(rng: np.random.Generator) -> None:
    x = rand_bf16(rng, (2, 32))
    x[0, 0] = np.inf
    before = x.copy()
    quantize_a16(x)
    quantize_a4(x, F32(0.5))
    quantize_a8(x)
    assert_bits_equal(x, before, "x")


# --------------------------------------------------------------------------- order-sensitive edges


def test_a4_scale_multiplies_by_f32_one_sixth() -> None:
    """input_scale f32(1/3) (g = 3) and amax 1.5625: g·(amax·f32(1/6)) = 0.78125000… rounds up
    to the e4m3 0.8125, while g·(amax/6) lands just below the midpoint and gives 0.75."""
    x = bf16([[1.5625] + [0.0] * 15])
    a = quantize_a4(x, F32(1.0 / 3.0))
    assert a.scales.astype(F32).tolist() == [[0.8125]]
    _check_a4(x, F32(1.0 / 3.0))


def test_a4_scales_x_by_the_reciprocal() -> None:
    """input_scale 1, amax 0.171875: scale d = 0.029296875; x = 1.25·d exactly. x·f32(1/d) is
    just above the 1.25 midpoint (code 2·1.5), x/d is the midpoint itself (code 2·1.0)."""
    x = bf16([[0.171875, 0.03662109375] + [0.0] * 14])
    a = quantize_a4(x, F32(1.0))
    assert a.scales.astype(F32).tolist() == [[0.029296875]]
    assert a.codes[0, 1] == 3
    _check_a4(x, F32(1.0))


def test_a4_tiny_d_beside_zero_gives_code_zero() -> None:
    """input_scale 2^-126 and amax 6·2^-129: scale 0.125, d = 2^-129, 1/d = +Inf; the zero
    elements give 0·Inf = NaN, which the sequence defines as code 0; the amax element x·Inf
    clamps to 6 (code 12), its negative twin to −6."""
    x = bf16([[6 * 2.0**-129, -6 * 2.0**-129] + [0.0] * 13 + [-0.0]])
    a = quantize_a4(x, F32(2.0**-126))
    assert a.scales.astype(F32).tolist() == [[0.125]]
    assert a.codes[0].tolist() == [12, -12] + [0] * 14
    _check_a4(x, F32(2.0**-126))


def test_a8_tiny_amax_beside_zero_gives_code_zero() -> None:
    """amax 2^-130 (a bf16 subnormal): inv = 127/amax overflows to +Inf; x·Inf saturates to
    127 / −128 and the zeros' 0·Inf = NaN is defined as code 0 (cvt.rni.sat.s8's NaN -> 0)."""
    x = bf16([[2.0**-130, -(2.0**-130)] + [0.0] * 13 + [-0.0]])
    a = quantize_a8(x)
    assert a.q[0].tolist() == [127, -128] + [0] * 14
    want_q, want_s = vllm_per_token_int8(torch_bf16(x))
    assert_bits_equal(a.q, want_q, "A8 q")
    assert_bits_equal(a.scale, want_s, "A8 scale")


def test_a8_zero_inf_rule_leaves_no_nan_to_the_int8_cast() -> None:
    """The zeros' 0·Inf = NaN beside a tiny amax becomes code 0 by the sequence's own rule, not
    by numpy's NaN -> int8 cast (C's undefined float -> int conversion, 0 on x86-64 only through
    cvttss2si's 0x80000000): that cast raises under errstate(invalid="raise"), the rule does not."""
    x = bf16([[2.0**-130, -(2.0**-130)] + [0.0] * 13 + [-0.0], [1.0, np.nan] + [0.0] * 14])
    with np.errstate(invalid="raise"):
        a = quantize_a8(x)
    assert a.q[0].tolist() == [127, -128] + [0] * 14
    assert a.q[1].tolist() == [0] * 16 and np.isnan(a.scale[1])


def test_a4_zero_inf_rule_gives_e2m1_no_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """e2m1_rne's NaN input is the caller's error (e2m1 has no NaN; what ml_dtypes makes of one
    is no contract): A4 maps the zeros' 0·Inf = NaN beside a tiny d to 0 before the cast."""
    import metrale.reference.activations as act

    seen: list[np.ndarray] = []

    def checked(v: np.ndarray) -> np.ndarray:
        seen.append(np.asarray(v, dtype=F32).copy())
        return e2m1_rne(v)

    monkeypatch.setattr(act, "e2m1_rne", checked)
    x = bf16([[6 * 2.0**-129, -6 * 2.0**-129] + [0.0] * 13 + [-0.0]])
    a = act.quantize_a4(x, F32(2.0**-126))
    assert len(seen) == 1 and not np.isnan(seen[0]).any(), seen
    assert a.codes[0].tolist() == [12, -12] + [0] * 14
