"""The worked example of docs/arithmetic.md (§ worked-example: one NVFP4 × A16 output, K = 48).

Every expected number below was computed by hand (exact rational arithmetic, rounded by the
rules of the contract) and is printed in the doc; none comes from the code under test. The
test rebuilds the example with the library and checks each intermediate and the final bits,
so a change to the doc or to the arithmetic shows up here.
"""

from __future__ import annotations

import numpy as np
import pytest

from metrale.reference import projection
from metrale.reference.activations import quantize_a16
from metrale.reference.elements import BF16, E4M3
from metrale.reference.formats import Nvfp4Weight
from metrale.reference.tree import finish_tree, subtree_roots

K = 48

# x: bf16 bits of the non-zero elements (all others +0.0), and their values.
X_BITS = {0: 0x3FC0, 1: 0xBE80, 5: 0x4040, 16: 0x42C8, 17: 0x3BC0, 18: 0x3AA0, 40: 0xB700}
X_VALUES = {0: 1.5, 1: -0.25, 5: 3.0, 16: 100.0, 17: 3 / 512, 18: 5 / 4096, 40: -(2.0**-17)}
# A16: block exponents E_b and the non-zero codes c_k = rne(x_k · 2^(14 − E_b)).
E_BLOCK = [1, 6, -17]
A_CODES = {0: 12288, 1: -2048, 5: 24576, 16: 25600, 17: 2, 40: -16384}  # c_18 = rne(0.3125) = 0

# The NVFP4 weight row, ModelOpt layout: 24 packed bytes (even k in the low nibble).
W_BYTES = [0xB7, 0x80, 0x10, 0, 0, 0, 0, 0, 0x5C, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0]
W_CODES = {0: 12, 1: -3, 5: 1, 16: -4, 17: 6, 18: 8, 40: 2}  # 2·e2m1; nibble 0x8 (−0) at k = 3 is 0
WS_BYTES = [0x3B, 0x35, 0x44]  # e4m3 block scales
WS_VALUES = [1.375, 0.8125, 3.0]
S2_BITS = 0x3C23D70A  # weight_scale_2 = f32(0.01)

S_BLOCK = [178176, -102388, -32768]
V_BITS = [0x416F4000, 0xC3227B20, 0xB7C00000]  # 14.953125, −162.48095703125, −3·2^−17
V_VALUES = [14.953125, -162.48095703125, -3 * 2.0**-17]
LEVEL1 = [-147.52783203125, -3 * 2.0**-17]  # v0 + v1 (exact), v2 + (−0.0)
ROOT = -9668386 * 2.0**-16  # −147.527862548828125: the exact sum is a tie, rounded to even
ROOT_BITS = 0xC3138722
Y32_BITS = 0xBFBCD5EE  # f32(root · weight_scale_2) = −1.475278615951538…
Y_BF16_BITS = 0xBFBD  # −1.4765625


def f32_bits(v: float | np.floating) -> int:
    return int(np.array(v, dtype=np.float32).view(np.uint32))


@pytest.fixture
def example() -> tuple[np.ndarray, Nvfp4Weight]:
    bits = np.zeros((1, K), dtype=np.uint16)
    for k, b in X_BITS.items():
        bits[0, k] = b
    x = bits.view(BF16)
    w = Nvfp4Weight(
        weight=np.array([W_BYTES], dtype=np.uint8),
        weight_scale=np.array([WS_BYTES], dtype=np.uint8).view(E4M3),
        weight_scale_2=np.array(S2_BITS, dtype=np.uint32).view(np.float32)[()],
        name="example",
    )
    return x, w


def test_inputs_decode_as_the_doc_says(example: tuple[np.ndarray, Nvfp4Weight]) -> None:
    x, w = example
    xf = x.astype(np.float32)[0]
    assert {k: float(xf[k]) for k in np.flatnonzero(xf)} == X_VALUES
    codes = w.codes()[0]
    assert {int(k): int(codes[k]) for k in np.flatnonzero(codes)} == W_CODES
    assert w.weight_scale.astype(np.float32)[0].tolist() == WS_VALUES
    assert float(w.weight_scale_2) == 0.009999999776482582


def test_a16_codes(example: tuple[np.ndarray, Nvfp4Weight]) -> None:
    x, _ = example
    a = quantize_a16(x)
    assert a.exp[0].tolist() == E_BLOCK
    assert a.finite.all()
    c = a.codes[0].reshape(K)
    assert {int(k): int(c[k]) for k in np.flatnonzero(c)} == A_CODES


def test_block_dots_values_tree_and_output(
    example: tuple[np.ndarray, Nvfp4Weight], monkeypatch: pytest.MonkeyPatch
) -> None:
    x, w = example
    a = quantize_a16(x)
    s = (a.codes[0] * w.codes()[0].reshape(3, 16)).sum(axis=1)
    assert s.tolist() == S_BLOCK

    # The library's own block values and root: spy on the tree the projection calls (the
    # subtree roots over the block values, then the finish of the whole tree).
    seen: list[np.ndarray] = []
    roots: list[np.ndarray] = []

    def spy_leaves(v: np.ndarray, spans: list[tuple[int, int]], first: int = 0, axis: int = 0) -> np.ndarray:
        seen.append(np.array(v, dtype=np.float32).reshape(-1))
        return subtree_roots(v, spans, first, axis)

    def spy_root(nodes: dict[tuple[int, int], np.ndarray], nblocks: int) -> np.ndarray:
        roots.append(np.array(finish_tree(nodes, nblocks), dtype=np.float32))
        return roots[-1]

    monkeypatch.setattr(projection, "subtree_roots", spy_leaves)
    monkeypatch.setattr(projection, "finish_tree", spy_root)
    y = projection.project(x, w, "A16")
    assert len(seen) == 1 and len(roots) == 1
    seen_root = [(seen[0], roots[0])]
    leaves, root = seen_root[0]
    assert leaves.view(np.uint32).tolist() == V_BITS
    assert leaves.tolist() == V_VALUES
    assert root.reshape(-1).view(np.uint32).tolist() == [ROOT_BITS]
    assert float(root.reshape(-1)[0]) == ROOT

    # The tree by hand: pad with −0.0, adjacent pairs first.
    v = np.array(V_VALUES, dtype=np.float32)
    level1 = [v[0] + v[1], v[2] + np.float32(-0.0)]
    assert [float(t) for t in level1] == LEVEL1
    assert f32_bits(level1[0] + level1[1]) == ROOT_BITS
    # The exact sum is a tie between two f32 neighbours; the tree's add rounded it to even.
    assert float(np.float64(level1[0]) + np.float64(level1[1])) == -9668385.5 * 2.0**-16

    assert f32_bits(np.float32(ROOT) * w.weight_scale_2) == Y32_BITS
    assert y.dtype == BF16 and y.shape == (1, 1)
    assert int(y.view(np.uint16)[0, 0]) == Y_BF16_BITS
    assert float(y.astype(np.float32)[0, 0]) == -1.4765625
