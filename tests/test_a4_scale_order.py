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
