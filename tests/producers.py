"""Straight transcriptions of the weight formats' producers, written independently of metrale
(the expected side of the quantizer and converter tests).

* NVFP4: NVIDIA ModelOpt ``NVFP4QTensor`` (modelopt/torch/quantization/qtensor/nvfp4_tensor.py):
  ``get_weights_scaling_factor_2``, ``get_weights_scaling_factor`` (incl. the [2^-9, 448] clamp of
  ``_cast_per_block_scale_to_fp8``), ``quantize`` and ``_cast_fp4`` (searchsorted on the e2m1
  bounds), written here with torch ops on the CPU in float32, as the producer runs them.
* FP8 / int8 channel-wise: compressed-tensors ``calculate_qparams`` + ``_quantize`` (torch).
* Q2_0: ggml's ``quantize_row_q2_0_ref`` as a scalar loop over float32 values with C ``roundf``
  and a Python ``struct`` f16 for ``d``; the bytes are assembled here by hand.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import torch
from helpers import F32


def modelopt_nvfp4(w: np.ndarray, amax: float | None = None) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """ModelOpt NVFP4 quantize: (packed uint8 [N, K/2], scale uint8 bits [N, K/16], s2 f32);
    ``amax`` is the weight quantizer's amax when fused siblings share one (default: own)."""
    t = torch.from_numpy(np.asarray(w, dtype=F32).copy())
    n, k = t.shape
    a = t.abs().max().float() if amax is None else torch.tensor(amax, dtype=torch.float32)
    s2 = a / (6.0 * 448.0)
    per_block_amax = t.view(n, k // 16, 16).abs().amax(dim=-1).float()
    per_block_scale = per_block_amax / (6.0 * s2)
    per_block_scale[per_block_scale == 0] = 1.0
    scale = per_block_scale.clamp(min=2**-9, max=448.0).to(torch.float8_e4m3fn)
    scaled = t.view(n, k // 16, 16) / (scale.to(torch.float32) * s2).unsqueeze(-1)
    scaled = scaled.view(n, k)
    sign_bit = (scaled < 0).to(torch.uint8)
    a = scaled.abs()
    bounds = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    ordinal = torch.searchsorted(bounds, a, out_int32=True).to(torch.uint8)
    odd = torch.any(a.unsqueeze(-1) == bounds[[1, 3, 5]], dim=-1).to(torch.uint8)
    q = (sign_bit << 3) + ordinal + odd
    packed = (q[..., 1::2] << 4) | q[..., 0::2]
    return packed.numpy(), scale.view(torch.uint8).numpy(), np.float32(s2.item())


def ct_channel(w: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """compressed-tensors symmetric channel quantization: (codes, scale f32 [N])."""
    t = torch.from_numpy(np.asarray(w, dtype=F32).copy())
    min_vals = torch.min(t.amin(dim=1, keepdim=True), torch.zeros(1))
    max_vals = torch.max(t.amax(dim=1, keepdim=True), torch.zeros(1))
    q_min, q_max = (-448.0, 448.0) if kind == "fp8" else (-128.0, 127.0)
    bit_range = q_max - q_min
    max_val_pos = torch.max(torch.abs(min_vals), torch.abs(max_vals))
    scales = max_val_pos / (float(bit_range) / 2)
    scales = torch.where(scales == 0, torch.finfo(torch.float32).eps, scales)
    scaled = torch.clamp(t / scales, q_min, q_max)
    if kind == "fp8":
        q = scaled.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    else:
        q = torch.round(scaled).to(torch.int8).numpy()
    return q, scales[:, 0].numpy()


def _roundf(v: float) -> int:
    """C roundf: nearest, ties away from zero."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def ggml_q2_0(w: np.ndarray) -> bytes:
    """ggml quantize_row_q2_0_ref over each row (QK = 64): 18-byte blocks."""
    out = bytearray()
    for row in np.asarray(w, dtype=F32):
        for b in range(row.size // 64):
            x = row[64 * b : 64 * b + 64]
            amax = F32(0.0)
            for v in x:
                amax = max(amax, F32(abs(v)))
            d = amax
            with np.errstate(over="ignore"):
                idd = F32(1.0) / d if d > 0 else F32(0.0)
            qs = [0] * 16
            for j in range(64):
                with np.errstate(invalid="ignore"):
                    v = float(F32(x[j] * idd))
                # x86-64: (int) of a non-finite float is INT_MIN
                q = (_roundf(v) if math.isfinite(v) else -(2**31)) + 1
                q = 0 if q < 0 else 3 if q > 3 else q
                qs[j // 4] |= q << ((j % 4) * 2)
            out += struct.pack("<e", float(d)) + bytes(qs)
    return bytes(out)


def q2_decode(raw: bytes, n: int, k: int) -> np.ndarray:
    """Hand decode of Q2_0 bytes: element j = (qs[j/4] >> 2(j%4)) & 3, value (q - 1)·d."""
    out = np.empty((n, k), dtype=np.float64)
    nb = k // 64
    for r in range(n):
        for b in range(nb):
            off = 18 * (r * nb + b)
            (d,) = struct.unpack("<e", raw[off : off + 2])
            qs = raw[off + 2 : off + 18]
            for j in range(64):
                out[r, 64 * b + j] = (((qs[j // 4] >> (2 * (j % 4))) & 3) - 1) * d
    return out
