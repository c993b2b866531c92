"""Accuracy of the block-value sums against float64: the contract's tree, a chain of fma per
8-block step (tree over steps), and one chain over the whole row (probe for a contract revision).
Gaussian weights quantized to NVFP4 (ModelOpt's quantizer), Gaussian rows (A16)."""
import numpy as np
from metrale.reference.activations import quantize_a16
from metrale.reference.elements import BF16, to_bf16
from metrale.reference.formats import Nvfp4Weight
from metrale.reference.projection import _nvfp4_a16
from metrale.reference.tree import tree_sum

F32 = np.float32
rng = np.random.default_rng(1)


def fma32(a, b, c):
    """f32(a*b + c) from f32 operands: the product is exact in float64 (24 + 24 bits); the sum is
    rounded to float64 with round-to-odd, then to f32 (correct for 53 >= 2*24 + 2)."""
    p = a.astype(np.float64) * b.astype(np.float64)
    s = p + c.astype(np.float64)
    # two-sum error of s
    bb = s - p
    err = (p - (s - bb)) + (c.astype(np.float64) - bb)
    bits = s.view(np.int64)
    odd_fix = (err != 0) & ((bits & 1) == 0)
    bits = np.where(odd_fix, bits + np.where((err > 0) == (s > 0), 1, -1), bits)
    return bits.view(np.float64).astype(F32)


def main() -> None:
    for k, n, m in ((4096, 256, 64), (12288, 128, 64)):
        w = Nvfp4Weight.quantize(rng.standard_normal((n, k)).astype(F32), name="w")
        x = rng.standard_normal((m, k)).astype(F32).astype(BF16)
        a = quantize_a16(x)
        v = _nvfp4_a16(a, w)(0, n)  # [B, N, m] f32 block values (the contract's)
        nb = v.shape[0]
        # exact block values in float64: S * wscale * 2^(E-15); v = f32 of that (one rounding)
        exact = v.astype(np.float64)  # |S wscale| < 2^27: recompute exactly
        s = np.matmul(_nvfp4_a16.__globals__["_nvfp4_codes"](w, 0, n, nb).astype(np.float64),
                      a.codes.astype(np.float64).transpose(1, 2, 0))
        ws = _nvfp4_a16.__globals__["_E4M3_F32"][w.weight_scale.view(np.uint8)].T[:, :, None].astype(np.float64)
        p2 = np.exp2(a.exp.T.astype(np.float64) - 15)[:, None, :]
        vx = s * ws * p2
        truth = vx.sum(axis=0)
        tree = tree_sum(v, axis=0).astype(np.float64)
        P = (s * p2).astype(F32)  # exact in f32 (|S| < 2^23, in-window E)
        assert np.array_equal(P.astype(np.float64), s * p2)
        wsf = ws.astype(F32)
        # step chain: c = fma(P_b, ws_b, c) over 8 blocks from -0, then the tree over step roots
        roots = []
        for st in range(nb // 8):
            c = np.full(P.shape[1:], -0.0, F32)
            for b in range(8 * st, 8 * st + 8):
                c = fma32(P[b], np.broadcast_to(wsf[b], P.shape[1:]), c)
            roots.append(c)
        step = tree_sum(np.stack(roots), axis=0).astype(np.float64)
        # one chain over all blocks
        c = np.full(P.shape[1:], -0.0, F32)
        for b in range(nb):
            c = fma32(P[b], np.broadcast_to(wsf[b], P.shape[1:]), c)
        chain = c.astype(np.float64)
        scale = np.abs(vx).sum(axis=0)  # the condition: sum of |block values|
        for name, got in (("tree (contract)", tree), ("step chain + tree", step), ("row chain", chain)):
            e = np.abs(got - truth) / scale
            bf_diff = np.mean(to_bf16(got.astype(F32)).view(np.uint16) != to_bf16(truth.astype(F32)).view(np.uint16))
            print(f"K={k:5d} {name:18s} err/sum|v|: mean {e.mean():.2e} max {e.max():.2e}  in units of 2^-24: "
                  f"mean {e.mean() * 2**24:.2f} max {e.max() * 2**24:.2f}; bf16 outputs != bf16(f64 sum): {bf_diff:.4f}")


if __name__ == "__main__":
    main()
