"""SiLU / GELU tables (arithmetic.md § tables): pinned checksums, every entry against independent float64
math (``math.exp`` / ``math.tanh``, rounded once to f32), and ``act_mul`` on named cases."""

from __future__ import annotations

import hashlib
import math
from importlib import resources

import numpy as np
import pytest
from helpers import BF16, F32, assert_bits_equal, torch_to_bf16_bits

from metrale.errors import MetraleError
from metrale.reference.tables import TABLE_FILES, act_mul, table

#: The pinned data: sha256 of the shipped little-endian f32 files.
SHA256 = {
    "silu": "8a018dd2671a82d77678bf3edf075e4c3b9f6a63df189577afca3bd63a3a8361",
    "gelu": "2370ca94d4f638ae0fb77a2ce93854b173be016872b4a20231eb4ac324ff28dd",
}
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def silu64(x: float) -> float:
    """x / (1 + e^−x) in float64; limits at ±Inf (+Inf, −0.0)."""
    if math.isnan(x):
        return math.nan
    if x == math.inf:
        return math.inf
    if x == -math.inf:
        return -0.0
    e = math.exp(-x) if -x < 709.0 else math.inf
    return x / (1.0 + e)


def gelu64(x: float) -> float:
    """x / (1 + e^(−2z)), z = √(2/π)·(x + 0.044715·x³), in float64 (the cancellation-free form of
    0.5·x·(1 + tanh z)); limits at ±Inf (+Inf, −0.0)."""
    if math.isnan(x):
        return math.nan
    if x == math.inf:
        return math.inf
    if x == -math.inf:
        return -0.0
    try:
        cube = x**3
    except OverflowError:
        cube = math.copysign(math.inf, x)
    z = _SQRT_2_OVER_PI * (x + 0.044715 * cube)
    e = math.exp(-2.0 * z) if -2.0 * z < 709.0 else math.inf
    return x / (1.0 + e)


def gelu64_tanh(x: float) -> float:
    """The textbook tanh form, for the formula-equivalence check where it is well conditioned."""
    return 0.5 * x * (1.0 + math.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


ORACLES = {"silu": silu64, "gelu": gelu64}
with np.errstate(invalid="ignore"):
    ALL_BF16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(BF16).astype(np.float64)


@pytest.mark.parametrize("name", ["silu", "gelu"])
def test_table_checksum(name: str) -> None:
    raw = resources.files("metrale.reference.data").joinpath(TABLE_FILES[name]).read_bytes()
    assert len(raw) == 65536 * 4
    assert hashlib.sha256(raw).hexdigest() == SHA256[name]


@pytest.mark.parametrize("name", ["silu", "gelu"])
def test_table_every_entry(name: str) -> None:
    """All 65,536 bf16 inputs incl. ±0, subnormals, ±Inf and every NaN pattern: bit-equal to the
    float64 formula rounded once to f32, wherever that formula is well conditioned (SiLU: all
    of it; GELU: its cancellation-free form everywhere)."""
    f = ORACLES[name]
    with np.errstate(over="ignore"):
        want = np.array([f(float(v)) for v in ALL_BF16], dtype=np.float64).astype(F32)
    t = table(name)  # type: ignore[arg-type]
    assert t.dtype == F32 and t.shape == (65536,)
    nan = np.isnan(want)
    assert (np.isnan(t) == nan).all()
    assert nan.sum() == 2 * 127  # every bf16 NaN pattern, both signs
    check = ~nan
    assert_bits_equal(t[check], want[check], f"{name} table")


def test_gelu_tanh_form_agrees_where_well_conditioned() -> None:
    """Where 1 + tanh(z) does not cancel (x above about −2.9), the textbook tanh form rounded
    to f32 gives the same bits as the shipped table (so the table is the GELU of the contract)."""
    t = table("gelu")
    xs = [(i, float(v)) for i, v in enumerate(ALL_BF16) if math.isfinite(v) and -2.9 < v < 1e4]
    want = np.array([gelu64_tanh(x) for _, x in xs], dtype=np.float64).astype(F32)
    got = t[[i for i, _ in xs]]
    assert_bits_equal(got, want, "gelu tanh form")


@pytest.mark.parametrize(
    ("bits_", "silu", "gelu"),
    [(0x0000, 0.0, 0.0), (0x8000, -0.0, -0.0), (0x7F80, math.inf, math.inf), (0xFF80, -0.0, -0.0)],
)
def test_table_named_entries(bits_: int, silu: float, gelu: float) -> None:
    for name, want in (("silu", silu), ("gelu", gelu)):
        got = table(name)[bits_]  # type: ignore[arg-type]
        assert_bits_equal(np.array([got], F32), np.array([want], F32), f"{name}[{bits_:#06x}]")


def test_table_is_read_only() -> None:
    with pytest.raises(ValueError, match="read-only"):
        table("silu")[0] = 1.0


def _act_mul_oracle(g: np.ndarray, u: np.ndarray, f: object) -> np.ndarray:
    a = np.array([f(float(v)) for v in g.astype(np.float64).ravel()], dtype=np.float64)  # type: ignore[operator]
    with np.errstate(invalid="ignore", over="ignore"):
        h = a.astype(F32).reshape(g.shape) * u.astype(F32)
    out = torch_to_bf16_bits(h)
    return np.where(np.isnan(h), np.uint16(0x7FC0), out).view(BF16)


@pytest.mark.parametrize("name", ["silu", "gelu"])
def test_act_mul_named(name: str) -> None:
    """h = to_bf16(act(g) · f32(u)): zeros, signs, saturation to Inf, Inf·0 -> canonical NaN."""
    gate = np.array(
        [
            [
                0.0,
                -0.0,
                1.0,
                -1.0,
                2.5,
                -3.0,
                88.0,
                -88.0,
                np.inf,
                -np.inf,
                np.nan,
                1e38,
                0.5,
                -0.5,
                3e-39,
                10.0,
            ]
        ],
        F32,
    ).astype(BF16)
    up = np.array(
        [[1.0, 1.0, -2.0, 3.0, 1e38, 1e38, 0.0, 7.0, 0.0, 1.0, 1.0, 1e38, -1.0, 4.0, 1.0, 2.0**-130]], F32
    ).astype(BF16)
    got = act_mul(gate, up, name)  # type: ignore[arg-type]
    want = _act_mul_oracle(gate, up, ORACLES[name])
    assert_bits_equal(got, want, f"act_mul {name}")
    gb = got.view(np.uint16)
    assert gb[0, 8] == 0x7FC0 and gb[0, 10] == 0x7FC0  # Inf·0 and NaN gate
    assert gb[0, 11] == 0x7F80  # 1e38·1e38 overflows to +Inf


def test_act_mul_random(rng: np.random.Generator) -> None:
    gate = (rng.standard_normal((3, 32)) * 4).astype(F32).astype(BF16)
    up = rng.standard_normal((3, 32)).astype(F32).astype(BF16)
    for name in ("silu", "gelu"):
        assert_bits_equal(act_mul(gate, up, name), _act_mul_oracle(gate, up, ORACLES[name]), name)


def test_act_mul_validation() -> None:
    g = np.zeros((2, 16), BF16)
    with pytest.raises(MetraleError, match="gate shape"):
        act_mul(g, np.zeros((1, 16), BF16))
    with pytest.raises(MetraleError, match=r"up: dtype float32"):
        act_mul(g, np.zeros((2, 16), F32))
    with pytest.raises(MetraleError, match="unknown activation 'relu'"):
        act_mul(g, g, "relu")  # type: ignore[arg-type]
