"""Seeded generators of GPU test inputs: bf16 activation rows with named edge cases and raw
NVFP4 weights covering every nibble and every finite e4m3 scale code. Independent of the code
under test."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from metrale.reference.formats import Nvfp4Weight, Q2_0Weight

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
F32 = np.float32
SENTINEL = 0xDEAD
#: Every e4m3 code but the NaNs 0x7F, 0xFF.
E4M3_FINITE = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)

#: Outputs compared bit for bit by ``bits_equal`` in this session (reported by conftest).
COMPARED = {"calls": 0, "values": 0}

ROW_KINDS = ("gauss", "spread", "subnormal", "zeros", "specials", "huge", "ties", "tiny")


def row(rng: np.random.Generator, k: int, kind: str) -> np.ndarray:
    """One bf16 row [k] of the named kind."""
    sign = np.where(rng.random(k) < 0.5, -1.0, 1.0)
    if kind == "gauss":
        return (rng.standard_normal(k) * np.exp2(rng.uniform(-6, 6))).astype(F32).astype(BF16)
    if kind == "spread":  # every block spans a huge exponent range
        e = rng.integers(-133, 127, k)
        return (sign * np.ldexp(1.0 + rng.integers(0, 128, k) / 128, e)).astype(F32).astype(BF16)
    if kind == "subnormal":
        b = rng.integers(0, 0x80, k).astype(np.uint16) | np.where(sign < 0, 0x8000, 0).astype(np.uint16)
        return b.view(BF16)
    if kind == "zeros":
        return np.where(rng.random(k) < 0.5, 0x8000, 0).astype(np.uint16).view(BF16)
    if kind == "specials":  # NaN / ±Inf in a few blocks, normal elsewhere
        r = (rng.standard_normal(k)).astype(F32).astype(BF16)
        for v in (np.nan, np.inf, -np.inf):
            r[rng.integers(0, k)] = v
        nanbits = r.view(np.uint16)
        nanbits[rng.integers(0, k)] = 0xFFC1  # a NaN with sign and payload
        return r
    if kind == "huge":  # near the bf16 maximum: products and sums overflow to Inf
        b = rng.integers(0x7F70, 0x7F80, k).astype(np.uint16)
        return (b | np.where(sign < 0, 0x8000, 0).astype(np.uint16)).view(BF16)
    if kind == "ties":
        v = (2 * rng.integers(0, 64, k) + 1).astype(np.float64) * 2.0**-15
        v[::16] = 1.0
        return (sign * v).astype(F32).astype(BF16)
    if kind == "tiny":
        b = rng.integers(0x0080, 0x0200, k).astype(np.uint16)
        return (b | np.where(sign < 0, 0x8000, 0).astype(np.uint16)).view(BF16)
    raise ValueError(kind)


def rows(rng: np.random.Generator, m: int, k: int, finite: bool = False) -> np.ndarray:
    """m bf16 rows: mostly Gaussian with random magnitude, plus each edge kind at least once
    (when m allows); ``finite`` leaves out NaN/Inf rows."""
    kinds = [k_ for k_ in ROW_KINDS if not (finite and k_ in ("specials", "huge"))]
    out = np.empty((m, k), dtype=BF16)
    for i in range(m):
        kind = kinds[i] if i < len(kinds) and m > 1 else kinds[int(rng.integers(0, len(kinds)))]
        if rng.random() < 0.5 and i >= len(kinds):
            kind = "gauss"
        out[i] = row(rng, k, kind)
    return out[rng.permutation(m)]


def nvfp4(rng: np.random.Generator, n: int, k: int, a4: bool = True, name: str = "w") -> Nvfp4Weight:
    """Raw NVFP4 weight [n, k]: uniform nibbles (all 16 in row 0), scales drawing every finite
    e4m3 code, weight_scale_2 and (``a4``) input_scale random positive."""
    nib = rng.integers(0, 16, (n, k)).astype(np.uint8)
    nib[0, : min(16, k)] = np.arange(min(16, k))
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    sc = rng.choice(E4M3_FINITE, (n, k // 16))
    flat = sc.reshape(-1)
    flat[: min(flat.size, E4M3_FINITE.size)] = E4M3_FINITE[: min(flat.size, E4M3_FINITE.size)]
    sc = rng.permutation(flat).reshape(n, k // 16)
    return Nvfp4Weight(
        weight=packed,
        weight_scale=sc.view(E4M3),
        weight_scale_2=F32(np.exp2(rng.uniform(-14, 0))),
        input_scale=F32(np.exp2(rng.uniform(-6, 2))) if a4 else None,
        name=name,
    )


#: Named f16 block scales every Q2_0 test weight holds: ±0, ± the smallest subnormal, ± the largest
#: finite.
F16_EDGES = np.array([0.0, -0.0, 2.0**-24, -(2.0**-24), 65504.0, -65504.0], np.float16)


def q2_0(rng: np.random.Generator, n: int, k: int, name: str = "q2") -> Q2_0Weight:
    """Raw Q2_0 weight [n, k]: uniform 2-bit codes; f16 d = ±m 2^e, m uniform in [1, 2), e in
    -24 .. 14 (every binade, subnormals included, never rounding past 65504), and ``F16_EDGES``
    each once where d has room."""
    q = rng.integers(0, 4, (n, k), dtype=np.uint8)
    shape = (n, k // 64)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    d = (sign * rng.uniform(1.0, 2.0, shape) * np.exp2(rng.integers(-24, 15, shape))).astype(np.float16)
    count = min(d.size, F16_EDGES.size)
    d.flat[rng.choice(d.size, size=count, replace=False)] = F16_EDGES[:count]
    return Q2_0Weight.from_parts(q, d, name=name)


def guarded(cp: Any, rng: np.random.Generator, rows_: int, cols: int, g: int = 3) -> tuple[Any, Any, Any]:
    """A device buffer [rows+2g, cols+2g] of random guard bits; returns (buffer, inner view
    [rows, cols] (strided rows), host copy of the initial bits)."""
    init = rng.integers(0, 1 << 16, (rows_ + 2 * g, cols + 2 * g), dtype=np.uint16)
    init[init == 0] = SENTINEL
    buf = cp.asarray(init)
    return buf, buf[g : g + rows_, g : g + cols], init


def check_guard(buf: Any, init: np.ndarray, rows_written: int, cols: int, g: int = 3) -> np.ndarray:
    """Assert that only the inner [rows_written, cols] region changed; return its bits."""
    host = buf.get()
    mask = np.ones_like(init, dtype=bool)
    mask[g : g + rows_written, g : g + cols] = False
    bad = np.argwhere((host != init) & mask)
    assert bad.size == 0, f"guard band overwritten at {tuple(bad[0])} (inner rows {rows_written})"
    return host[g : g + rows_written, g : g + cols]


def bits_equal(got: np.ndarray, want: np.ndarray, what: str) -> int:
    """Assert two uint16 arrays are equal bit for bit; count the comparison; return its size."""
    got = np.asarray(got, dtype=np.uint16)
    want = np.asarray(want, dtype=np.uint16)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{what}: {len(bad)} of {got.size} differ; first at {tuple(bad[0])}: "
        f"got {got[tuple(bad[0])]:#06x}, want {want[tuple(bad[0])]:#06x}"
    )
    COMPARED["calls"] += 1
    COMPARED["values"] += int(got.size)
    return int(got.size)


def kernels_fetched(monkeypatch: Any, module: Any) -> list[str]:
    """The names ``module`` fetches through its ``get_kernel`` from here on, in order."""
    names: list[str] = []
    real = module.get_kernel

    def get_kernel(file: str, name: str) -> Any:
        names.append(name)
        return real(file, name)

    monkeypatch.setattr(module, "get_kernel", get_kernel)
    return names


def rebuild_with(monkeypatch: Any, files: tuple[str, ...], **values: Any) -> None:
    """configs.py ``values`` (name=value) set for this test and the kernel ``files`` rebuilt with
    them (their cached modules and kernels dropped for the test)."""
    from metrale.cuda import configs, runtime

    for name, value in values.items():
        assert hasattr(configs, name), name
        monkeypatch.setattr(configs, name, value)
    monkeypatch.setattr(runtime, "_modules", {k: v for k, v in runtime._modules.items() if k[0] not in files})
    monkeypatch.setattr(runtime, "_kernels", {k: v for k, v in runtime._kernels.items() if k[0] not in files})
