"""SiLU and GELU (tanh form) as 65,536-entry fp32 tables indexed by bf16 bits (arithmetic.md § tables),
and ``act_mul``. The tables are package data (``data/*.f32``, little-endian); the CUDA kernels
read the same bytes.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal

import numpy as np

from metrale.errors import MetraleError
from metrale.reference.activations import check_rows
from metrale.reference.elements import BF16, to_bf16

Activation = Literal["silu", "gelu"]
ACTIVATIONS: tuple[Activation, ...] = ("silu", "gelu")
TABLE_FILES = {"silu": "silu_bf16.f32", "gelu": "gelu_tanh_bf16.f32"}


def compute_table(name: Activation) -> np.ndarray:
    """Generate a table: float64 math on every bf16 value, rounded once to f32.

    silu(x) = x / (1 + e^−x); gelu(x) = 0.5·x·(1 + tanh(z)), z = √(2/π)·(x + 0.044715·x³),
    evaluated in its cancellation-free form x / (1 + e^(−2z)) (equal in exact arithmetic; the
    tanh form loses up to 50 bits to cancellation for x below about −3).
    ±Inf map to their limits (+Inf, −0.0); NaN to NaN.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(BF16).astype(np.float64)
        if name == "silu":
            y = x / (1.0 + np.exp(-x))
        elif name == "gelu":
            z = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)
            y = x / (1.0 + np.exp(-2.0 * z))
        else:
            raise MetraleError(f"unknown activation {name!r} (want silu or gelu)")
    y = np.where(np.isposinf(x), np.inf, y)
    y = np.where(np.isneginf(x), -0.0, y)
    big_neg = np.isfinite(x) & (x < -700)  # e^-x overflows float64: the limit is −0
    y = np.where(big_neg, -0.0, y)
    return y.astype(np.float32)


@cache
def table(name: Activation) -> np.ndarray:
    """The shipped fp32 table for ``name`` (read-only, 65,536 entries)."""
    if name not in TABLE_FILES:
        raise MetraleError(f"unknown activation {name!r} (want silu or gelu)")
    raw = resources.files("metrale.reference.data").joinpath(TABLE_FILES[name]).read_bytes()
    t = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    t.setflags(write=False)
    return t


def act_mul(gate: np.ndarray, up: np.ndarray, activation: Activation = "silu") -> np.ndarray:
    """h = to_bf16(act[bits(gate)] · f32(up)), elementwise over bf16 [m, N]."""
    check_rows(gate, name="gate")
    check_rows(up, name="up")
    if gate.shape != up.shape:
        raise MetraleError(f"act_mul: gate shape {gate.shape} != up shape {up.shape}")
    a = table(activation)[gate.view(np.uint16)]
    with np.errstate(over="ignore", invalid="ignore"):  # Inf and Inf·0 = NaN are part of the rule
        return to_bf16(a * up.astype(np.float32))
