"""Tensor parallel over torch.distributed (gloo, reference backend): every TP size gives the
single-device bits on every layer kind, weight-quantization mode, entry point and m, with the
down projection split by K (the reference's split) and by output rows (the CUDA backend's),
arithmetic.md § tp. The ranks run in one world of forked processes (tests/tp_worker.py); the
single-device layer runs in the test process meanwhile."""

from __future__ import annotations

import itertools
import json
import socket
from typing import Any

import numpy as np
import pytest

from metrale.distributed import block_ranges
from metrale.errors import MetraleError
from metrale.reference.tree import finish_tree, subtree_roots, subtree_spans, tree_sum

#: transformers' model modules of metrale.checkpoint.example.tiny_model, imported once by the forkserver.
HF_MODELS = tuple(f"transformers.models.{f}.modeling_{f}" for f in ("llama", "qwen3", "gemma"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(fn: Any, nprocs: int, args: tuple[Any, ...], hf: bool = False) -> Any:
    """``nprocs`` ranks of ``fn`` forked from one forkserver that imported torch and the worker
    once (a spawn per rank re-imports torch: ~1.4 s of CPU each); ``hf``: torch._dynamo and
    transformers' models too (~2.5 s more; the preload takes effect when the process's
    forkserver starts)."""
    import multiprocessing

    import torch.multiprocessing as mp

    multiprocessing.get_context("forkserver").set_forkserver_preload(
        [
            "torch.distributed",
            "metrale.distributed",
            "metrale.distributed.module",
            "tests.layer_cases",
            "tests.tp_worker",
            # torch._dynamo: imported by the first custom-op call (metrale::dense_ffn), ~1 s
            *(("torch._dynamo", "metrale.hf", *HF_MODELS) if hf else ()),
        ]
    )
    return mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="forkserver")


def _join(ctx: Any) -> None:
    while not ctx.join():
        pass


def _join_within(ctx: Any, seconds: float) -> None:
    """Join the ranks; a rank still running after ``seconds`` (a hang) is killed and fails the test."""
    import time

    deadline = time.monotonic() + seconds
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(
                f"tensor-parallel ranks still running after {seconds} s (a rank waits in a collective)"
            )


def _bits_mismatch(where: str, got: np.ndarray, want: np.ndarray) -> str | None:
    """None when the raw bits are equal, else where the first difference is."""
    if got.shape != want.shape:
        return f"{where}: shape {got.shape} != {want.shape}"
    if np.array_equal(got, want):
        return None
    i = tuple(int(v) for v in np.argwhere(got != want)[0])
    return f"{where}: {list(i)} bits {int(got[i]):04x} != {int(want[i]):04x}"


def _module_want() -> tuple[dict[tuple[str, int], np.ndarray], dict[tuple[str, str], np.ndarray]]:
    """The single-device MetraleFfn's output bits per (format, m) and its state_dict."""
    from metrale.reference.context import FfnConfig
    from metrale.torch import MetraleFfn
    from tests import tp_worker as w

    ys, sds = {}, {}
    for fmt in w.MOD_FORMATS:
        whole = MetraleFfn.from_weights(FfnConfig(w.MOD_HIDDEN, w.MOD_INTER), w.module_weights(fmt), "silu")
        for m in w.MOD_MS:
            ys[fmt, m] = w.raw(whole(w.module_input(fmt, m)))
        sds.update({(fmt, k): w.raw(t) for k, t in whole.state_dict().items()})
    return ys, sds


def _want_slice(whole: np.ndarray, key: str, split: str, size: int, rank: int) -> np.ndarray:
    """The part of a whole module's buffer ``key`` rank ``rank`` of ``size`` holds, written out
    from the layout (gate/up: output rows of its 16-column blocks; down: output rows in 16-row
    units under the N split, K columns of its blocks under the K split, Q2_0 whole 64-groups)."""
    from tests import tp_worker as w

    nb = w.MOD_INTER // 16
    b0, b1 = rank * nb // size, (rank + 1) * nb // size
    if whole.ndim == 0 or whole.size == 1:
        return whole
    if not key.startswith("down_proj_"):
        return whole[16 * b0 : 16 * b1]
    if split == "n":
        nu = w.MOD_HIDDEN // 16
        return whole[16 * (rank * nu // size) : 16 * ((rank + 1) * nu // size)]
    if key == "down_proj_blocks":  # Q2_0: [N, K/64, 18]
        return whole[:, b0 // 4 : -(-b1 // 4)]
    if whole.ndim == 1 or whole.shape[1] == 1:  # a per-row scale
        return whole
    per_block = whole.shape[1] * 16 / w.MOD_INTER  # columns per 16 K elements
    return whole[:, int(per_block * b0) : int(per_block * b1)]


def _module_mismatches(got: Any, world_rank: int, want: Any) -> tuple[list[str | None], int]:
    """The TpMetraleFfn runs of one world rank against the single-device module."""
    from tests import tp_worker as w

    ys, sds = want
    bad: list[str | None] = []
    checked = 0
    for split, size in w.MOD_RUNS:
        ranks = w.GROUPS[size]
        if world_rank not in ranks:
            continue
        r = ranks.index(world_rank)
        for fmt in w.MOD_FORMATS:
            who = f"TpMetraleFfn split {split} TP={size} rank {r} {fmt}"
            for m in w.MOD_MS:
                bad.append(_bits_mismatch(f"{who} m={m}", got[f"mod|{split}|{size}|{fmt}|{m}"], ys[fmt, m]))
                checked += 1
            keys = sorted(k.split("|")[-1] for k in got.files if k.startswith(f"sd|{split}|{size}|{fmt}|"))
            want_keys = sorted([*(k for f, k in sds if f == fmt), "_extra_state"])
            if keys != want_keys:
                bad.append(f"{who}: state_dict keys {keys} != {want_keys}")
                continue
            for key in keys:
                if key == "_extra_state":
                    part = np.array([r, size, "kn".index(split), w.MOD_HIDDEN, w.MOD_INTER], dtype=np.uint64)
                else:
                    part = _want_slice(sds[fmt, key], key, split, size, r)
                shape = tuple(got[f"shape|{split}|{size}|{fmt}|{key}"])
                if shape != part.shape:
                    bad.append(f"{who}: state_dict {key} shape {shape} != {part.shape}")
                elif not np.array_equal(
                    got[f"sd|{split}|{size}|{fmt}|{key}"], part.view(np.uint8).reshape(-1)
                ):
                    bad.append(f"{who}: state_dict {key} bytes are not the rank's slice")
    return bad, checked


def test_tp_bits_equal_single_device_every_size(tmp_path) -> None:
    """One gloo world of 8 processes; groups of TP = 1, 2, 3, 4, 8 run every (layer kind, weight
    quantization mode, entry point, m) case with the down projection split by K, and TP = 1, 2,
    3 split by output rows; every rank of every run must return the bits and the launch log of
    the single-device layer, and its K-split f32 roots must equal the whole tree's. The same
    world runs ``TpMetraleFfn`` (every format, the N split on every size and the K split at
    TP = 4: the single-device ``MetraleFfn``'s bits, a state_dict of the rank's slices only)."""
    from metrale.distributed.backend import TP_WITHOUT
    from metrale.reference.kernels import ReferenceBackend
    from metrale.reference.projection import _tree_projection
    from tests import tp_worker
    from tests.layer_cases import run_guarded, weight_quant_env

    ctx = _start(tp_worker.run, tp_worker.WORLD, (tp_worker.WORLD, _free_port(), str(tmp_path)))
    try:
        cases = tp_worker.cases()
        parts = tp_worker.layer_parts()
        want, want_launches = [], []
        for i, (kind, mode, entry, m) in enumerate(cases):
            layer = parts[kind].layer(ReferenceBackend().without(TP_WITHOUT))  # the TP backend's kernels
            with weight_quant_env(mode):
                want.append(run_guarded(layer, entry, tp_worker.case_input(i, m)))
            want_launches.append(layer.backend.launches)
        h = tp_worker.root_input()
        roots = {
            f"{kind}|{w.name}|{qn}": _tree_projection(q(h), w).view(np.uint32)
            for kind, p in parts.items()
            for w in tp_worker.down_weights(p)
            for qn, q in tp_worker.root_quants(w)
        }
        module_want = _module_want()
    finally:
        _join(ctx)
    assert len(cases) > 300 and len(roots) >= 12
    bad: list[str] = []
    checked = 0
    for world_rank in range(tp_worker.WORLD):
        got = np.load(tmp_path / f"rank{world_rank}.npz")
        launches = json.loads((tmp_path / f"rank{world_rank}.json").read_text())
        for split, size in tp_worker.RUNS:
            ranks = tp_worker.GROUPS[size]
            if world_rank not in ranks:
                continue
            who = f"split {split} TP={size} rank {ranks.index(world_rank)}"
            for i, (kind, mode, entry, m) in enumerate(cases):
                where = f"{who} {kind} {mode} {entry} m={m}"
                bad.append(_bits_mismatch(where, got[f"bits|{split}|{size}|{i}"], want[i]))
                log = launches[f"{split}|{size}|{i}"]
                if log != want_launches[i]:
                    bad.append(f"{where}: launches {log} != {want_launches[i]}")
                checked += 1
            for key, r in roots.items() if split == "k" else ():
                bad.append(_bits_mismatch(f"{who} f32 roots {key}", got[f"roots|{size}|{key}"], r))
        mod_bad, mod_checked = _module_mismatches(got, world_rank, module_want)
        bad += mod_bad
        checked += mod_checked
    per_rank = len(tp_worker.MOD_FORMATS) * len(tp_worker.MOD_MS)
    assert checked == len(cases) * sum(size for _, size in tp_worker.RUNS) + sum(
        size * per_rank for _, size in tp_worker.MOD_RUNS
    )
    bad = [b for b in bad if b]
    assert bad == [], f"{len(bad)} mismatches, first: {bad[:5]}"


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
    every safetensors format, with the down projection split by K and by rows, as a layer and
    as a TpMetraleFfn; every rank's bits equal the whole layer's, and the module's buffers
    are at most its blocks' share of the whole module's (scalars aside). A tiny Llama with the
    NVFP4 folder's MLPs read slice by slice (``replace_mlps(..., tp_group=)``) gives the logits
    of the single-device replacement, and tiny Llama / Qwen3 (W4A4, calibrated) / Gemma models
    with MLPs quantized on the fly give the single-device logits at TP = 2 and 3."""
    from metrale import load_ffn_layer
    from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
    from metrale.checkpoint.example import make_example_checkpoint
    from tests import tp_worker

    src = make_example_checkpoint(tmp_path / "llama", hidden=64, intermediate=128, layers=2, shards=2, seed=5)
    paths = [str(src)]
    for fmt in ("nvfp4", "fp8", "w8a8"):
        convert_checkpoint(src, tmp_path / fmt, ConvertOptions(fmt))
        paths.append(str(tmp_path / fmt))
    from metrale.torch import MetraleFfn

    ctx = _start(tp_worker.run_load, 3, (3, _free_port(), str(tmp_path), paths), hf=True)
    try:
        want, whole_bytes = {}, {}
        for j, p in enumerate(paths):
            whole = load_ffn_layer(p, layer=1, backend="reference")
            whole_bytes[j] = sum(t.nbytes for t in MetraleFfn.from_layer(whole).buffers())
            for m in tp_worker.LOAD_MS:
                want[j, m] = whole(tp_worker.load_input(m, whole.config.hidden_size)).view(np.uint16)
        with pytest.raises(MetraleError, match="tp_split='x': want one of k, n"):
            load_ffn_layer(paths[1], layer=1, backend="reference", tp_rank=0, tp_size=3, tp_split="x")
    finally:
        _join(ctx)
    bad = []
    hf_checked = 0
    for rank, (b0, b1) in enumerate(block_ranges(8, 3)):
        got = np.load(tmp_path / f"load{rank}.npz")
        bad.append(
            _bits_mismatch(f"rank {rank} HF logits, TP MLPs of {paths[1]}", got["hf|True"], got["hf|False"])
        )
        for size, ranks in tp_worker.HF_SIZES.items():
            for c, case in enumerate(tp_worker.HF_CASES) if rank in ranks else ():
                where = f"HF {case} TP={size} rank {ranks.index(rank)} logits"
                bad.append(_bits_mismatch(where, got[f"hf|{size}|{c}"], got[f"hf1|{c}"]))
                hf_checked += 1
        for split, (j, p) in itertools.product("kn", enumerate(paths)):
            held = int(got[f"{split}|{j}|inter"])
            if held != 16 * (b1 - b0):
                bad.append(f"{p} split {split}: rank {rank} holds {held} columns, want {16 * (b1 - b0)}")
            for m in tp_worker.LOAD_MS:
                where = f"{p} split {split} rank {rank} m={m}"
                bad.append(_bits_mismatch(where, got[f"{split}|{j}|{m}"], want[j, m]))
                bad.append(_bits_mismatch(f"TpMetraleFfn {where}", got[f"mod|{split}|{j}|{m}"], want[j, m]))
            held = int(got[f"mod|{split}|{j}|bytes"])
            # the rank's share: its blocks (and under the N split its down rows, 4 units of 16);
            # beside it the scalars and, under the K split, the down's per-row f32 scales (64 rows)
            share = max((b1 - b0) / 8, ((rank + 1) * 4 // 3 - rank * 4 // 3) / 4 if split == "n" else 0)
            if not 0 < held <= whole_bytes[j] * share + 4 * 64 + 64:
                bad.append(
                    f"{p} split {split}: rank {rank}'s TpMetraleFfn holds {held} bytes of {whole_bytes[j]}"
                )
    bad = [b for b in bad if b]
    assert bad == [], bad[:5]
    assert hf_checked == len(tp_worker.HF_CASES) * sum(len(r) for r in tp_worker.HF_SIZES.values())


def test_load_tp_arguments_refused(tmp_path) -> None:
    from metrale import load_ffn_layer

    with pytest.raises(MetraleError, match="tp_rank=3, tp_size=2"):
        load_ffn_layer(tmp_path, tp_rank=3, tp_size=2)
    with pytest.raises(MetraleError, match="tp_split='n' without tp_rank"):
        load_ffn_layer(tmp_path, tp_split="n")


def test_tp_backend_refusals() -> None:
    from metrale.distributed import TpBackend
    from metrale.reference.backend import Backend
    from metrale.reference.kernels import ReferenceBackend

    with pytest.raises(MetraleError, match=r"torch\.distributed is not initialized"):
        TpBackend(ReferenceBackend())

    class Other(Backend):
        name = "cuda"

    with pytest.raises(MetraleError, match=r"backend 'cuda' cannot split the down projection by K"):
        TpBackend(Other({}), split="k")
    with pytest.raises(MetraleError, match=r"split='x', want one of k, n"):
        TpBackend(ReferenceBackend(), split="x")
    # Without a split named, the CUDA backend takes the N split (and then needs the group).
    with pytest.raises(MetraleError, match=r"torch\.distributed is not initialized"):
        TpBackend(Other({}))


def test_row_ranges_names_the_hidden_size() -> None:
    from metrale.distributed import row_ranges

    assert row_ranges(48, 3) == [(0, 16), (16, 32), (32, 48)]
    with pytest.raises(
        MetraleError, match=r"tp_size=8 needs 1 <= tp_size <= 4 under the 'n' split \(the hidden size 64"
    ):
        row_ranges(64, 8)


@pytest.fixture
def one_rank_world() -> Any:
    """A gloo world of this process alone (torch.distributed torn down afterwards)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def _one_rank_ffn(split: str = "n") -> Any:
    from metrale.distributed import TpMetraleFfn
    from metrale.reference.context import FfnConfig
    from tests import tp_worker as w

    ws = w.module_weights("nvfp4")
    return TpMetraleFfn.from_weights(FfnConfig(w.MOD_HIDDEN, w.MOD_INTER), ws, "silu", split=split), ws


def test_tp_module_refusals_without_a_world() -> None:
    with pytest.raises(MetraleError, match=r"TpMetraleFfn: torch\.distributed is not initialized"):
        _one_rank_ffn()


def test_tp_module_state_copy_and_refusals(one_rank_world: Any) -> None:
    """A rank's module: its own state_dict round-trips; another rank's, a copy, a second
    split, whole weights as slices, split 'k' on CUDA and backward are refused by name."""
    import copy
    import pickle

    import torch

    from metrale.distributed import TpMetraleFfn
    from metrale.reference.context import FfnConfig
    from tests import tp_worker as w

    tp, ws = _one_rank_ffn()
    x = w.module_input("nvfp4", 3)
    y = tp(x)
    sd = tp.state_dict()
    assert sd["_extra_state"].tolist() == [0, 1, 1, w.MOD_HIDDEN, w.MOD_INTER]
    tp.load_state_dict(sd)
    assert torch.equal(tp(x).view(torch.int16), y.view(torch.int16))
    other = dict(sd, _extra_state=torch.tensor([1, 2, 1, w.MOD_HIDDEN, w.MOD_INTER]))
    with pytest.raises(
        MetraleError,
        match=r"the state holds the slices of rank 1 of 2, split 'n'.*this module is rank 0 of 1",
    ):
        tp.load_state_dict(other)
    with pytest.raises(MetraleError, match="cannot be copied or pickled"):
        copy.deepcopy(tp)
    with pytest.raises(MetraleError, match="cannot be copied or pickled"):
        pickle.dumps(tp)
    with pytest.raises(MetraleError, match="already tensor parallel"):
        tp.tensor_parallel()
    with pytest.raises(MetraleError, match=r"split='x', want one of k, n"):
        _one_rank_ffn("x")
    with pytest.raises(
        MetraleError, match="want the rank's \\[gate, up, down\\] with down a KShard or NShard"
    ):
        TpMetraleFfn(FfnConfig(w.MOD_HIDDEN, w.MOD_INTER), ws, "silu")
    k, _ = _one_rank_ffn("k")
    with pytest.raises(MetraleError, match="split 'k' runs on the reference backend \\(CPU\\) only"):
        k._layer_of(k.host_weights(), "cuda")
    xg = x.clone().requires_grad_(True)
    with pytest.raises(MetraleError, match="inference only"):
        tp(xg).sum().backward()


def test_replace_mlps_tp_checks_the_checkpoint_shape(one_rank_world: Any, tmp_path) -> None:
    """A checkpoint read slice by slice is checked against the model like a whole one."""
    from metrale.checkpoint.example import make_example_checkpoint, tiny_model
    from metrale.hf import replace_mlps

    src = make_example_checkpoint(tmp_path / "llama", hidden=64, intermediate=128, layers=2, seed=5)
    model = tiny_model("llama", hidden_size=128, intermediate_size=320)
    with pytest.raises(
        MetraleError, match="layer 0 FFN is hidden=64, intermediate=128; the model's is hidden=128"
    ):
        replace_mlps(model, src, tp_group=one_rank_world)


def test_ranks_that_disagree_fail_alike(tmp_path) -> None:
    """Two gloo ranks given different configs, splits, weights or row counts (zero rows on one
    rank included: a fresh module, so its first call builds the layer), one rank's input
    refused (float32), or one failing
    its construction (tp_layer(cfg, 1, 3) in a group of 2, split 'x'), all raise the same
    TpDisagreement on both ranks, within the collective timeout (no hang); the group then
    still runs an agreeing module with the single-device bits, and a module one rank alone
    rebuilt (load_state_dict) gives them too."""
    from metrale.reference.context import FfnConfig
    from metrale.torch import MetraleFfn
    from tests import tp_worker as w

    ctx = _start(w.run_hostile, 2, (2, _free_port(), str(tmp_path)))
    _join_within(ctx, 60)
    got = [json.loads((tmp_path / f"hostile{r}.json").read_text()) for r in range(2)]
    want = {
        "config": r"disagree on the FFN \(hidden, intermediate\) "
        r"\(rank 0: \(128, 320\); rank 1: \(128, 160\)\)",
        "split": r"disagree on split \(rank 0: k; rank 1: n\)",
        "weights": r"disagree on .*fingerprint",
        "rows": r"different row counts \(rank 0: 2, rank 1: 3\)",
        "zero rows": r"different row counts \(rank 0: 0, rank 1: 3\)",
        "bad input": r"rank 0 of 2 refused its input: MetraleFfn input: dtype torch\.float32, "
        r"want torch\.bfloat16",
        "build": r"rank 1 of 2 failed to build its part: tensor parallel: rank 1 of 3 given, "
        r"the process group says 1 of 2",
        "bad split": r"rank 1 of 2 failed to build its part: TpMetraleFfn: split='x', want one of k, n",
    }
    import re

    for name, pattern in want.items():
        assert got[0][name] == got[1][name], (name, got[0][name], got[1][name])
        assert re.match(r"TpDisagreement: tensor parallel.*" + pattern, got[0][name]), (name, got[0][name])
    whole = MetraleFfn.from_weights(FfnConfig(w.MOD_HIDDEN, w.MOD_INTER), w.module_weights("nvfp4"), "silu")
    y = w.raw(whole(w.module_input("nvfp4", 3)))
    for r in range(2):
        assert np.array_equal(np.load(tmp_path / f"hostile{r}.npy"), y), r
    # one rank reloading its state (its layer rebuilt alone) runs on with the others
    assert got[0]["rebuild on one rank"] == got[1]["rebuild on one rank"] == "no error", got
    for r in range(2):
        assert np.array_equal(np.load(tmp_path / f"rebuild{r}.npy"), y), r


def test_tp_ranks_and_sizes_refused_by_type(tmp_path) -> None:
    from metrale import load_ffn_layer
    from metrale.distributed import tp_layer
    from metrale.reference.context import FfnConfig

    cfg = FfnConfig(64, 128)
    for rank, size, bad in (
        ("0", "1", "rank='0'"),
        (0.0, 1, "rank=0.0"),
        (0, 1.0, "size=1.0"),
        (True, 2, "rank=True"),
    ):
        with pytest.raises(MetraleError, match=f"tp_layer: {bad}, want an int"):
            tp_layer(cfg, rank, size)
    with pytest.raises(MetraleError, match=r"tp_rank=0\.5: want an int, got float"):
        load_ffn_layer(tmp_path, tp_rank=0.5, tp_size=1)
    with pytest.raises(MetraleError, match=r"tp_size='1': want an int, got str"):
        load_ffn_layer(tmp_path, tp_rank=0, tp_size="1")


_DESTROY_FREES_THE_GROUP = """
import sys
import torch.distributed as dist
import metrale.torch  # what a TP script imports before init_process_group
dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
pg = dist.distributed_c10d._get_default_group()
import torch._dynamo  # the first metrale::dense_ffn call (or torch.compile) imports it
dist.destroy_process_group()
print(sys.getrefcount(pg) - 1)  # references left besides ours (getrefcount counts its argument)
"""


def test_destroy_process_group_frees_the_world_after_the_first_operator_call() -> None:
    """torch.distributed.nn.functional binds ``group.WORLD`` as default arguments when imported;
    imported after init_process_group (torch._dynamo imports it) it keeps the group alive past
    destroy_process_group, and gloo's worker threads then free Python-owned tensors during
    interpreter exit (SIGABRT, "terminate called without an active exception", about 1 exit in
    10). Importing metrale.torch first binds None."""
    import subprocess
    import sys

    got = subprocess.run(
        [sys.executable, "-c", _DESTROY_FREES_THE_GROUP, f"tcp://127.0.0.1:{_free_port()}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split()[-1] == "1", f"the world group still referenced after destroy: {got.stdout}"
