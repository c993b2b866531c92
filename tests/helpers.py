"""Generic test helpers: raw bits, bf16 construction, torch bridges and independent oracles.

Nothing here calls the code under test; these are the independent sides of comparisons.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import ml_dtypes
import numpy as np
import torch

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
F32 = np.float32
#: fp32 unit roundoff.
U32 = 2.0**-24
#: The e2m1 magnitudes by nibble bits 0-2 (ModelOpt's ``e2m1_values``).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

_UINT_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a: np.ndarray | np.generic) -> np.ndarray:
    """The raw unsigned-integer bits of an array (uint8/16/32/64 by item size)."""
    a = np.asarray(a)
    return np.ascontiguousarray(a).view(_UINT_BY_SIZE[a.dtype.itemsize])


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """Assert two arrays are bit-for-bit equal (dtype itemsize and shape too)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    gb, wb = bits(got), bits(want)
    bad = np.argwhere(gb != wb)
    assert bad.size == 0, (
        f"{what}: {len(bad)} of {gb.size} differ; first at {tuple(bad[0])}: "
        f"got {gb[tuple(bad[0])]:#x}, want {wb[tuple(bad[0])]:#x}"
    )


def bf16_from_bits(u16: np.ndarray | list[int]) -> np.ndarray:
    """bf16 array from uint16 bit patterns."""
    return np.asarray(u16, dtype=np.uint16).view(BF16)


def bf16(values: object) -> np.ndarray:
    """bf16 array from values exactly representable in bf16 (asserted)."""
    v = np.asarray(values, dtype=np.float64)
    b = v.astype(F32).astype(BF16)
    exact = (b.astype(np.float64) == v) | np.isnan(v)
    assert exact.all(), f"not bf16-exact: {v[~exact][:4]}"
    return b


def rand_bf16(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    """Normal random values times ``scale``, rounded to bf16."""
    return (rng.standard_normal(shape) * scale).astype(F32).astype(BF16)


def torch_bf16(x: np.ndarray) -> torch.Tensor:
    """A torch bfloat16 tensor with the same bits as numpy bf16 ``x``."""
    return torch.from_numpy(np.ascontiguousarray(x).view(np.int16).copy()).view(torch.bfloat16)


def torch_to_bf16_bits(x32: np.ndarray) -> np.ndarray:
    """torch's float32 -> bfloat16 cast (RNE), as uint16 bits."""
    t = torch.from_numpy(np.ascontiguousarray(x32, dtype=F32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def torch_e4m3_bits(x32: np.ndarray) -> np.ndarray:
    """torch's float32 -> float8_e4m3fn cast (no saturation of its own), as uint8 bits."""
    t = torch.from_numpy(np.ascontiguousarray(x32, dtype=F32)).to(torch.float8_e4m3fn)
    return t.view(torch.uint8).numpy()


def torch_e4m3_decode(codes: np.ndarray) -> np.ndarray:
    """float32 values of e4m3 bit patterns, decoded by torch."""
    t = torch.from_numpy(np.asarray(codes, dtype=np.uint8).copy()).view(torch.float8_e4m3fn)
    return t.to(torch.float32).numpy()


def cast_to_fp4(x: np.ndarray) -> np.ndarray:
    """vLLM's ``cast_to_fp4`` threshold table (tests/kernels/quantization/nvfp4_utils.py), float32."""
    x = np.asarray(x, dtype=F32)
    sign = np.sign(x)
    a = np.abs(x).copy()
    out = np.full_like(a, np.nan)
    out[(a >= 0.0) & (a <= 0.25)] = 0.0
    out[(a > 0.25) & (a < 0.75)] = 0.5
    out[(a >= 0.75) & (a <= 1.25)] = 1.0
    out[(a > 1.25) & (a < 1.75)] = 1.5
    out[(a >= 1.75) & (a <= 2.5)] = 2.0
    out[(a > 2.5) & (a < 3.5)] = 3.0
    out[(a >= 3.5) & (a <= 5.0)] = 4.0
    out[a > 5.0] = 6.0
    return (out * sign).astype(F32)


def bf16_block_exponent(x: np.ndarray) -> np.ndarray:
    """Block exponent E per 16-block of a finite bf16 row set, from math.frexp (independent of
    bit fields): E = max_j floor(log2|x_j|), subnormals and zeros counting as −126."""
    xf = np.asarray(x, dtype=np.float64)
    m, k = xf.shape
    e = np.full((m, k // 16), -126, dtype=np.int64)
    for r in range(m):
        for b in range(k // 16):
            for v in xf[r, 16 * b : 16 * b + 16]:
                if v != 0 and abs(v) >= 2.0**-126:
                    e[r, b] = max(e[r, b], math.frexp(v)[1] - 1)
    return e


def kv_cache(model: Any, cache: Any) -> dict[str, Any]:
    """A transformers forward's KV-cache keyword argument: ``cache`` where the forward takes it
    (transformers 5.24 on, where ``past_key_values`` warns and is to go), else ``past_key_values``."""
    params = inspect.signature(model.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache}
