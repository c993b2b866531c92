#!/usr/bin/env python3
"""Time every built variant of the NVFP4 x A16 prefill GEMM (kernels/nvfp4_mma.cu
``w4a16_gemm_*``, configs.NVFP4_GEMM_TILES / NVFP4_GEMM_VARIANTS) and the small-m MMA path on
the FFN's two projection shapes (gate and up in one launch; down), GPU machine only.

Every variant must give the default variant's bits (asserted); the default itself is checked
against the reference by tests/gpu/test_cuda_nvfp4_mma.py. Timed without CUDA graphs (CUDA events
around the host launches): below about 64 rows the host's launch time dominates, so compare
small m with ``metrale bench`` (graphs) instead.

    python tools/nvfp4_gemm_variants.py [--shape qwen3-8b] [--m 64,512,2048] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import cupy as cp

    from metrale.backend import get_backend
    from metrale.bench.cases import SHAPES
    from metrale.cuda import configs, mma, nvfp4
    from tests.gpu import gen

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--m", default="64,512,2048")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    hidden, inter = SHAPES[args.shape]
    be = get_backend("cuda")
    rng = np.random.default_rng(7)
    ms = [int(v) for v in args.m.split(",")]
    x_host = gen.rows(rng, max(ms), max(hidden, inter), finite=True)
    projs = {"gate+up": (inter, hidden, 2), "down": (hidden, inter, 1)}
    variants = [("mma", None)] + [
        (f"nt{nt}_d{d}_b{b}", (d, nt, b)) for d, nt, b in configs.nvfp4_gemm_builds()
    ]
    results = []
    for pname, (n, k, gz) in projs.items():
        ws = [be.upload(gen.nvfp4(rng, n, k, name=f"w{i}")) for i in range(gz)]
        x = cp.asarray(np.ascontiguousarray(x_host[:, :k]).view(np.uint16))
        for m in ms:
            ref_bits = None
            for vname, v in variants:
                if v is None:
                    mma.GEMM_MIN_ROWS = 1 << 30
                else:
                    d, nt, b = v
                    b_ = k // 16
                    if -(-b_ // 8) > 1 << d:
                        continue
                    mma.GEMM_MIN_ROWS = 1
                    mma.GEMM_ANY_GRID = True
                    mma.GEMM_TILES = {d: (nt, b)}
                outs = [cp.zeros((m, n), dtype=cp.uint16) for _ in range(gz)]
                sets = list(zip(ws, outs, strict=True))
                nvfp4.nvfp4_a16(x[:m], sets, m, 4)
                got = np.stack([o.get() for o in outs])
                if ref_bits is None:
                    ref_bits = got
                elif not np.array_equal(got, ref_bits):
                    raise SystemExit(f"{pname} m={m} {vname}: bits differ from the first variant")
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                ts = []
                for _ in range(args.iters):
                    start.record()
                    nvfp4.nvfp4_a16(x[:m], sets, m, 4)
                    stop.record()
                    stop.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
                us = float(np.median(ts))
                vals = m * n * gz * (k // 16)
                results.append(
                    {"proj": pname, "m": m, "variant": vname, "us": us, "tvals_s": vals / us / 1e6}
                )
                print(
                    f"{pname:8s} m={m:5d} {vname:12s} {us:10.1f} us  {vals / us / 1e6:6.2f} T block values/s"
                )
            mma.GEMM_TILES = dict(configs.NVFP4_GEMM_TILES)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
