"""Tensor parallel over torch.distributed (gloo, reference backend): every TP size gives the
single-device bits on every layer kind, weight-quantization mode, entry point and m."""

from __future__ import annotations

import itertools
import json
import socket

import numpy as np
import pytest

from metrale.distributed import block_ranges
from metrale.errors import MetraleError
from metrale.reference.tree import finish_tree, subtree_roots, subtree_spans, tree_sum


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8])
def test_tp_bits_equal_single_device(size: int, tmp_path) -> None:
    import torch.multiprocessing as mp

    from tests import tp_worker

    mp.spawn(tp_worker.run, args=(size, _free_port(), str(tmp_path)), nprocs=size, join=True)
    res = json.loads((tmp_path / f"tp{size}.json").read_text())
    assert res["cases"] == len(tp_worker.cases()) > 300
    assert res["bad"] == []


def test_block_ranges_balanced_within_one_block() -> None:
    for nb in (1, 5, 24, 768, 1792):
        for size in (1, 2, 3, 4, 8):
            if size > nb:
                with pytest.raises(MetraleError, match=f"tp_size={size} needs"):
                    block_ranges(nb, size)
                continue
            r = block_ranges(nb, size)
            assert r[0][0] == 0 and r[-1][1] == nb
            assert all(a[1] == b[0] for a, b in itertools.pairwise(r))
            sizes = [b1 - b0 for b0, b1 in r]
            assert max(sizes) - min(sizes) <= 1


def test_subtree_spans_are_aligned_and_few() -> None:
    assert subtree_spans(0, 768) == [(0, 512), (512, 256)]
    assert subtree_spans(256, 512) == [(256, 256)]
    assert subtree_spans(3, 11) == [(3, 1), (4, 4), (8, 2), (10, 1)]
    for b0, b1 in [(0, 1), (5, 6), (1, 1023), (511, 1537), (256, 768)]:
        spans = subtree_spans(b0, b1)
        assert spans[0][0] == b0 and sum(s for _, s in spans) == b1 - b0
        assert all(lo % s == 0 and s & (s - 1) == 0 for lo, s in spans)
        assert len(spans) <= 2 * (b1 - b0).bit_length()


def test_split_tree_equals_whole_tree_by_hand() -> None:
    """B = 3 split as [0, 2) + [2, 3): the finish pads with −0.0 and keeps the tie-to-even root
    of arithmetic.md § worked-example (computed there by hand)."""
    v = np.array([14.953125, -162.48095703125, -3 * 2.0**-17], dtype=np.float32)
    nodes = {(0, 2): subtree_roots(v, [(0, 2)])[0], (2, 1): v[2]}
    root = finish_tree(nodes, 3)
    assert np.float32(root).view(np.uint32) == 0xC3138722
    # A −0.0 leaf only pads: an all −0.0 / +0.0 mix keeps IEEE's sign of zero.
    z = np.array([-0.0, -0.0, -0.0], dtype=np.float32)
    assert np.signbit(tree_sum(z)) and np.signbit(finish_tree({(0, 2): np.float32(-0.0), (2, 1): z[2]}, 3))


def test_split_tree_random_nonfinite_and_every_split() -> None:
    rng = np.random.default_rng(3)
    for nb in (1, 2, 3, 7, 24, 100):
        v = (rng.standard_normal((nb, 5)) * 10.0 ** rng.integers(-30, 30, (nb, 5))).astype(np.float32)
        v[rng.integers(0, nb), 0] = np.inf
        v[rng.integers(0, nb), 1] = np.nan
        want = tree_sum(v)
        for size in range(1, min(nb, 9) + 1):
            nodes = {}
            for b0, b1 in block_ranges(nb, size):
                sp = subtree_spans(b0, b1)
                nodes.update(zip(sp, subtree_roots(v[b0:b1], sp, b0), strict=True))
            got = finish_tree(nodes, nb)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (nb, size)


def test_load_ffn_layer_reads_rank_slices(tmp_path) -> None:
    """TP = 3 over 8 blocks (2, 3, 3): each rank loads its slices of a converted checkpoint of
    every safetensors format; the bits equal the whole layer's."""
    import torch.multiprocessing as mp

    from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
    from metrale.checkpoint.example import make_example_checkpoint
    from tests import tp_worker

    src = make_example_checkpoint(tmp_path / "llama", hidden=64, intermediate=128, layers=2, shards=2, seed=5)
    paths = [str(src)]
    for fmt in ("nvfp4", "fp8", "w8a8"):
        convert_checkpoint(src, tmp_path / fmt, ConvertOptions(fmt))
        paths.append(str(tmp_path / fmt))
    mp.spawn(tp_worker.run_load, args=(3, _free_port(), str(tmp_path), paths), nprocs=3, join=True)
    assert json.loads((tmp_path / "load3.json").read_text())["bad"] == []


def test_load_tp_arguments_refused(tmp_path) -> None:
    from metrale.checkpoint.load import load_ffn_layer

    with pytest.raises(MetraleError, match="tp_rank=3, tp_size=2"):
        load_ffn_layer(tmp_path, tp_rank=3, tp_size=2)


def test_tp_backend_refusals() -> None:
    from metrale.distributed import TpBackend
    from metrale.reference.backend import Backend
    from metrale.reference.kernels import ReferenceBackend

    with pytest.raises(MetraleError, match=r"torch\.distributed is not initialized"):
        TpBackend(ReferenceBackend())

    class Other(Backend):
        name = "cuda"

    with pytest.raises(MetraleError, match="backend 'cuda' is not supported"):
        TpBackend(Other({}))
