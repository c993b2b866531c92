"""Device check of the CPU fma emulation (chain_accuracy.fma32) against the GPU: the probe kernel
w4c_part_f8 (one fma chain over the whole K part, chain_probe.cuh) on K = 1024 (one part) must
equal the CPU chain bit for bit."""
import numpy as np
import cupy as cp
from metrale.cuda import runtime, tile, nvfp4
from metrale.cuda.weights import upload_generic
from metrale.reference.activations import quantize_a16
from metrale.reference.elements import BF16, to_bf16
from metrale.reference.formats import Nvfp4Weight
from metrale.reference.projection import _nvfp4_a16
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from chain_accuracy import fma32  # the float64 sum rounded to odd, then to f32
F32 = np.float32
_src = runtime.source
runtime.source = lambda f: _src(f) + (open(os.path.join(HERE, "chain_probe.cuh")).read() if f == tile.WG_FILE else "")
real_smem = tile.smem_bytes
tile.smem_bytes = lambda nf, dlog, fmt=tile.NVFP4, wg=False: real_smem(nf, 0, fmt, wg)
tile.pick_kernel = lambda fmt, rows: tile.TileKernel(tile.WG_FILE, "w4c_part_f8", 8, 1, True)
tile.MIN_ROWS = 1
tile.MIN_PART_STEPS = 8  # K = 1024: one part of 8 steps (one chain)
tile.WAVES = False


rng = np.random.default_rng(5)
total = 0
for trial in range(4):
    n, k, m = 384, 1024, 40
    w = Nvfp4Weight.quantize((rng.standard_normal((n, k)) * np.exp2(rng.integers(-8, 8, (n, 1)))).astype(F32), name="w")
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 20, (m, 1)))).astype(F32).astype(BF16)
    out = cp.zeros((m, n), cp.uint16)
    nvfp4.nvfp4_a16(cp.asarray(x.view(np.uint16)), [(upload_generic(w), out)], m, 4)
    got = out.get()
    a = quantize_a16(x)
    nb = k // 16
    g = _nvfp4_a16.__globals__
    s = np.matmul(g["_nvfp4_codes"](w, 0, n, nb).astype(np.float64), a.codes.astype(np.float64).transpose(1, 2, 0))
    P = (s * np.exp2(a.exp.T.astype(np.float64) - 15)[:, None, :]).astype(F32)
    ws = g["_E4M3_F32"][w.weight_scale.view(np.uint8)].T[:, :, None].astype(F32)
    c = np.full(P.shape[1:], -0.0, F32)
    for b in range(nb):
        c = fma32(P[b], np.broadcast_to(ws[b], P.shape[1:]), c)
    want = to_bf16(c * F32(w.weight_scale_2)).view(np.uint16).T
    diff = int(np.sum(got != want))
    total += got.size
    print(f"trial {trial}: {diff} of {got.size} bf16 outputs differ")
print("compared", total)
