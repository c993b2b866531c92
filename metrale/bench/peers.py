"""The torch peers, on the same GPU and with the same FFN math as metrale (gate, up,
silu·mul, down; gate and up as one [2I, H] weight unless named otherwise):

* ``bf16``   bf16 cuBLAS, gate and up fused; ``bf16-2`` the same with two matmuls;
* ``int4``   int4 weight-only tinygemm ``torch._weight_int4pack_mm`` (group 128);
* ``int8``   ``torch._int_mm`` with per-token int8 quantization of x and h in torch;
* ``fp8``    FP8 ``torch._scaled_mm`` (e4m3, per-row weight scales, per-token activation scales).

Their weights are random (their bits are not checked: they are speed references). A peer the
installed torch cannot run reads ``n/a`` with the reason; ops that want padded row counts get
the smallest count they accept (noted).
"""

from __future__ import annotations

from typing import Any

from metrale.bench.measure import rotation

PEERS: dict[str, str] = {
    "bf16": "bf16 cuBLAS (gate+up fused)",
    "bf16-2": "bf16 cuBLAS (gate, up separate)",
    "int4": "int4 tinygemm g128",
    "int8": "int8 _int_mm + per-token quant",
    "fp8": "FP8 _scaled_mm",
}


def build_peer(
    kind: str, hidden: int, inter: int, ms: list[int], l2: int, device: str, full_max: int
) -> dict[str, Any]:
    """Weights of one torch peer over as many layers as ``rotation`` asks for at the largest
    need; returns {"bodies": {m: body}, "layers": {m: layers}, "note": str, "weight_bytes": B}
    or {"error": reason}."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(1234)
    two_i = 2 * inter
    x = (torch.randn(max(ms), hidden, generator=g, device=dev) * 0.5).to(torch.bfloat16)
    note = ""

    if kind in ("bf16", "bf16-2"):
        nb = 3 * hidden * inter * 2
        L = max(rotation(nb, l2, m, full_max) for m in ms)
        wgu = [(torch.randn(two_i, hidden, generator=g, device=dev) * 0.02).bfloat16() for _ in range(L)]
        wd = [(torch.randn(hidden, inter, generator=g, device=dev) * 0.02).bfloat16() for _ in range(L)]

        def ffn(i: int, xm: Any) -> Any:
            if kind == "bf16":
                gu = xm @ wgu[i].t()
                gg, uu = gu[:, :inter], gu[:, inter:]
            else:
                gg, uu = xm @ wgu[i][:inter].t(), xm @ wgu[i][inter:].t()
            return (F.silu(gg) * uu) @ wd[i].t()

        pad = dict.fromkeys(ms, 0)
    elif kind == "int4":
        nb = 3 * hidden * inter // 2 + 3 * (hidden * inter // 128) * 4
        L = max(rotation(nb, l2, m, full_max) for m in ms)

        def pack(n: int, k: int) -> Any:
            u8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g, device=dev)
            try:
                return torch._convert_weight_to_int4pack(u8, 8)
            except Exception as exc1:  # torch < 2.5 wanted int32 [n, k] with values 0..15
                try:
                    i32 = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=g, device=dev)
                    return torch._convert_weight_to_int4pack(i32, 8)
                except Exception:
                    raise exc1 from None

        def sz(n: int, k: int) -> Any:
            s = torch.rand(k // 128, n, 2, generator=g, device=dev) * 0.01
            s[..., 1] = 0.0
            return s.bfloat16()

        try:
            wgu = [(pack(two_i, hidden), sz(two_i, hidden)) for _ in range(L)]
            wd = [(pack(hidden, inter), sz(hidden, inter)) for _ in range(L)]
            torch._weight_int4pack_mm(x[:1], wgu[0][0], 128, wgu[0][1])
        except Exception as exc:
            return {"error": f"n/a: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}

        def ffn(i: int, xm: Any) -> Any:
            gu = torch._weight_int4pack_mm(xm, wgu[i][0], 128, wgu[i][1])
            h = F.silu(gu[:, :inter]) * gu[:, inter:]
            return torch._weight_int4pack_mm(h, wd[i][0], 128, wd[i][1])

        pad = dict.fromkeys(ms, 0)
    elif kind in ("int8", "fp8"):
        nb = 3 * hidden * inter + 4 * (two_i + hidden)
        L = max(rotation(nb, l2, m, full_max) for m in ms)
        if kind == "int8":

            def wq(n: int, k: int) -> Any:
                return torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g, device=dev)

            def quant(a: Any) -> tuple[Any, Any]:
                s = a.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-8) / 127.0
                return (a.float() / s).round().clamp(-127, 127).to(torch.int8), s

            def mm(q: Any, s: Any, w: Any, sw: Any) -> Any:
                return (torch._int_mm(q, w.t()).float() * s * sw).to(torch.bfloat16)
        else:
            e4m3 = getattr(torch, "float8_e4m3fn", None)
            if e4m3 is None:
                return {"error": "n/a: torch has no float8_e4m3fn"}

            def wq(n: int, k: int) -> Any:
                return (torch.randn(n, k, generator=g, device=dev) * 64).clamp(-448, 448).to(e4m3)

            def quant(a: Any) -> tuple[Any, Any]:
                s = a.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / 448.0
                return (a.float() / s).clamp(-448, 448).to(e4m3), s

            def mm(q: Any, s: Any, w: Any, sw: Any) -> Any:
                return torch._scaled_mm(q, w.t(), scale_a=s, scale_b=sw, out_dtype=torch.bfloat16)

        try:
            wgu = [
                (wq(two_i, hidden), torch.rand(1, two_i, generator=g, device=dev) * 1e-3) for _ in range(L)
            ]
            wd = [
                (wq(hidden, inter), torch.rand(1, hidden, generator=g, device=dev) * 1e-3) for _ in range(L)
            ]
        except Exception as exc:
            return {"error": f"n/a: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        pad = {}
        for m in ms:  # the smallest row count >= m the op accepts (torch pads nothing itself)
            errs = []
            for mp_ in sorted({m, 17 if m <= 16 else m, -(-m // 16) * 16, 32}):
                if mp_ < m:
                    continue
                try:
                    q, s = quant(torch.zeros(mp_, hidden, dtype=torch.bfloat16, device=dev) + 1)
                    mm(q, s, *wgu[0])
                    pad[m] = mp_
                    break
                except Exception as exc:
                    errs.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            if m not in pad:
                return {"error": "n/a: " + errs[0]}

        def ffn(i: int, xm: Any) -> Any:
            q, s = quant(xm)
            gu = mm(q, s, *wgu[i])
            h = F.silu(gu[:, :inter]) * gu[:, inter:]
            q2, s2 = quant(h)
            return mm(q2, s2, *wd[i])

        padded = sorted({pad[m] for m in ms if pad[m] != m})
        if padded:
            note = "rows padded to " + ", ".join(f"{m}→{pad[m]}" for m in ms if pad[m] != m)
        pad = {m: pad[m] - m for m in ms}
    else:
        raise ValueError(kind)

    bodies, layers = {}, {}
    for m in ms:
        xm = torch.zeros(m + pad[m], hidden, dtype=torch.bfloat16, device=dev)
        xm[:m] = x[:m]
        layers[m] = rotation(nb, l2, m, full_max)

        def body(xm: Any = xm, n: int = layers[m]) -> None:
            for i in range(n):
                ffn(i, xm)

        bodies[m] = body
    return {"bodies": bodies, "note": note, "layers": layers, "weight_bytes": nb}
