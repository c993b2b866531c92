"""Probe: the wgmma tile (nvfp4_wgmma.cu) against the mma.sync tile (nvfp4_tile.cu): bits and time."""
import json, os, sys, time
import numpy as np
import cupy as cp
from metrale.cuda import tile, nvfp4, q2_0, runtime, mma
from metrale.cuda.weights import upload_generic
from metrale.reference.elements import BF16
from tests.gpu import gen

rng = np.random.default_rng(0)
real_pick = tile.pick_kernel
real_smem = tile.smem_bytes
_src = runtime.source
runtime.source = lambda f: _src(f) + (open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chain_probe.cuh")).read() if f == tile.WG_FILE else "")
VARS = {
    "tile": None,
    "wg8": ("w4a16w_gemm_f8", 8), "wg8p1": ("w4a16w_gemm_f8_p1", 8), "wg6p1": ("w4a16w_gemm_f6_p1", 6),
    "wg6p0": ("w4a16w_gemm_f6_p0", 6), "wg4p1": ("w4a16w_gemm_f4_p1", 4), "wg4": ("w4a16w_gemm_f4", 4),
    "c8": ("w4c_part_f8", 8), "c16": ("w4c_part_f16", 16), "s8": ("w4c_step_f8", 8),
    "q2tile": None, "q2wg8": ("q2a16w_gemm_f8", 8), "q2wg4": ("q2a16w_gemm_f4", 4), "q2wg6p1": ("q2a16w_gemm_f6_p1", 6),
}

def use(v):
    spec = VARS[v]
    tile.smem_bytes = real_smem
    if v in ("c8", "c16", "s8"):
        tile.smem_bytes = lambda nf, dlog, fmt=tile.NVFP4, wg=False: real_smem(nf, 0, fmt, wg)
    if spec is None:
        tile.WG_ENABLED = False
        tile.pick_kernel = real_pick
    else:
        tile.WG_ENABLED = True
        name, nf = spec
        assert runtime.get_kernel(tile.WG_FILE, name) is not None, (name, runtime.build_errors)
        tile.pick_kernel = lambda fmt, rows: tile.TileKernel(tile.WG_FILE, name, nf, 1, True)

def bf(a):
    return cp.asarray(np.ascontiguousarray(a.astype(np.float32).astype(BF16)).view(np.uint16))

out = {}
MS = [int(s) for s in os.environ.get("MS", "64,128,256,1024,4096").split(",")]
fmt = os.environ.get("FMT", "nvfp4")
variants = os.environ.get("VARS", "tile,wg8,wg8p1,wg6p1,wg4p1").split(",")
for tag, n, k, dual in (("gateup", 12288, 4096, True), ("down", 4096, 12288, False)):
    copies = []
    for c in range(3):
        if fmt == "nvfp4":
            ws = [upload_generic(gen.nvfp4(rng, n, k, a4=False)) for _ in range(2 if dual else 1)]
        else:
            ws = [q2_0.upload_q2_0(gen.q2_0(rng, n, k)) for _ in range(2 if dual else 1)]
        copies.append(ws)
    for m in MS:
        x = bf(rng.standard_normal((m, k)))
        outs = [cp.zeros((m, n), cp.uint16) for _ in range(2)]
        def call(ws):
            if fmt == "nvfp4":
                nvfp4.nvfp4_a16(x, [(w, outs[i]) for i, w in enumerate(ws)], m, 4)
            else:
                for i, w in enumerate(ws):
                    q2_0.q2_0_gemm(x, w, outs[i])
        ref = None
        for v in variants:
            use(v)
            for o in outs: o.fill(0)
            call(copies[0])
            got = [o.get() for o in outs[: len(copies[0])]]
            if ref is None:
                ref = got
                same = True
            else:
                same = all(np.array_equal(a, b) for a, b in zip(ref, got))
            for _ in range(2):
                for ws in copies: call(ws)
            cp.cuda.Device().synchronize()
            ts = []
            for rep in range(5):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                for i in range(6): call(copies[i % 3])
                e1.record(); e1.synchronize()
                ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1000 / 6)
            us = float(np.median(ts))
            bv = m * n * k / 16 * (2 if dual else 1)
            out[f"{tag} m={m} {v}"] = [round(us, 1), round(bv / us / 1e6, 2), same]
            print(f"{tag:7s} m={m:5d} {v:8s} {us:9.1f} us  {bv/us/1e6:6.2f} T/s  exact_vs_first={same}", flush=True)
use("tile")
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), f"probe_{fmt}.json"), "w"), indent=1)
