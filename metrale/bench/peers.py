"""The torch peers, on the same GPU and with the same FFN math as metrale (gate, up,
silu·mul, down; gate and up as one [2I, H] weight unless named otherwise):

* ``bf16``   bf16 cuBLAS, gate and up fused; ``bf16-2`` the same with two matmuls;
* ``int4``   int4 weight-only tinygemm ``torch._weight_int4pack_mm`` (group 128);
* ``int8``   ``torch._int_mm`` with per-token int8 quantization of x and h in torch;
* ``fp8``    FP8 ``torch._scaled_mm`` (e4m3, per-row weight scales, per-token activation scales);
* ``gl-*``   gemlite (Triton, optional; not exact): ``gl-w4`` / ``gl-w2`` A16W4 / A16W2 int with
  group 64, ``gl-w8fp8`` A16W8 FP8 weight-only, ``gl-a8w8`` A8W8 int8 dynamic, ``gl-a8w8fp8``
  A8W8 FP8 dynamic; the tuned configurations of its ``configs/h100.json`` are loaded first, so
  no autotuning runs inside the timings.

Their weights are random (their bits are not checked: they are speed references). A peer the
installed torch cannot run reads ``n/a`` with the reason; ops that want padded row counts get
the smallest count they accept (noted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metrale.bench.measure import rotation
from metrale.errors import MetraleError

PEERS: dict[str, str] = {
    "bf16": "bf16 cuBLAS (gate+up fused)",
    "bf16-2": "bf16 cuBLAS (gate, up separate)",
    "int4": "int4 tinygemm g128",
    "int8": "int8 _int_mm + per-token quant",
    "fp8": "FP8 _scaled_mm",
    "gl-w4": "gemlite A16W4 int g64",
    "gl-w2": "gemlite A16W2 int g64",
    "gl-w8fp8": "gemlite A16W8 FP8 weight-only",
    "gl-a8w8": "gemlite A8W8 int8 dynamic",
    "gl-a8w8fp8": "gemlite A8W8 FP8 dynamic",
}

#: gemlite peers: kind -> weight bits per element (group-64 scales and zeros come on top).
GEMLITE_BITS = {"gl-w4": 4, "gl-w2": 2, "gl-w8fp8": 8, "gl-a8w8": 8, "gl-a8w8fp8": 8}


class PeerUnavailable(MetraleError):
    """The installed torch cannot run this peer (the message says why)."""


@dataclass
class _Setup:
    """What every peer builder needs: torch, its device and generator, the shape, the row
    counts, and ``copies(weight_bytes)`` (layers to rotate over)."""

    torch: Any
    dev: Any
    gen: Any
    hidden: int
    inter: int
    ms: list[int]
    copies: Callable[[int], int]


#: A peer FFN: (weight bytes, ffn(layer index, rows) -> output, padded row count per m).
Built = tuple[int, Callable[[int, Any], Any], dict[int, int]]


def _silu_mul(t: Any, gu: Any, inter: int) -> Any:
    return t.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]


def _bf16(s: _Setup, fused: bool) -> Built:
    """bf16 cuBLAS: ``x @ W.T`` (gate and up as one [2I, H] weight when ``fused``)."""
    t, inter = s.torch, s.inter
    nb = 3 * s.hidden * inter * 2
    n = s.copies(nb)
    wgu = [(t.randn(2 * inter, s.hidden, generator=s.gen, device=s.dev) * 0.02).bfloat16() for _ in range(n)]
    wd = [(t.randn(s.hidden, inter, generator=s.gen, device=s.dev) * 0.02).bfloat16() for _ in range(n)]

    def ffn(i: int, xm: Any) -> Any:
        if fused:
            gu = xm @ wgu[i].t()
            gate, up = gu[:, :inter], gu[:, inter:]
        else:
            gate, up = xm @ wgu[i][:inter].t(), xm @ wgu[i][inter:].t()
        return (t.nn.functional.silu(gate) * up) @ wd[i].t()

    return nb, ffn, {m: m for m in s.ms}


def _int4(s: _Setup, x: Any) -> Built:
    """tinygemm ``_weight_int4pack_mm`` (group 128, bf16 scales and zeros)."""
    t, inter, g, dev = s.torch, s.inter, s.gen, s.dev
    nb = 3 * s.hidden * inter // 2 + 3 * (s.hidden * inter // 128) * 4
    n = s.copies(nb)

    def pack(rows: int, k: int) -> Any:
        u8 = t.randint(0, 256, (rows, k // 2), dtype=t.uint8, generator=g, device=dev)
        try:
            return t._convert_weight_to_int4pack(u8, 8)
        except Exception as exc1:  # torch < 2.5 wanted int32 [n, k] with values 0..15
            try:
                i32 = t.randint(0, 16, (rows, k), dtype=t.int32, generator=g, device=dev)
                return t._convert_weight_to_int4pack(i32, 8)
            except Exception:
                raise exc1 from None

    def scales(rows: int, k: int) -> Any:
        sz = t.rand(k // 128, rows, 2, generator=g, device=dev) * 0.01
        sz[..., 1] = 0.0
        return sz.bfloat16()

    try:
        wgu = [(pack(2 * inter, s.hidden), scales(2 * inter, s.hidden)) for _ in range(n)]
        wd = [(pack(s.hidden, inter), scales(s.hidden, inter)) for _ in range(n)]
        t._weight_int4pack_mm(x[:1], wgu[0][0], 128, wgu[0][1])
    except Exception as exc:
        raise PeerUnavailable(_first_line(exc)) from None

    def ffn(i: int, xm: Any) -> Any:
        gu = t._weight_int4pack_mm(xm, wgu[i][0], 128, wgu[i][1])
        return t._weight_int4pack_mm(_silu_mul(t, gu, inter), wd[i][0], 128, wd[i][1])

    return nb, ffn, {m: m for m in s.ms}


def _quantized(s: _Setup, kind: str) -> Built:
    """int8 ``_int_mm`` or FP8 ``_scaled_mm``: per-row weight scales, per-token activation
    quantization in torch; rows padded to the smallest count the op accepts."""
    t, inter, g, dev = s.torch, s.inter, s.gen, s.dev
    nb = 3 * s.hidden * inter + 4 * (2 * inter + s.hidden)
    n = s.copies(nb)
    if kind == "int8":

        def wq(rows: int, k: int) -> Any:
            return t.randint(-127, 128, (rows, k), dtype=t.int8, generator=g, device=dev)

        def quant(a: Any) -> tuple[Any, Any]:
            sc = a.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-8) / 127.0
            return (a.float() / sc).round().clamp(-127, 127).to(t.int8), sc

        def mm(q: Any, sa: Any, w: Any, sw: Any) -> Any:
            return (t._int_mm(q, w.t()).float() * sa * sw).to(t.bfloat16)

    else:
        e4m3 = getattr(t, "float8_e4m3fn", None)
        if e4m3 is None:
            raise PeerUnavailable("torch has no float8_e4m3fn")

        def wq(rows: int, k: int) -> Any:
            return (t.randn(rows, k, generator=g, device=dev) * 64).clamp(-448, 448).to(e4m3)

        def quant(a: Any) -> tuple[Any, Any]:
            sc = a.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / 448.0
            return (a.float() / sc).clamp(-448, 448).to(e4m3), sc

        def mm(q: Any, sa: Any, w: Any, sw: Any) -> Any:
            return t._scaled_mm(q, w.t(), scale_a=sa, scale_b=sw, out_dtype=t.bfloat16)

    def scale(rows: int) -> Any:
        return t.rand(1, rows, generator=g, device=dev) * 1e-3

    try:
        wgu = [(wq(2 * inter, s.hidden), scale(2 * inter)) for _ in range(n)]
        wd = [(wq(s.hidden, inter), scale(s.hidden)) for _ in range(n)]
    except Exception as exc:
        raise PeerUnavailable(_first_line(exc)) from None

    def accepts(rows: int) -> bool:
        q, sa = quant(t.zeros(rows, s.hidden, dtype=t.bfloat16, device=dev) + 1)
        mm(q, sa, *wgu[0])
        return True

    pad = {m: padded_rows(m, accepts) for m in s.ms}

    def ffn(i: int, xm: Any) -> Any:
        q, sa = quant(xm)
        h = _silu_mul(t, mm(q, sa, *wgu[i]), inter)
        q2, s2 = quant(h)
        return mm(q2, s2, *wd[i])

    return nb, ffn, pad


def _gemlite(s: _Setup, kind: str) -> Built:
    """A gemlite FFN: gate and up as one [2I, H] GemLite layer, down [H, I]; random codes (the
    grouped int kinds: codes in [0, 2^bits), bf16 scales, zero point 2^(bits-1)) or random bf16
    weights quantized by gemlite's own helper (the FP8 and A8W8 kinds)."""
    t, inter, g, dev = s.torch, s.inter, s.gen, s.dev
    try:
        import gemlite
        from gemlite import helper
    except Exception as exc:
        raise PeerUnavailable(f"gemlite not importable ({_first_line(exc)})") from None
    gemlite.load_config(str(Path(gemlite.__file__).parent / "configs" / "h100.json"), print_error=False)
    bits = GEMLITE_BITS[kind]
    group = 64
    nb = 3 * s.hidden * inter * bits // 8
    nb += 3 * s.hidden * inter // group * 4 if kind in ("gl-w4", "gl-w2") else 4 * (2 * inter + s.hidden)
    n = s.copies(nb)

    def layer(rows: int, k: int) -> Any:
        if kind in ("gl-w4", "gl-w2"):
            wq = t.randint(0, 2**bits, (rows, k), dtype=t.uint8, generator=g, device=dev)
            sc = (t.rand(rows, k // group, generator=g, device=dev) * 0.01).bfloat16()
            zero = t.full_like(sc, 2 ** (bits - 1))
            return helper.A16Wn(device=dev, dtype=t.bfloat16).from_weights(wq, sc, zero, bits, group)
        w = (t.randn(rows, k, generator=g, device=dev) * 0.02).bfloat16()
        make = {
            "gl-w8fp8": helper.A16W8_FP8,
            "gl-a8w8": helper.A8W8_int8_dynamic,
            "gl-a8w8fp8": helper.A8W8_fp8_dynamic,
        }[kind]
        return make(device=dev, dtype=t.bfloat16).from_weights(w)

    try:
        gu = [layer(2 * inter, s.hidden) for _ in range(n)]
        dn = [layer(s.hidden, inter) for _ in range(n)]
        dn[0](_silu_mul(t, gu[0](t.zeros(1, s.hidden, dtype=t.bfloat16, device=dev)), inter))
    except Exception as exc:
        raise PeerUnavailable(_first_line(exc)) from None

    def ffn(i: int, xm: Any) -> Any:
        return dn[i](_silu_mul(t, gu[i](xm), inter))

    return nb, ffn, {m: m for m in s.ms}


def padded_rows(m: int, accepts: Callable[[int], bool]) -> int:
    """The smallest row count ≥ m among m, 17 (ops that refuse m ≤ 16), the next multiple of
    16 and 32 for which ``accepts`` returns without raising; PeerUnavailable with the first
    error when none does."""
    errs = []
    for rows in sorted({m, 17 if m <= 16 else m, -(-m // 16) * 16, 32}):
        if rows < m:
            continue
        try:
            if accepts(rows):
                return rows
        except Exception as exc:
            errs.append(_first_line(exc))
    raise PeerUnavailable(errs[0] if errs else f"no row count accepted for m={m}")


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"


def build_peer(
    kind: str, hidden: int, inter: int, ms: list[int], l2: int, device: str, full_max: int
) -> dict[str, Any]:
    """One torch peer with as many weight copies as ``rotation`` asks for at the largest need:
    {"bodies": {m: body}, "layers": {m: copies a body runs}, "note": str, "weight_bytes": B},
    or {"error": reason} where this torch cannot run it."""
    import torch

    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(1234)
    x = (torch.randn(max(ms), hidden, generator=g, device=dev) * 0.5).to(torch.bfloat16)
    setup = _Setup(
        torch, dev, g, hidden, inter, ms, lambda nb: max(rotation(nb, l2, m, full_max) for m in ms)
    )
    try:
        if kind in ("bf16", "bf16-2"):
            nb, ffn, pad = _bf16(setup, fused=kind == "bf16")
        elif kind == "int4":
            nb, ffn, pad = _int4(setup, x)
        elif kind in ("int8", "fp8"):
            nb, ffn, pad = _quantized(setup, kind)
        elif kind in GEMLITE_BITS:
            nb, ffn, pad = _gemlite(setup, kind)
        else:
            raise ValueError(f"unknown peer {kind!r}")
    except PeerUnavailable as exc:
        return {"error": f"n/a: {exc}"}
    bodies, layers = {}, {}
    for m in ms:
        xm = torch.zeros(pad[m], hidden, dtype=torch.bfloat16, device=dev)
        xm[:m] = x[:m]
        layers[m] = rotation(nb, l2, m, full_max)

        def body(xm: Any = xm, n: int = layers[m]) -> None:
            for i in range(n):
                ffn(i, xm)

        bodies[m] = body
    padded = [f"{m}→{pad[m]}" for m in ms if pad[m] != m]
    note = "rows padded to " + ", ".join(padded) if padded else ""
    return {"bodies": bodies, "note": note, "layers": layers, "weight_bytes": nb}
