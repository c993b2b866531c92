"""What FP8's 11-bit weight codes (metrale.reference.chain.FP8_FRAC) cost in accuracy, against
the 24-bit codes of arithmetic.md § codes24 (every e4m3 weight exact), on seeded Gaussian weights
quantized as compressed-tensors channel FP8 and Gaussian activations, CPU only. Also the same
rounding on BF16 weights at 11, 16 and 24 bits (the BF16 pair keeps codes24 in the revision).

    python docs/bench/runs-2026-12-05/fp8_codes_accuracy.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from metrale.reference.activations import quantize_a16, weight_codes
from metrale.reference.formats import Fp8Weight

N, K, M = 512, 4096, 64
rng = np.random.default_rng(0)
w = rng.standard_normal((N, K)).astype(np.float32)
x = rng.standard_normal((M, K))


def effective(q: np.ndarray, frac: int) -> np.ndarray:
    wb = weight_codes(q, frac)
    return np.ldexp(wb.codes, (wb.exp - frac)[..., None]).reshape(q.shape)


def bf16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


for name, q in (("fp8", Fp8Weight.quantize(w).weight), ("bf16", w.astype(ml_dtypes.bfloat16))):
    exact = q.astype(np.float64)
    y = x @ exact.T
    mag = np.abs(x) @ np.abs(exact).T
    for frac in (10, 15, 22):
        e = effective(q, frac)
        d = x @ e.T - y
        print(
            f"{name} codes of {frac + 1} bits: elements changed {100 * (e != exact).mean():.2f} %, "
            f"blocks {100 * (e != exact).reshape(N, -1, 16).any(-1).mean():.1f} %; "
            f"|error| / sum|w x| max {np.abs(d / mag).max():.2e}; "
            f"|error| / |y| median {np.median(np.abs(d) / np.abs(y)):.2e}; "
            f"bf16 outputs changed {100 * (bf16(y + d) != bf16(y)).mean():.2f} %"
        )

# For scale: the contract's own A16 rounding of the activations (§ a16: elements more than 2^7
# below their block maximum rounded at 2^(E−14)), against the exact bf16 rows, FP8 weights exact.
xb = x.astype(np.float32).astype(ml_dtypes.bfloat16)
a = quantize_a16(xb)
xa = np.ldexp(a.codes, (a.exp - 14)[..., None]).reshape(xb.shape)
q = Fp8Weight.quantize(w).weight.astype(np.float64)
y, ya = xb.astype(np.float64) @ q.T, xa @ q.T
print(
    f"A16 activations: elements changed {100 * (xa != xb.astype(np.float64)).mean():.2f} %; "
    f"|error| / |y| median {np.median(np.abs(ya - y) / np.abs(y)):.2e}; bf16 outputs changed "
    f"{100 * (bf16(ya) != bf16(y)).mean():.2f} %"
)
