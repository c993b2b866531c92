"""Write the bit-exactness test vectors ``tests/vectors/*.npz`` (arithmetic.md § vectors).

Every vector is computed by the numpy reference from seeded inputs and named edge cases:

* ``layer-<kind>-<mode>-<entry>.npz``: one DenseFfnLayer (``tests/layer_cases.py`` LAYER_KINDS),
  one ``METRALE_WEIGHT_QUANT`` mode, one entry point, for each row count it serves of
  m = 1, 2, 3, 4, 5, 8, 17, 32, 33, 64;
* ``proj-<format>-<mode>-<N>x<K>.npz``: one projection per (format, mode) with weights that hold
  every e2m1 / e4m3 / int8 code, N not a multiple of any tile and K whose block count is not a
  power of two, with the kernels that serve each m;
* ``act-<activation>.npz``: act_mul over all 65,536 bf16 gate values;
* ``lora-r<rank>.npz``: lora_shrink then lora_expand.

Each file holds ``meta`` (JSON: what to run, env mode, config, element types of the raw tensors),
the raw tensors (e4m3 as uint8, bf16 as uint16), the activation pool ``x_pool`` (bf16 bits),
and per m ``rows_m<m>`` (pool rows of the call) and ``out_m<m>`` (expected output bits).

The output is deterministic (fixed zip timestamps, sorted members): same bytes each run.

    python tools/make_vectors.py            # (re)write tests/vectors
    python tools/make_vectors.py --check    # recompute and compare, write nothing
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import layer_cases as lc  # noqa: E402

from metrale.reference.kernels import ReferenceBackend  # noqa: E402

VECTOR_DIR = ROOT / "tests" / "vectors"
#: Rows in a layer vector's activation pool (the largest m).
POOL_ROWS = 64
#: Rows in a projection / LoRA vector's pool (calls with more rows repeat rows).
SMALL_POOL_ROWS = 24

Arrays = dict[str, np.ndarray]


def seed_of(name: str) -> int:
    """A stable seed from a vector's name."""
    return zlib.crc32(name.encode())


def _with_meta(arrays: Arrays, meta: dict[str, object]) -> Arrays:
    arrays["meta"] = np.array(lc.meta_json(meta))
    return arrays


def layer_modes(kind: str) -> tuple[str, ...]:
    """The env modes a kind's routing depends on (just the default for the others)."""
    return lc.WEIGHT_QUANT_MODES if kind in lc.A4_KINDS else ("w4a4",)


def layer_vector(kind: str, mode: str, entry: str) -> Arrays:
    """One layer entry point over every m it serves."""
    name = f"layer-{kind}-{mode}-{entry}"
    hidden, inter = lc.default_shape(kind)
    parts = lc.make_parts(kind, hidden, inter, seed=seed_of(kind))
    tensors, meta = lc.parts_to_tensors(parts)
    seed = seed_of(name)
    pool = lc.x_pool(seed, POOL_ROWS, hidden)
    ms = lc.entry_ms(kind, mode)[entry]
    arrays: Arrays = {**tensors, "x_pool": lc.bits(pool)}
    with lc.weight_quant_env(mode):
        for m in ms:
            rows = lc.row_indices(seed, POOL_ROWS, m)
            layer = parts.layer(ReferenceBackend())
            arrays[f"rows_m{m}"] = rows
            arrays[f"out_m{m}"] = lc.run_guarded(layer, entry, pool[rows])
    meta.update(vector="layer", layer_kind=kind, env_mode=mode, entry=entry, ms=list(ms), seed=seed)
    return _with_meta(arrays, meta)


def proj_vector(fmt: str, mode: str, n: int, k: int) -> Arrays:
    """One projection (format, mode, N×K) over every m, with each m's kernels."""
    name = f"proj-{fmt}-{mode}-{n}x{k}"
    seed = seed_of(name)
    w = lc.projection_weight(fmt, n, k, seed)
    pool = lc.x_pool(seed, SMALL_POOL_ROWS, k)
    arrays: Arrays = {"x_pool": lc.bits(pool)}
    dtypes: dict[str, str] = {}
    for f in (fld.name for fld in dataclasses.fields(w)):
        v = getattr(w, f)
        if f != "name" and v is not None:
            arrays[f"w.{f}"], dtypes[f"w.{f}"] = lc.encode_tensor(v)
    kernels: dict[str, list[str]] = {}
    b = ReferenceBackend()
    for m in lc.ALL_M:
        rows = lc.row_indices(seed, SMALL_POOL_ROWS, m)
        ks = lc.projection_kernels(fmt, mode, m)
        if not ks:
            continue
        outs = {kern: lc.run_projection(b, kern, pool[rows], w) for kern in ks}
        first = outs[ks[0]][0]
        for kern, o in outs.items():  # every kernel serving m must agree before it is stored
            for i, oi in enumerate(o):
                if not np.array_equal(oi, first):
                    raise SystemExit(f"{name}: {kern} output {i} differs from {ks[0]} at m={m}")
        kernels[str(m)] = list(ks)
        arrays[f"rows_m{m}"] = rows
        arrays[f"out_m{m}"] = first
    meta = {
        "vector": "proj",
        "format": fmt,
        "mode": mode,
        "n": n,
        "k": k,
        "ms": [int(m) for m in kernels],
        "kernels": kernels,
        "dtypes": dtypes,
        "weight_class": type(w).__name__,
        "seed": seed,
    }
    return _with_meta(arrays, meta)


def act_vector(activation: str) -> Arrays:
    """act_mul over every bf16 gate bit pattern [64, 1024], with seeded up values."""
    seed = seed_of(f"act-{activation}")
    rng = np.random.default_rng(seed)
    gate = np.arange(65536, dtype=np.uint32).astype(np.uint16).reshape(64, 1024)
    up = lc.bits(lc.random_rows(rng, 64, 1024))
    up.reshape(-1)[rng.choice(up.size, 64, replace=False)] = np.resize(
        np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x7F7F, 0x8080], np.uint16), 64
    )
    out = lc.run_act_mul(ReferenceBackend(), activation, lc.from_bits(gate), lc.from_bits(up), in_place=False)
    meta = {"vector": "act", "activation": activation, "ms": [64], "seed": seed}
    return _with_meta({"gate": gate, "up": up, "out_m64": out}, meta)


def lora_vector(rank: int) -> Arrays:
    """lora_shrink / lora_expand with K = 48, N = 80 and the given rank, over every m."""
    name = f"lora-r{rank}"
    seed = seed_of(name)
    rng = np.random.default_rng(seed)
    k, n = 48, 80
    ad = lc.LoraAdapter(
        a=(rng.standard_normal((rank, k)) * 0.25).astype(np.float32).astype(lc.BF16),
        b=(rng.standard_normal((n, rank)) * 0.25).astype(np.float32).astype(lc.BF16),
        scale=np.float32(0.75),
    )
    pool = lc.x_pool(seed, SMALL_POOL_ROWS, k)
    base = lc.random_rows(rng, SMALL_POOL_ROWS, n)
    arrays: Arrays = {"x_pool": lc.bits(pool), "base_pool": lc.bits(base)}
    dtypes: dict[str, str] = {}
    for f in ("a", "b", "scale"):
        arrays[f"lora.{f}"], dtypes[f"lora.{f}"] = lc.encode_tensor(getattr(ad, f))
    for m in lc.ALL_M:
        rows = lc.row_indices(seed, SMALL_POOL_ROWS, m)
        t, out = lc.run_lora(ReferenceBackend(), pool[rows], ad, base[rows])
        arrays[f"rows_m{m}"], arrays[f"t_m{m}"], arrays[f"out_m{m}"] = rows, t, out
    meta = {
        "vector": "lora",
        "rank": rank,
        "k": k,
        "n": n,
        "ms": list(lc.ALL_M),
        "dtypes": dtypes,
        "seed": seed,
    }
    return _with_meta(arrays, meta)


def vector_builders() -> Iterator[tuple[str, Callable[[], Arrays]]]:
    """(file name, builder) of every vector, in a fixed order; cheap (builds nothing)."""
    for kind in lc.LAYER_KINDS:
        for mode in layer_modes(kind):
            for entry in lc.entry_ms(kind, mode):
                yield (
                    f"layer-{kind}-{mode}-{entry}.npz",
                    lambda k=kind, md=mode, e=entry: layer_vector(k, md, e),
                )
    for fmt, mode in lc.PROJECTION_MODES:
        for n, k in lc.Q2_PROJECTION_SHAPES if fmt == "q2_0" else lc.PROJECTION_SHAPES:
            yield f"proj-{fmt}-{mode}-{n}x{k}.npz", lambda f=fmt, md=mode, n=n, k=k: proj_vector(f, md, n, k)
    for act in ("silu", "gelu"):
        yield f"act-{act}.npz", lambda a=act: act_vector(a)
    for rank in lc.LORA_RANKS:
        yield f"lora-r{rank}.npz", lambda r=rank: lora_vector(r)


def vector_names() -> list[str]:
    """The file names the tool writes."""
    return [name for name, _ in vector_builders()]


def npz_bytes(arrays: Arrays) -> bytes:
    """A deterministic .npz (sorted members, fixed timestamps, deflate)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())
    return out.getvalue()


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check(directory: Path) -> list[str]:
    """Recompute every vector and compare with the files in ``directory``; return problems."""
    problems: list[str] = []
    names = vector_names()
    extra = sorted({p.name for p in directory.glob("*.npz")} - set(names))
    problems += [f"{nm}: not written by this tool" for nm in extra]
    for name, build in vector_builders():
        path = directory / name
        if not path.exists():
            problems.append(f"{name}: missing")
            continue
        want = build()
        with np.load(path, allow_pickle=False) as z:
            got = {k: z[k] for k in z.files}
        if set(got) != set(want):
            problems.append(f"{name}: members differ: {sorted(set(got) ^ set(want))}")
            continue
        problems += [f"{name}: {k} differs" for k in sorted(want) if not _same(got[k], np.asarray(want[k]))]
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=VECTOR_DIR, help="directory of the .npz files")
    ap.add_argument("--check", action="store_true", help="recompute and compare; write nothing")
    args = ap.parse_args(argv)
    with np.errstate(all="ignore"):  # Inf/NaN arithmetic is part of the vectors
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.check:
        problems = check(args.out)
        for p in problems:
            print(p)
        print(f"{len(vector_names())} vectors, {len(problems)} problems")
        return 1 if problems else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in set(p.name for p in args.out.glob("*.npz")) - set(vector_names()):
        (args.out / stale).unlink()
    total = 0
    for name, build in vector_builders():
        data = npz_bytes(build())
        (args.out / name).write_bytes(data)
        total += len(data)
    print(f"wrote {len(vector_names())} vectors, {total / 1e6:.2f} MB, to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
