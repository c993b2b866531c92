import numpy as np, sys
sys.path.insert(0, '.')
import cupy as cp
from metrale.cuda import fp8_bf16, tile, mma
from metrale.cuda.backend import CudaBackend
from metrale.reference.projection import project
from metrale.reference.chain import project_chain
from tests.gpu.test_cuda_fp8_bf16 import bf16_weight
from tests.gpu.test_cuda_nvfp4_tile import window_rows, dev_rows
from tests.gpu import gen
cuda = CudaBackend()
for chain in (False, True):
    tile.CHAIN = chain
    fp8_bf16.GEMM_MIN_ROWS = 1 << 30
    for seed in range(4):
        rng = np.random.default_rng(seed)
        n, k = 37, 1040
        w = bf16_weight(rng, n, k)
        x = np.concatenate([window_rows(rng, 8, k, tuple(range(-30, 31))), gen.rows(rng, 62, k)])
        x = x[rng.permutation(len(x))][:8]
        dw = cuda.upload(w)
        with np.errstate(all="ignore"):
            want = (project_chain if chain else project)(x, w, "A16").view(np.uint16)
        out = cp.zeros((8, n), dtype=cp.uint16)
        cuda.launch("dense_gemm", dev_rows(x), dw, out)
        got = cp.asnumpy(out)
        bad = np.argwhere(got != want)
        print("chain" if chain else "tree", seed, len(bad), [(tuple(b), hex(got[tuple(b)]), hex(want[tuple(b)])) for b in bad[:3]])
