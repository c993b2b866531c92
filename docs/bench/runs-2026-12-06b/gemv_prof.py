"""Profile target: the fast NVFP4 decode kernels, tree (nvfp4_a16f_r{m}) and chain
(nvfp4_a16fc_r{m}), on the Qwen3-8B gate + up (dual) and down at m rows (M=1): each launched
twice per variant (JIT and warm-up, then the profiled launch); PROJ=down picks one projection."""

import os

import cupy as cp
import numpy as np

from metrale.cuda import mma, nvfp4, tile
from metrale.cuda.weights import upload_generic
from metrale.reference.elements import BF16
from tests.gpu import gen

rng = np.random.default_rng(0)
M = int(os.environ.get("M", "1"))
PROJ = os.environ.get("PROJ", "gateup,down").split(",")
for tag, n, k, dual in (("gateup", 12288, 4096, True), ("down", 4096, 12288, False)):
    if tag not in PROJ:
        continue
    ws = [upload_generic(gen.nvfp4(rng, n, k, a4=False)) for _ in range(2 if dual else 1)]
    xh = (rng.standard_normal((M, k)) * 0.5).astype(np.float32).astype(BF16)
    x = cp.asarray(xh.view(np.uint16))
    outs = [cp.zeros((M, n), cp.uint16) for _ in ws]
    for chain in (False, True):
        tile.CHAIN = chain
        mma.ENABLED = False
        for _ in range(2):
            nvfp4.nvfp4_a16(x, [(w, outs[i]) for i, w in enumerate(ws)], M, 4)
        cp.cuda.Device().synchronize()
        print(tag, "chain" if chain else "tree", flush=True)
