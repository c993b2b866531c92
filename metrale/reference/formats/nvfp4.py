"""NVFP4 weights in NVIDIA ModelOpt's layout (arithmetic.md § nvfp4-format).

``weight`` uint8 [N, K/2] (even k in the low nibble), ``weight_scale`` e4m3 [N, K/16]
row-major, ``weight_scale_2`` f32 scalar, optional ``input_scale`` f32 scalar (declares A4).
Dequantized value: e2m1 · f32(weight_scale) · weight_scale_2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrale.reference.elements import (
    E2M1_CODE2,
    E2M1_MAGNITUDES,
    E4M3,
    e2m1_rne,
    e4m3_saturate,
)
from metrale.reference.formats._checks import (
    check_array,
    check_name,
    check_scalar,
    check_source,
    require,
    scalar_f32,
    tensor,
)

BLOCK = 16
F32 = np.float32


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """uint8 [N, K/2] -> nibbles uint8 [N, K] (low nibble first)."""
    out = np.empty((*packed.shape[:-1], packed.shape[-1] * 2), dtype=np.uint8)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed >> 4
    return out


def pack_nibbles(nibbles: np.ndarray) -> np.ndarray:
    """nibbles uint8 [N, K] -> uint8 [N, K/2], even k in the low nibble."""
    nib = np.asarray(nibbles, dtype=np.uint8)
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)


def nibble_values(nibbles: np.ndarray) -> np.ndarray:
    """e2m1 value (f32) of each nibble: bit 3 sign, bits 0-2 index the magnitudes."""
    mag = E2M1_MAGNITUDES[nibbles & 0x7]
    return np.where(nibbles & 0x8, -mag, mag).astype(F32)


#: Elements of the source weight quantized per step (a row chunk that stays in cache).
_CHUNK_ELEMENTS = 1 << 18


def _quantize_rows(w32: np.ndarray, s2: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Block scales e4m3 [n, K/16] and packed codes uint8 [n, K/2] of f32 rows [n, K] under the
    tensor scale ``s2`` (``Nvfp4Weight.quantize``)."""
    n, k = w32.shape
    blocks = w32.reshape(n, k // BLOCK, BLOCK)
    amax_b = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q_scale = amax_b / (F32(6.0) * s2) if s2 != 0 else np.zeros_like(amax_b)
    q_scale = np.where(q_scale == 0, F32(1.0), q_scale).astype(F32)
    # ModelOpt clamps to [2^-9, 448] before the cast: no block scale underflows to 0.
    scale = e4m3_saturate(np.maximum(q_scale, F32(2.0**-9)))
    denom = (scale.astype(F32) * s2)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(denom != 0, blocks / np.where(denom != 0, denom, 1), 0).astype(F32)
    mag = e2m1_rne(np.abs(scaled)).view(np.uint8) & np.uint8(0x7)
    nib = (mag | np.where(scaled < 0, np.uint8(8), np.uint8(0))).astype(np.uint8)
    return scale, pack_nibbles(nib.reshape(n, k))


@dataclass(frozen=True)
class Nvfp4Weight:
    """An NVFP4 weight [N, K] in ModelOpt's layout."""

    weight: np.ndarray
    weight_scale: np.ndarray
    weight_scale_2: np.float32
    input_scale: np.float32 | None = None
    name: str = "weight"

    format = "nvfp4"

    def __post_init__(self) -> None:
        self.validate()

    @property
    def n(self) -> int:
        return int(self.weight.shape[0])

    @property
    def k(self) -> int:
        return int(self.weight.shape[1]) * 2

    @property
    def declares_a4(self) -> bool:
        """Whether the checkpoint declares FP4 activations (an ``input_scale`` is present)."""
        return self.input_scale is not None

    @property
    def nbytes(self) -> int:
        return int(self.weight.nbytes + self.weight_scale.nbytes + 4)

    def validate(self) -> None:
        """Check dtypes, shapes and finiteness; raise MetraleError naming the tensor."""
        check_name("Nvfp4Weight", self.name)
        nm = self.name
        require(
            isinstance(self.weight, np.ndarray) and self.weight.ndim == 2,
            f"{nm}.weight: expected a 2-D uint8 array [N, K/2]",
        )
        n, half = self.weight.shape
        require(
            (2 * half) % BLOCK == 0 and half > 0,
            f"{nm}.weight: K={2 * half} is not a multiple of {BLOCK}",
        )
        check_array(f"{nm}.weight", self.weight, np.dtype(np.uint8), (n, half))
        check_array(f"{nm}.weight_scale", self.weight_scale, E4M3, (n, 2 * half // BLOCK))
        s = self.weight_scale.astype(F32)
        require(bool(np.isfinite(s).all()), f"{nm}.weight_scale: holds NaN")
        check_scalar(f"{nm}.weight_scale_2", self.weight_scale_2)
        if self.input_scale is not None:
            check_scalar(f"{nm}.input_scale", self.input_scale, positive=True)

    @classmethod
    def from_tensors(cls, t: dict[str, np.ndarray], *, name: str = "weight") -> Nvfp4Weight:
        """From a module's tensors as ModelOpt writes them (by suffix): ``weight`` uint8
        [N, K/2], ``weight_scale`` e4m3 [N, K/16], scalar ``weight_scale_2`` and optional
        ``input_scale`` (shape (), [1] or [1, 1])."""
        inp = t.get("input_scale") if isinstance(t, dict) else None
        return cls(
            weight=np.ascontiguousarray(tensor(t, "weight", name)),
            weight_scale=np.ascontiguousarray(tensor(t, "weight_scale", name)),
            weight_scale_2=scalar_f32(tensor(t, "weight_scale_2", name), f"{name}.weight_scale_2"),
            input_scale=None if inp is None else scalar_f32(inp, f"{name}.input_scale"),
            name=name,
        )

    def tensors(self) -> dict[str, np.ndarray]:
        """The on-disk tensors by suffix, as ModelOpt writes them (scalars as f32 shape ())."""
        out = {
            "weight": self.weight,
            "weight_scale": self.weight_scale,
            "weight_scale_2": np.array(self.weight_scale_2, dtype=F32),
        }
        if self.input_scale is not None:
            out["input_scale"] = np.array(self.input_scale, dtype=F32)
        return out

    def nibbles(self) -> np.ndarray:
        """uint8 [N, K] nibble per element."""
        return unpack_nibbles(self.weight)

    def codes(self) -> np.ndarray:
        """int8 [N, K] integer weight codes 2·e2m1 ∈ [−12, 12]."""
        return E2M1_CODE2[self.nibbles()]

    def dequantize(self) -> np.ndarray:
        """f32 [N, K]: e2m1 · f32(scale) · weight_scale_2, in that fp32 order."""
        vals = nibble_values(self.nibbles()).reshape(self.n, -1, BLOCK)
        scaled = vals * self.weight_scale.astype(F32)[..., None]
        return (scaled * F32(self.weight_scale_2)).reshape(self.n, self.k)

    @classmethod
    def quantize(
        cls,
        w: np.ndarray,
        *,
        input_amax: float | None = None,
        weight_amax: float | None = None,
        name: str = "weight",
    ) -> Nvfp4Weight:
        """Quantize a float weight [N, K] as ModelOpt does (fp32 arithmetic).

        s2 = amax(W)/(6·448); block scale = e4m3(clamp(amax_b/(6·s2), 2^-9, 448)), zero → 1.0
        (an all-zero weight gets s2 = 0 and every block scale 1.0, where ModelOpt would give NaN);
        codes = e2m1_rne(w / (f32(scale)·s2)), sign from w < 0. ``input_amax`` (calibrated
        amax of the activations) adds input_scale = amax/(6·448). ``weight_amax``
        (≥ the tensor's own amax) replaces amax(W) in s2: the amax fused siblings share
        (docs/arithmetic.md, "NVFP4 fused siblings").
        """
        w32 = check_source(name, w, BLOCK)
        n, k = w32.shape
        own = F32(np.abs(w32).max())
        if weight_amax is not None:
            require(
                bool(np.isfinite(weight_amax)) and F32(weight_amax) >= own,
                f"{name}: weight amax {weight_amax!r} is below the tensor's own amax {float(own)!r}",
            )
            own = F32(weight_amax)
        s2 = own / F32(6.0 * 448.0)
        scale = np.empty((n, k // BLOCK), dtype=E4M3)
        packed = np.empty((n, k // 2), dtype=np.uint8)
        # Rows are independent once s2 is known: a chunk of rows at a time stays in cache.
        step = max(1, _CHUNK_ELEMENTS // k)
        for r in range(0, n, step):
            scale[r : r + step], packed[r : r + step] = _quantize_rows(w32[r : r + step], s2)
        input_scale = None
        if input_amax is not None:
            require(
                np.isfinite(input_amax) and input_amax > 0,
                f"{name}: input amax must be finite and positive, got {input_amax!r}",
            )
            input_scale = F32(input_amax) / F32(6.0 * 448.0)
        return cls(
            weight=packed,
            weight_scale=scale,
            weight_scale_2=F32(s2),
            input_scale=input_scale,
            name=name,
        )
