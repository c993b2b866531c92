"""NVFP4 × A4 block values: the tensor-core kernels' order (f32(S)·ws)·(as/4) gives the bits of
the contract's ((f32(S)·ws)·as)·0.25 (arithmetic.md § projection, § kernel-notes), checked over
every block dot |S| ≤ 2304 and every pair of non-negative finite e4m3 scales."""

from __future__ import annotations

import ml_dtypes
import numpy as np

F32 = np.float32


def test_a4_block_value_order_is_exact_for_every_dot_and_scale_pair() -> None:
    codes = np.arange(0x00, 0x7F, dtype=np.uint8)  # +0 .. 448: every non-negative finite e4m3
    scales = codes.view(ml_dtypes.float8_e4m3fn).astype(F32)
    s = np.arange(-2304, 2305, dtype=np.int32).astype(F32)[:, None]
    ws = scales[None, :]
    sw = s * ws  # [dots, weight scales]
    for a in scales:
        want = (sw * a) * F32(0.25)
        got = sw * (a * F32(0.25))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"ascale {a}"
        assert np.all(np.abs(want[want != 0]) >= F32(2.0**-20))  # never subnormal


def test_a4_block_value_order_is_associative_for_every_dot_and_scale_pair() -> None:
    """((f32(S)·ws)·as) equals f32(S)·(ws·as) bit for bit over every |S| ≤ 2304 and every pair
    of non-negative finite e4m3 scales: S has at most 12 significant bits and each scale 4, so
    every product is exact in f32 in either order (none underflows). This is why the mutation
    ``a4-block-value-order`` in tools/mutants.py is equivalent: no input can tell the orders
    apart."""
    codes = np.arange(0x00, 0x7F, dtype=np.uint8)
    scales = codes.view(ml_dtypes.float8_e4m3fn).astype(F32)
    s = np.arange(-2304, 2305, dtype=np.int32).astype(F32)[:, None]
    sw = s * scales[None, :]  # [dots, weight scales]
    for a in scales:
        want = sw * a
        got = s * (scales[None, :] * a)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"ascale {a}"
