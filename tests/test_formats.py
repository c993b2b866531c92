"""The five weight formats (arithmetic.md § formats) against straight transcriptions of their
producers (ModelOpt, compressed-tensors, ggml: ``tests/producers.py``)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from helpers import (
    BF16,
    E2M1_VALUES,
    E4M3,
    F32,
    assert_bits_equal,
    bits,
    torch_e4m3_decode,
)
from producers import ct_channel, ggml_q2_0, modelopt_nvfp4, q2_decode

from metrale.errors import MetraleError
from metrale.reference.formats import DenseWeight, Fp8Weight, Nvfp4Weight, Q2_0Weight, W8a8Weight
from metrale.reference.formats.nvfp4 import pack_nibbles, unpack_nibbles


def _weights(rng: np.random.Generator, n: int, k: int) -> list[np.ndarray]:
    """Seeded weight families: normal, heavy-tailed with outliers, bf16-valued, zero blocks, tiny
    blocks next to a large one (exercises the 2^-9 scale floor), a wide exponent spread."""
    w_norm = rng.standard_normal((n, k)).astype(F32) * F32(0.02)
    w_heavy = rng.standard_t(2, size=(n, k)).astype(F32)
    w_bf16 = rng.standard_normal((n, k)).astype(F32).astype(BF16).astype(F32)
    w_zero = rng.standard_normal((n, k)).astype(F32)
    w_zero[0] = 0.0  # a zero row (its block scales 1.0)
    w_zero[1:, 16:32] = 0.0  # zero blocks in other rows
    w_tiny = rng.standard_normal((n, k)).astype(F32) * F32(1e-7)
    w_tiny[0, 0] = 50.0
    w_spread = (rng.standard_normal((n, k)) * np.exp2(rng.uniform(-30, 10, size=(n, k)))).astype(F32)
    return [w_norm, w_heavy, w_bf16, w_zero, w_tiny, w_spread]


# --------------------------------------------------------------------------- NVFP4


@pytest.mark.parametrize("shape", [(3, 16), (5, 48), (7, 256)])
def test_nvfp4_quantize_matches_modelopt(rng: np.random.Generator, shape: tuple[int, int]) -> None:
    for w in _weights(rng, *shape):
        packed, scale, s2 = modelopt_nvfp4(w)
        q = Nvfp4Weight.quantize(w, name="layers.0.mlp.up_proj")
        assert_bits_equal(np.float32(q.weight_scale_2), s2, "weight_scale_2")
        assert_bits_equal(q.weight_scale, scale.view(E4M3), "weight_scale")
        assert_bits_equal(q.weight, packed, "packed weight")


def test_nvfp4_block_scale_operation_order() -> None:
    """ModelOpt computes amax_b / (6·s2), not (amax_b/6)/s2; here the two differ after the e4m3
    cast (the f32 quotient sits on an e4m3 rounding tie), so the case pins the order."""
    rng = np.random.default_rng(1)
    found = None
    for _ in range(5000):
        big = F32(rng.uniform(0.5, 2.0) * 2.0 ** rng.integers(-10, 5))
        s2 = F32(big / F32(2688.0))
        a = F32(F32(1.0625) * F32(F32(6.0) * s2))
        for cand in (np.nextafter(a, F32(0)), a, np.nextafter(a, F32(np.inf))):
            one = F32(F32(cand) / F32(F32(6.0) * s2))
            two = F32(F32(F32(cand) / F32(6.0)) / s2)
            if one.astype(E4M3) != two.astype(E4M3) and F32(cand) < big:
                found = (big, F32(cand))
                break
        if found:
            break
    assert found is not None
    w = np.zeros((1, 32), F32)
    w[0, 0], w[0, 16] = found
    packed, scale, s2 = modelopt_nvfp4(w)
    q = Nvfp4Weight.quantize(w)
    assert_bits_equal(q.weight_scale, scale.view(E4M3), "weight_scale")
    assert_bits_equal(q.weight, packed, "packed")


def test_nvfp4_hand_worked_layout() -> None:
    """W = [6, -6, 0.5, 0 ...]: s2 = 6/2688, block scale 448, denominators 448·s2 ≈ 1, so codes
    6 -> 0x7, -6 -> 0xF, 0.5 -> 0x1: byte 0 = 0xF7 (k=0 low nibble, k=1 high), byte 1 = 0x01."""
    w = np.zeros((1, 16), F32)
    w[0, :3] = [6.0, -6.0, 0.5]
    q = Nvfp4Weight.quantize(w)
    assert q.weight.tolist() == [[0xF7, 0x01, 0, 0, 0, 0, 0, 0]]
    assert int(bits(q.weight_scale)[0, 0]) == 0x7E  # e4m3 448
    assert q.weight_scale_2 == F32(6.0) / F32(2688.0)


def test_nvfp4_sign_convention_small_negative() -> None:
    """ModelOpt's sign bit is w < 0: a small negative weight rounding to 0 keeps nibble 8."""
    w = np.zeros((1, 16), F32)
    w[0, 0], w[0, 1], w[0, 2] = 6.0, -0.01, 0.01
    q = Nvfp4Weight.quantize(w)
    assert q.nibbles()[0, :3].tolist() == [0x7, 0x8, 0x0]
    packed, _, _ = modelopt_nvfp4(w)
    assert_bits_equal(q.weight, packed, "packed")


def test_nvfp4_all_zero_weight_is_the_reference_decision() -> None:
    """ModelOpt gives 0/0 = NaN block scales here; the reference decides s2 = 0, scales 1.0,
    codes 0, so the weight dequantizes to zeros and holds no NaN."""
    q = Nvfp4Weight.quantize(np.zeros((2, 32), F32))
    assert q.weight_scale_2 == 0
    assert (bits(q.weight_scale) == 0x38).all()  # e4m3 1.0
    assert (q.weight == 0).all()
    assert (q.dequantize() == 0).all()


def test_nvfp4_input_scale() -> None:
    """input_scale = amax/(6·448) in float32 (ModelOpt get_activation_scaling_factor)."""
    q = Nvfp4Weight.quantize(np.ones((1, 16), F32), input_amax=13.7)
    want = (torch.tensor(13.7, dtype=torch.float32) / (6.0 * 448.0)).item()
    assert_bits_equal(np.float32(q.input_scale), np.float32(want), "input_scale")
    assert q.declares_a4
    assert not Nvfp4Weight.quantize(np.ones((1, 16), F32)).declares_a4


def test_nvfp4_dequantize_matches_independent_decode(rng: np.random.Generator) -> None:
    """Dequant = e2m1 · f32(scale) · s2: e2m1·scale is exact, so float64 then one f32 rounding."""
    w = rng.standard_normal((4, 64)).astype(F32)
    q = Nvfp4Weight.quantize(w)
    nib = np.empty((4, 64), np.int64)
    nib[:, 0::2], nib[:, 1::2] = q.weight & 0xF, q.weight >> 4
    e2m1 = np.array(E2M1_VALUES + tuple(-v for v in E2M1_VALUES))[nib]
    sc = np.repeat(torch_e4m3_decode(bits(q.weight_scale)).astype(np.float64), 16, axis=1)
    want = (e2m1 * sc * float(q.weight_scale_2)).astype(F32)
    assert_bits_equal(q.dequantize(), want, "dequantize")


def test_nibble_pack_unpack_round_trip(rng: np.random.Generator) -> None:
    nib = rng.integers(0, 16, size=(5, 32), dtype=np.uint8)
    packed = pack_nibbles(nib)
    assert packed.tolist()[0][0] == int(nib[0, 0] | (nib[0, 1] << 4))
    assert_bits_equal(unpack_nibbles(packed), nib, "unpack(pack)")
    raw = rng.integers(0, 256, size=(3, 8), dtype=np.uint8)
    assert_bits_equal(pack_nibbles(unpack_nibbles(raw)), raw, "pack(unpack)")
    assert unpack_nibbles(np.array([[0x21, 0x43]], np.uint8)).tolist() == [[1, 2, 3, 4]]


# --------------------------------------------------------------------------- FP8 and int8


@pytest.mark.parametrize("shape", [(3, 16), (5, 48), (9, 128)])
def test_fp8_quantize_matches_compressed_tensors(rng: np.random.Generator, shape: tuple[int, int]) -> None:
    for w in _weights(rng, *shape):
        q_ct, s_ct = ct_channel(w, "fp8")
        q = Fp8Weight.quantize(w, name="layers.1.mlp.gate_proj")
        assert_bits_equal(q.weight_scale, s_ct, "weight_scale")
        assert_bits_equal(q.weight, q_ct.view(E4M3), "weight")
        assert not np.isnan(q.weight.astype(F32)).any()


@pytest.mark.parametrize("shape", [(3, 16), (5, 48), (9, 128)])
def test_w8a8_quantize_matches_compressed_tensors(rng: np.random.Generator, shape: tuple[int, int]) -> None:
    for w in _weights(rng, *shape):
        q_ct, s_ct = ct_channel(w, "int")
        q = W8a8Weight.quantize(w, name="layers.1.mlp.down_proj")
        assert_bits_equal(q.weight_scale, s_ct, "weight_scale")
        assert_bits_equal(q.weight, q_ct, "weight")


def test_w8a8_ties_and_clamp() -> None:
    """amax 127.5 gives scale 1.0 exactly: ±0.5, 1.5, 2.5 round half to even; 127.5 clamps to
    127 and -127.5 rounds to -128 (even)."""
    w = np.zeros((2, 16), F32)
    w[0, :6] = [127.5, 0.5, 1.5, 2.5, -0.5, -2.5]
    w[1, :2] = [-127.5, 3.5]
    q = W8a8Weight.quantize(w)
    assert q.weight_scale.tolist() == [1.0, 1.0]
    assert q.weight[0, :6].tolist() == [127, 0, 2, 2, 0, -2]
    assert q.weight[1, :2].tolist() == [-128, 4]


def test_channel_zero_row_gets_eps_scale() -> None:
    w = np.zeros((2, 16), F32)
    w[1, 3] = 1.0
    eps = np.finfo(np.float32).eps
    for cls in (Fp8Weight, W8a8Weight):
        q = cls.quantize(w)
        assert q.weight_scale[0] == F32(eps)
        assert (q.weight[0].astype(F32) == 0).all()


def test_fp8_saturates_instead_of_nan() -> None:
    """A weight whose w/scale lands above 448 (the scale rounding) saturates to ±448."""
    w = np.full((1, 16), 1.0, F32)
    w[0, 0] = F32(448.0) * F32(1 + 2**-20)
    q = Fp8Weight.quantize(w)
    assert not np.isnan(q.weight.astype(F32)).any()
    assert float(np.abs(q.weight.astype(F32)).max()) == 448.0


def test_channel_dequantize(rng: np.random.Generator) -> None:
    w = rng.standard_normal((3, 32)).astype(F32)
    q8 = Fp8Weight.quantize(w)
    want = (torch_e4m3_decode(bits(q8.weight)).astype(np.float64) * q8.weight_scale[:, None]).astype(F32)
    assert_bits_equal(q8.dequantize(), want, "fp8 dequantize")
    qi = W8a8Weight.quantize(w)
    want = (qi.weight.astype(np.float64) * qi.weight_scale[:, None]).astype(F32)
    assert_bits_equal(qi.dequantize(), want, "w8a8 dequantize")


# --------------------------------------------------------------------------- Q2_0


@pytest.mark.parametrize("shape", [(2, 64), (3, 192)])
def test_q2_0_quantize_matches_ggml(rng: np.random.Generator, shape: tuple[int, int]) -> None:
    for w in _weights(rng, *shape):
        q = Q2_0Weight.quantize(w, name="blk.0.ffn_up.weight")
        assert q.blocks.tobytes() == ggml_q2_0(w)


def test_q2_0_rounds_half_away_from_zero() -> None:
    """x/d = ±0.5 exactly: roundf gives ±1 (q = 2 and 0), where ties-to-even would give 0 (q = 1)."""
    w = np.zeros((1, 64), F32)
    w[0, :4] = [1.0, 0.5, -0.5, -1.0]
    q = Q2_0Weight.quantize(w)
    assert q.q()[0, :5].tolist() == [2, 2, 0, 0, 1]
    assert q.blocks.tobytes() == ggml_q2_0(w)
    assert q.blocks[0, 0, 2] == 2 | (2 << 2) | (0 << 4) | (0 << 6)
    assert q.blocks[0, 0, :2].tobytes() == struct.pack("<e", 1.0)


def test_q2_0_block_layout_and_dequantize(rng: np.random.Generator) -> None:
    """18 bytes per 64 elements: f16 d, then qs[16]; decode by hand equals dequantize()."""
    w = rng.standard_normal((3, 128)).astype(F32)
    q = Q2_0Weight.quantize(w)
    assert q.blocks.shape == (3, 2, 18)
    assert q.nbytes == 3 * 2 * 18
    want = q2_decode(q.blocks.tobytes(), 3, 128).astype(F32)
    assert_bits_equal(q.dequantize(), want, "dequantize")


def test_q2_0_gguf_type_size() -> None:
    """gguf's table, where it knows type 42, must say 64 elements in 18 bytes; else check by hand."""
    import gguf

    known = {t.value: t for t in gguf.GGMLQuantizationType}
    if 42 in known:
        assert gguf.GGML_QUANT_SIZES[known[42]] == (64, 18)
    else:
        assert struct.calcsize("<e") + 64 // 4 == 18


def test_q2_0_from_parts_round_trip(rng: np.random.Generator) -> None:
    qv = rng.integers(0, 4, size=(2, 128), dtype=np.uint8)
    d = rng.standard_normal((2, 2)).astype(np.float16)
    w = Q2_0Weight.from_parts(qv, d)
    assert_bits_equal(w.q(), qv, "q")
    assert_bits_equal(w.d(), d, "d")
    assert (w.codes() == qv.astype(np.int8) - 1).all()


# --------------------------------------------------------------------------- BF16


def test_dense_quantize_is_rne_to_bf16(rng: np.random.Generator) -> None:
    w = rng.standard_normal((3, 32)).astype(F32)
    q = DenseWeight.quantize(w)
    want = torch.from_numpy(w).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert_bits_equal(q.weight, want.view(BF16), "bf16")


# --------------------------------------------------------------------------- validation

QUANTIZERS = [
    (Nvfp4Weight, 16),
    (Fp8Weight, 16),
    (W8a8Weight, 16),
    (Q2_0Weight, 64),
    (DenseWeight, 16),
]


@pytest.mark.parametrize(("cls", "block"), QUANTIZERS)
def test_quantize_refuses_bad_k(cls: type, block: int) -> None:
    with pytest.raises(MetraleError, match=rf"mlp\.w1: K={block + 8} is not a multiple"):
        cls.quantize(np.ones((2, block + 8), F32), name="mlp.w1")


@pytest.mark.parametrize(("cls", "block"), QUANTIZERS)
def test_quantize_refuses_bad_dtype_and_shape(cls: type, block: int) -> None:
    with pytest.raises(MetraleError, match=r"mlp\.w1: unsupported dtype int32"):
        cls.quantize(np.ones((2, block), np.int32), name="mlp.w1")
    with pytest.raises(MetraleError, match=r"mlp\.w1: weight must be 2-D"):
        cls.quantize(np.ones(block, F32), name="mlp.w1")


@pytest.mark.parametrize(("cls", "block"), QUANTIZERS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_quantize_refuses_non_finite(cls: type, block: int, bad: float) -> None:
    w = np.ones((3, block), F32)
    w[2, 5] = bad
    with pytest.raises(MetraleError, match=r"mlp\.w2: non-finite weight .* at \[2, 5\]"):
        cls.quantize(w, name="mlp.w2")


@pytest.mark.parametrize(("cls", "block"), QUANTIZERS)
def test_quantize_never_modifies_input(rng: np.random.Generator, cls: type, block: int) -> None:
    for dtype in (F32, BF16):
        w = rng.standard_normal((3, 2 * block)).astype(dtype)
        before = w.copy()
        cls.quantize(w)
        assert_bits_equal(w, before, "source weight")


def test_container_validation_names_tensor() -> None:
    """Constructors refuse wrong dtypes, shapes and NaN scales, naming the tensor."""
    u8 = np.zeros((2, 8), np.uint8)
    sc = np.ones((2, 1), F32).astype(E4M3)
    with pytest.raises(MetraleError, match=r"up\.weight: dtype int8"):
        Nvfp4Weight(weight=u8.view(np.int8), weight_scale=sc, weight_scale_2=F32(1), name="up")
    with pytest.raises(MetraleError, match=r"up\.weight_scale: shape \(2, 2\)"):
        Nvfp4Weight(
            weight=u8, weight_scale=np.ones((2, 2), F32).astype(E4M3), weight_scale_2=F32(1), name="up"
        )
    nan_sc = np.full((2, 1), 0x7F, np.uint8).view(E4M3)
    with pytest.raises(MetraleError, match=r"up\.weight_scale: holds NaN"):
        Nvfp4Weight(weight=u8, weight_scale=nan_sc, weight_scale_2=F32(1), name="up")
    with pytest.raises(MetraleError, match=r"up\.weight_scale_2"):
        Nvfp4Weight(weight=u8, weight_scale=sc, weight_scale_2=F32(np.nan), name="up")
    with pytest.raises(MetraleError, match=r"up\.input_scale"):
        Nvfp4Weight(weight=u8, weight_scale=sc, weight_scale_2=F32(1), input_scale=F32(0), name="up")
    with pytest.raises(MetraleError, match=r"up\.weight: K=24 is not a multiple of 16"):
        Nvfp4Weight(weight=np.zeros((2, 12), np.uint8), weight_scale=sc, weight_scale_2=F32(1), name="up")

    e4 = np.zeros((2, 16), E4M3)
    with pytest.raises(MetraleError, match=r"gate\.weight_scale: non-finite"):
        Fp8Weight(weight=e4, weight_scale=np.array([1.0, np.nan], F32), name="gate")
    with pytest.raises(MetraleError, match=r"gate\.weight_scale: shape \(2, 1\)"):
        Fp8Weight(weight=e4, weight_scale=np.ones((2, 1), F32), name="gate")
    with pytest.raises(MetraleError, match=r"gate\.weight: holds NaN codes"):
        Fp8Weight(
            weight=np.full((2, 16), 0x7F, np.uint8).view(E4M3), weight_scale=np.ones(2, F32), name="gate"
        )

    i8 = np.zeros((2, 16), np.int8)
    with pytest.raises(MetraleError, match=r"down\.weight_scale: non-finite"):
        W8a8Weight(weight=i8, weight_scale=np.array([np.inf, 1.0], F32), name="down")
    with pytest.raises(MetraleError, match=r"down\.weight: dtype uint8"):
        W8a8Weight(weight=i8.view(np.uint8), weight_scale=np.ones(2, F32), name="down")

    blocks = np.zeros((2, 1, 18), np.uint8)
    blocks[1, 0, :2] = np.array([np.nan], np.float16).view(np.uint8)
    with pytest.raises(MetraleError, match=r"blk\.ffn: non-finite block scale d"):
        Q2_0Weight(blocks=blocks, name="blk.ffn")
    with pytest.raises(MetraleError, match=r"blk\.ffn: shape \(2, 1, 17\)"):
        Q2_0Weight(blocks=np.zeros((2, 1, 17), np.uint8), name="blk.ffn")

    with pytest.raises(MetraleError, match=r"o\.weight: dtype float32"):
        DenseWeight(weight=np.zeros((2, 16), F32), name="o")
    with pytest.raises(MetraleError, match=r"o\.weight: holds non-finite"):
        DenseWeight(weight=np.full((2, 16), np.inf, F32).astype(BF16), name="o")


def test_q2_0_refuses_f16_overflow() -> None:
    w = np.ones((1, 64), F32)
    w[0, 0] = 1e5
    with pytest.raises(MetraleError, match=r"ffn_up: block amax .* overflows"):
        Q2_0Weight.quantize(w, name="ffn_up")


# ------------------------------------------------- producers' edge conventions (tiny scales)


def _ct_installed(w: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The installed compressed-tensors' own calculate_qparams + quantize (channel, symmetric)."""
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    args = QuantizationArgs(num_bits=8, type=kind, symmetric=True, strategy="channel")
    t = torch.from_numpy(np.asarray(w, dtype=F32).copy())
    s, z = calculate_qparams(t.amin(1, keepdim=True), t.amax(1, keepdim=True), args)
    dt = torch.float8_e4m3fn if kind == "float" else torch.int8
    q = quantize(t, s, z, args, dtype=dt)
    raw = q.view(torch.uint8).numpy() if kind == "float" else q.numpy()
    return raw, s[:, 0].numpy()


def _tiny_rows() -> np.ndarray:
    w = np.zeros((5, 16), F32)
    w[0, :2] = [1e-6, -2.5e-7]  # 0 < amax < 127.5·eps: the producer keeps amax/127.5
    w[1, 0] = 1e-38  # subnormal-range scale
    w[3, :3] = [3e-5, -1e-5, 1e-7]  # below 448·eps for FP8
    w[4, :2] = [1.0, -0.5]
    return w  # row 2 all zero: scale is eps exactly


def test_w8a8_tiny_scales_match_compressed_tensors_0_20() -> None:
    """compressed-tensors 0.20 replaces only a zero scale by eps (the issue's reproducer: scale
    0x3206BE7B, codes [127, -32])."""
    w = _tiny_rows()
    q = W8a8Weight.quantize(w)
    assert int(q.weight_scale.view(np.uint32)[0]) == 0x3206BE7B
    assert q.weight[0, :2].tolist() == [127, -32]
    assert int(q.weight_scale.view(np.uint32)[2]) == 0x34000000 and not q.weight[2].any()
    q_ct, s_ct = _ct_installed(w, "int")
    assert_bits_equal(q.weight_scale, s_ct, "weight_scale")
    assert_bits_equal(q.weight, q_ct, "weight")


def test_fp8_tiny_scales_match_compressed_tensors_0_20() -> None:
    w = _tiny_rows()
    q = Fp8Weight.quantize(w)
    assert int(q.weight_scale.view(np.uint32)[0]) == 0x31196446
    assert q.weight[0, :2].astype(F32).tolist() == [448.0, -112.0]
    q_ct, s_ct = _ct_installed(w, "float")
    assert_bits_equal(q.weight_scale, s_ct, "weight_scale")
    assert_bits_equal(q.weight.view(np.uint8), q_ct, "weight")


def test_q2_0_overflowing_inverse_scale_is_ggml_x86_64_bytes() -> None:
    """A block with amax <= 2^-128 (1/amax overflows f32): ggml's x86-64 build converts
    roundf(±inf or NaN) to INT_MIN, clamped to code 0 — every code 0; d = f16(amax) = 0.
    No NaN reaches an integer cast (warnings are errors here)."""
    import warnings

    w = np.zeros((1, 128), F32)
    w[0, :4] = [2.0**-130, -(2.0**-131), 0.0, 2.0**-149]
    w[0, 64:68] = [1.0, -1.0, 0.25, 0.0]  # an ordinary block beside it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = Q2_0Weight.quantize(w)
    got = q.blocks.reshape(-1).tobytes()
    assert got[:18] == bytes(18)
    # ordinary block: d = 1.0 (f16 0x3C00); codes roundf(x)+1: 1 → 2, -1 → 0, 0.25 and 0 → 1
    assert got[18:20] == b"\x00\x3c"
    assert got[20] == (2 | 0 << 2 | 1 << 4 | 1 << 6)
    assert got[21:36] == bytes([0x55]) * 15
    assert got == ggml_q2_0(w)


def test_nvfp4_shared_weight_amax_matches_modelopt_fused_siblings(rng: np.random.Generator) -> None:
    """ModelOpt gives fused siblings (gate/up, q/k/v) one amax: s2 = max(amax)/(6·448) and
    every block scale relative to that s2 (vLLM then uses one weight_scale_2 unchanged)."""
    gate = rng.standard_normal((8, 64)).astype(F32)
    up = (rng.standard_normal((8, 64)) * 0.1).astype(F32)
    shared = float(max(np.abs(gate).max(), np.abs(up).max()))
    for w in (gate, up):
        q = Nvfp4Weight.quantize(w, weight_amax=shared)
        p_ref, s_ref, s2_ref = modelopt_nvfp4(w, amax=shared)
        assert_bits_equal(np.float32(q.weight_scale_2), s2_ref, "weight_scale_2")
        assert_bits_equal(q.weight_scale.view(np.uint8), s_ref, "weight_scale")
        assert_bits_equal(q.weight, p_ref, "weight")
    with pytest.raises(MetraleError, match=r"weight amax 0\.5 is below the tensor's own amax"):
        Nvfp4Weight.quantize(gate, weight_amax=0.5)
