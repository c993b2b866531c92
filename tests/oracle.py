"""An independent derivation of the projections (arithmetic.md § modes, § projection, § tree) and
of LoRA and the FFN layer (§ lora, § layer), written from the contract's text: float64 with one
explicit rounding to f32 per step (a float64 +, ·, / of f32 operands rounded once to f32 is the
f32 operation), exact integer dots in int64 / float64, the tree as a hand-written left-to-right
pairing, torch for the bf16 / e4m3 casts. Nothing here calls metrale's arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
from helpers import BF16, E2M1_VALUES, F32, torch_e4m3_bits, torch_e4m3_decode, torch_to_bf16_bits

from metrale.reference.formats import DenseWeight  # a container only: its weight is read here

BLOCK = 16
_E2M1 = np.array(E2M1_VALUES)


def f32(x: np.ndarray | float) -> np.ndarray:
    """One rounding of a float64 value to f32 (an exact float64 product / sum of f32 values
    rounded once is the f32 operation)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, dtype=np.float64).astype(F32)


def mul(a: np.ndarray, b: np.ndarray | float) -> np.ndarray:
    """f32 a · b."""
    with np.errstate(over="ignore", invalid="ignore"):
        return f32(np.asarray(a, np.float64) * np.asarray(b, np.float64))


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """f32 a + b (Inf − Inf = NaN as IEEE)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return f32(np.asarray(a, np.float64) + np.asarray(b, np.float64))


def to_bf16(x: np.ndarray) -> np.ndarray:
    """f32 -> bf16 (torch's RNE cast), every NaN as 0x7FC0."""
    x = np.asarray(x, dtype=F32)
    b = torch_to_bf16_bits(x)
    return np.where(np.isnan(x), np.uint16(0x7FC0), b).astype(np.uint16).view(BF16)


def e4m3(x: np.ndarray) -> np.ndarray:
    """f32 -> the e4m3 value (torch's cast) as f32, after a clamp to ±448."""
    return torch_e4m3_decode(torch_e4m3_bits(np.clip(np.asarray(x, F32), -448.0, 448.0)))


def e2m1_code2(v: np.ndarray) -> np.ndarray:
    """2·e2m1 of f32 values in [−6, 6], round to nearest, ties to the even nibble."""
    a = np.abs(np.asarray(v, np.float64))
    dist = np.abs(a[..., None] - _E2M1)
    best = dist.min(axis=-1, keepdims=True)
    cand = dist == best
    even = cand & (np.arange(8) % 2 == 0)  # on a tie one of the two candidates is even
    idx = np.where(even.any(-1), np.argmax(even, -1), np.argmax(cand, -1))
    return (np.sign(v) * 2 * _E2M1[idx]).astype(np.int64)


# --------------------------------------------------------------------------- activations


def bf16_field(x: np.ndarray) -> np.ndarray:
    return ((np.asarray(x).view(np.uint16).astype(np.int64) >> 7) & 0xFF).astype(np.int64)


def fixed_point(values: np.ndarray, field: np.ndarray, bias: int, frac: int) -> tuple[np.ndarray, np.ndarray]:
    """Per 16-block: E = max(field, 0 counted as 1) − bias; c = rne(v · 2^(frac − E))."""
    shp = (*values.shape[:-1], values.shape[-1] // BLOCK, BLOCK)
    f = field.reshape(shp)
    e = np.where(f == 0, 1, f).max(axis=-1) - bias
    with np.errstate(over="ignore", invalid="ignore"):
        c = np.rint(
            values.reshape(shp).astype(np.float64) * np.exp2((frac - e).astype(np.float64))[..., None]
        )
    return c, e


def a16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A16 of bf16 x [m, K]: codes float64 [m, B, 16], E int [m, B], finite bool [m, B]."""
    field = bf16_field(x)
    c, e = fixed_point(x.astype(np.float64), field, 127, 14)
    finite = (field.reshape(c.shape) != 255).all(axis=-1)
    return np.where(finite[..., None], c, 0.0), e, finite


def a4(x: np.ndarray, input_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A4 (vLLM's ref_nvfp4_quant, g = 1/input_scale): codes int [m, B, 16], scales f32 [m, B],
    finite [m, B]."""
    m, k = x.shape
    xb = x.astype(np.float64).reshape(m, k // BLOCK, BLOCK)
    finite = np.isfinite(xb).all(axis=-1)
    xb = np.where(finite[..., None], xb, 0.0)
    g = f32(1.0 / np.float64(F32(input_scale)))
    amax = np.abs(xb).max(axis=-1)
    s = mul(g, mul(amax, f32(1.0 / 6.0)))
    scale = e4m3(np.minimum(s, 448.0))
    inv_g = f32(1.0 / np.float64(g))
    d = mul(scale, inv_g)
    with np.errstate(divide="ignore", over="ignore"):
        os_ = np.where(d == 0, F32(0), f32(1.0 / np.where(d == 0, 1.0, d.astype(np.float64))))
    prod = mul(xb, os_[..., None])
    prod = np.where(np.isnan(prod), 0.0, prod)
    return e2m1_code2(np.clip(prod, -6.0, 6.0)), scale, finite


def a8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A8 per row: q int [m, K], s f32 [m] (NaN for a row holding Inf/NaN)."""
    xf = x.astype(np.float64)
    finite = np.isfinite(xf).all(axis=1)
    xf = np.where(finite[:, None], xf, 0.0)
    amax = np.abs(xf).max(axis=1)
    s = f32(amax / 127.0)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.where(amax == 0, F32(0), f32(127.0 / np.where(amax == 0, 1.0, amax)))
    prod = mul(xf, inv[:, None])
    prod = np.where(np.isnan(prod), 0.0, prod)
    q = np.clip(np.rint(prod), -128, 127).astype(np.int64)
    return q, np.where(finite, s, F32(np.nan)).astype(F32)


# --------------------------------------------------------------------------- weights


def nvfp4_codes(packed: np.ndarray) -> np.ndarray:
    """2·e2m1 int [N, K] of ModelOpt bytes (even k in the low nibble, bit 3 the sign)."""
    nib = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.int64)
    nib[:, 0::2], nib[:, 1::2] = packed & 15, packed >> 4
    return (np.where(nib & 8, -2, 2) * _E2M1[nib & 7]).astype(np.int64)


def q2_codes(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GGUF Q2_0 blocks [N, K/64, 18]: (q − 1) int [N, K], d f32 [N, K/64]."""
    n, nb, _ = blocks.shape
    d = np.ascontiguousarray(blocks[..., :2]).view("<f2")[..., 0].astype(F32)
    j = np.arange(64)
    q = (blocks[..., 2:][..., j // 4] >> (2 * (j % 4))) & 3
    return q.reshape(n, nb * 64).astype(np.int64) - 1, d


def codes24(w: np.ndarray, frac: int = 22) -> tuple[np.ndarray, np.ndarray]:
    """FP8 (e4m3) or BF16 weights [N, K]: c float64 [N, B, 16], F int [N, B] (scale 2^(F−frac);
    frac 10: the chain's FP8 codes)."""
    if w.dtype == BF16:
        field, bias = bf16_field(w), 127
    else:
        field, bias = ((np.asarray(w).view(np.uint8).astype(np.int64) >> 3) & 0xF), 7
    return fixed_point(w.astype(np.float64), field, bias, frac)


# --------------------------------------------------------------------------- tree and roots


def pairing(v: np.ndarray) -> np.ndarray:
    """The tree over axis 0 of f32 block values [B, ...]: −0.0 padding to a power of two, then
    (0, 1), (2, 3), … added left to right, one f32 rounding per add, level by level."""
    level = [np.asarray(x, dtype=F32) for x in v]
    size = 1
    while size < len(level):
        size *= 2
    level += [np.full(level[0].shape, -0.0, dtype=F32)] * (size - len(level))
    while len(level) > 1:
        level = [add(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def _dot(wc: np.ndarray, ac: np.ndarray) -> np.ndarray:
    """Exact per-block dots: weight codes [N, B, 16] · activation codes [m, B, 16] -> [B, m, N]."""
    return np.einsum("nbj,mbj->bmn", wc.astype(np.int64), ac.astype(np.int64))


def tree_root(x: np.ndarray, w: object, mode: str) -> np.ndarray:
    """f32 [m, N]: the tree over the block values (NaN for a non-finite activation block) of
    bf16 rows x [m, K], before the row scale."""
    nb = x.shape[1] // BLOCK
    fmt = w.format  # type: ignore[attr-defined]
    if mode == "A4":
        ac, asc, finite = a4(x, float(w.input_scale))  # type: ignore[attr-defined]
        wc = nvfp4_codes(w.weight).reshape(-1, nb, BLOCK)  # type: ignore[attr-defined]
        ws = torch_e4m3_decode(np.asarray(w.weight_scale).view(np.uint8))  # type: ignore[attr-defined]
        s = f32(_dot(wc, ac))
        v = mul(mul(mul(s, ws.T[:, None, :]), asc.T[:, :, None]), 0.25)
    else:
        ac, e, finite = a16(x)
        p2 = np.exp2(e.T.astype(np.float64))[:, :, None]  # 2^E [B, m, 1]
        if fmt == "nvfp4":
            wc = nvfp4_codes(w.weight).reshape(-1, nb, BLOCK)  # type: ignore[attr-defined]
            ws = torch_e4m3_decode(np.asarray(w.weight_scale).view(np.uint8))  # type: ignore[attr-defined]
            v = mul(mul(f32(_dot(wc, ac)), ws.T[:, None, :]), p2 * 2.0**-15)
        elif fmt == "q2_0":
            qc, d = q2_codes(w.blocks)  # type: ignore[attr-defined]
            dd = np.repeat(d, 4, axis=1)  # [N, B]
            v = mul(mul(f32(_dot(qc.reshape(-1, nb, BLOCK), ac)), dd.T[:, None, :]), p2 * 2.0**-14)
        else:
            c, fe = codes24(w.weight)  # type: ignore[attr-defined]
            s = np.einsum("nbj,mbj->bmn", c, ac)  # exact in float64: |S| < 2^42
            v = f32(s * np.exp2((fe.T[:, None, :] + e.T[:, :, None] - 36).astype(np.float64)))
    return pairing(np.where(finite.T[:, :, None], v, F32(np.nan)))


def root(x: np.ndarray, w: object, mode: str, summed: Callable = tree_root) -> np.ndarray:
    """f32 [m, N] after the row scale and before to_bf16 for bf16 rows x [m, K] (``summed``:
    the sum over blocks before the row scale, ``tree_root`` or ``chain_root``)."""
    fmt = w.format  # type: ignore[attr-defined]
    r = summed(x, w, mode)
    if fmt == "nvfp4" and mode == "A4":
        return mul(r, mul(F32(w.input_scale), F32(w.weight_scale_2)))  # type: ignore[attr-defined]
    if fmt == "nvfp4":
        return mul(r, F32(w.weight_scale_2))  # type: ignore[attr-defined]
    if fmt == "fp8":
        return mul(r, w.weight_scale[None, :])  # type: ignore[attr-defined]
    return r


def project(x: np.ndarray, w: object, mode: str) -> np.ndarray:
    """bf16 [m, N]: to_bf16(root) for A16 / A4; W8A8 × A8: to_bf16((f32(S) · s_a) · s_w)."""
    if mode == "A8":
        q, s_a = a8(x)
        s = q @ np.asarray(w.weight, dtype=np.int64).T  # type: ignore[attr-defined]
        return to_bf16(mul(mul(f32(s), s_a[:, None]), w.weight_scale[None, :]))  # type: ignore[attr-defined]
    return to_bf16(root(x, w, mode))


# --------------------------------------------------------------------------- the block-value chain

PART = 64  # blocks per chain (docs/chain-revision.md)


def rne_f32(x: Fraction) -> F32:
    """The f32 nearest the rational x, ties to the even code, ±Inf past f32's range."""
    if abs(x) >= Fraction(2**128 - 2**103):  # (2 − 2^-24)·2^127, the overflow threshold
        return F32(np.inf) if x > 0 else F32(-np.inf)
    f = F32(float(x))
    with np.errstate(over="ignore"):
        cands = [f, np.nextafter(f, F32(np.inf)), np.nextafter(f, F32(-np.inf))]
    cands = [y for y in cands if np.isfinite(y)]
    dist = [abs(Fraction(float(y)) - x) for y in cands]
    best = [y for y, d in zip(cands, dist, strict=True) if d == min(dist)]
    if len(best) == 1:
        return best[0]
    return next(y for y in best if int(y.view(np.uint32)) % 2 == 0)


def fma(p: float, f: float, c: float) -> F32:
    """RNE_f32(p·f + c) of f32 scalars from exact rationals; a zero sum takes IEEE's sign
    (−0 only when p·f and c are both −0); non-finite operands by float64's IEEE rules."""
    p, f, c = F32(p), F32(f), F32(c)
    if not (np.isfinite(p) and np.isfinite(f) and np.isfinite(c)):
        with np.errstate(invalid="ignore", over="ignore"):
            return F32(np.float64(p) * np.float64(f) + np.float64(c))
    x = Fraction(float(p)) * Fraction(float(f)) + Fraction(float(c))
    if x == 0:
        prod_zero = p == 0 or f == 0
        both_neg_zero = prod_zero and np.signbit(p) != np.signbit(f) and c == 0 and np.signbit(c)
        return F32(-0.0) if both_neg_zero else F32(0.0)  # exact cancellation gives +0
    return rne_f32(x)


def chain(p: np.ndarray, f: np.ndarray | None) -> np.ndarray:
    """Part roots over axis 0 of [B, ...]: per aligned part of 64 blocks, c = −0.0, then
    c = fma(p_b, f_b, c) (f None: c = c + p_b, one f32 add), elementwise over the rest."""
    nb = p.shape[0]
    roots = []
    for lo in range(0, nb, PART):
        c = np.full(p.shape[1:], -0.0, dtype=F32)
        for b in range(lo, min(nb, lo + PART)):
            if f is None:
                c = add(c, p[b])
            else:
                fb = np.broadcast_to(f[b], c.shape)
                c = np.array(
                    [fma(x, y, z) for x, y, z in zip(p[b].ravel(), fb.ravel(), c.ravel(), strict=True)]
                )
                c = c.astype(F32).reshape(p.shape[1:])
        roots.append(c)
    return np.stack(roots)


def chain_root(x: np.ndarray, w: object, mode: str) -> np.ndarray:
    """f32 [m, N] under the chain (docs/chain-revision.md): block terms P_b, f_b (FP8/BF16: the
    block values), chains over 64-block parts, the tree (``pairing``) over the part roots."""
    nb = x.shape[1] // BLOCK
    fmt = w.format  # type: ignore[attr-defined]
    f = None
    if mode == "A4":
        ac, asc, finite = a4(x, float(w.input_scale))  # type: ignore[attr-defined]
        wc = nvfp4_codes(w.weight).reshape(-1, nb, BLOCK)  # type: ignore[attr-defined]
        f = torch_e4m3_decode(np.asarray(w.weight_scale).view(np.uint8)).T[:, None, :]  # type: ignore[attr-defined]
        p = mul(mul(f32(_dot(wc, ac)), asc.T[:, :, None]), 0.25)
    else:
        ac, e, finite = a16(x)
        p2 = np.exp2(e.T.astype(np.float64))[:, :, None]  # 2^E [B, m, 1]
        if fmt == "nvfp4":
            wc = nvfp4_codes(w.weight).reshape(-1, nb, BLOCK)  # type: ignore[attr-defined]
            f = torch_e4m3_decode(np.asarray(w.weight_scale).view(np.uint8)).T[:, None, :]  # type: ignore[attr-defined]
            p = mul(f32(_dot(wc, ac)), p2 * 2.0**-15)
        elif fmt == "q2_0":
            qc, d = q2_codes(w.blocks)  # type: ignore[attr-defined]
            f = np.repeat(d, 4, axis=1).T[:, None, :]  # [B, 1, N]
            p = mul(f32(_dot(qc.reshape(-1, nb, BLOCK), ac)), p2 * 2.0**-14)
        else:
            frac = 10 if fmt == "fp8" else 22  # the chain's FP8 codes: 11 bits
            c, fe = codes24(w.weight, frac)  # type: ignore[attr-defined]
            s = np.einsum("nbj,mbj->bmn", c, ac)  # exact in float64: |S| < 2^42
            p = f32(s * np.exp2((fe.T[:, None, :] + e.T[:, :, None] - 14 - frac).astype(np.float64)))
    p = np.where(finite.T[:, :, None], p, F32(np.nan)).astype(F32)
    return pairing(chain(p, None if f is None else np.asarray(f, F32)))


# --------------------------------------------------------------------------- LoRA and the layer


def silu_f32(g: np.ndarray) -> np.ndarray:
    """silu of bf16 values, x / (1 + e^−x) in float64 rounded once to f32; the limits at ±Inf
    (+Inf, −0.0), NaN stays NaN."""
    x = g.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        y = x / (1.0 + np.exp(-x))
    return f32(np.where(np.isneginf(x), -0.0, np.where(np.isposinf(x), np.inf, y)))


def lora_delta(x: np.ndarray, base: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """to_bf16(f32(base) + f32(scale)·p): t = bf16(x @ Aᵀ) (BF16 × A16), r padded to 16 with
    zeros, p the f32 root of t @ Bᵀ."""

    r = a.shape[0]
    rp = -(-r // 16) * 16
    t = np.zeros((x.shape[0], rp), dtype=BF16)
    t[:, :r] = to_bf16(root(x, DenseWeight(weight=a), "A16"))
    bp = np.zeros((b.shape[0], rp), dtype=BF16)
    bp[:, :r] = b
    p = root(t, DenseWeight(weight=bp), "A16")
    return to_bf16(add(base.astype(F32), mul(F32(scale), p)))


def ffn(
    x: np.ndarray, gate: object, up: object, down: object, lora: object | None, mode: str = "A16"
) -> np.ndarray:
    """down(bf16(silu(gate'(x)) · up'(x)))' where ' adds the projection's LoRA delta."""

    def proj(inp: np.ndarray, w: object, which: str) -> np.ndarray:
        y = project(inp, w, mode)
        ad = None if lora is None else getattr(lora, which)
        return y if ad is None else lora_delta(inp, y, ad.a, ad.b, float(ad.scale))

    g = proj(x, gate, "gate_proj")
    u = proj(x, up, "up_proj")
    h = to_bf16(mul(silu_f32(g), u.astype(np.float64)))
    return proj(h, down, "down_proj")
