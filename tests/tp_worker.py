"""The rank side of tests/test_distributed.py: one gloo world of 8 processes holds a process
group for every TP size (1, 2, 3, 4, 8) on a spread of its ranks, runs every case on every
group with the down projection split by K (the reference's split) and on the TP = 1, 2, 3
groups split by output rows (the CUDA backend's split, here over the reference kernels), and
each rank writes the raw bits it got; the test compares them with the single-device layer it
runs itself.

Importable by ``torch.multiprocessing`` (a plain module, no test functions).
"""

from __future__ import annotations

import datetime
import functools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

#: hidden 64, intermediate 320 = 20 blocks (not a power of two; Q2_0's 64-groups straddle ranks
#: at TP = 3 and 8, whose ranks own 6–7 and 2–3 blocks).
HIDDEN, INTER = 64, 320
#: The row counts: 1 … 64 as in the vectors, plus a prefill size beyond the decode arms.
MS = (1, 2, 3, 4, 5, 8, 17, 32, 33, 64, 80)
#: Rows of the activation pool the cases draw from.
POOL_ROWS = 96
#: Processes of the world, and the world ranks of each TP size's group (spread so that no
#: process serves more than three groups).
WORLD = 8
GROUPS: dict[int, tuple[int, ...]] = {
    8: tuple(range(8)),
    4: (0, 1, 2, 3),
    3: (4, 5, 6),
    2: (6, 7),
    1: (5,),
}
#: (split, TP size) of every run: K split on every size, N split on the small groups (TP = 3
#: has unequal h blocks, 6/7/7, and unequal output rows, 16/16/32).
RUNS: tuple[tuple[str, int], ...] = (
    ("k", 8),
    ("k", 4),
    ("k", 3),
    ("k", 2),
    ("k", 1),
    ("n", 3),
    ("n", 2),
    ("n", 1),
)
#: The tensor-parallel MetraleFfn (TpMetraleFfn) check: hidden 128 (8 row units, so the N
#: split reaches TP = 8; 16/16/32·… rows at TP = 3), intermediate 320 (20 blocks), every format.
MOD_HIDDEN, MOD_INTER = 128, 320
MOD_FORMATS = ("nvfp4", "w4a4", "w8a8", "q2_0", "fp8", "bf16")
#: Row counts (every m up to 64 on 8 ranks sharing 2 cores is too slow for CI; the GPU test
#: takes each): 1, 2, 3, a narrow tier, 33, and 80 as a [2, 40, hidden] prefill.
MOD_MS = (1, 2, 3, 5, 33, 80)
#: (split, TP size) of the module runs: the default N split on every size, the K split at
#: TP = 4 (5 blocks a rank: Q2_0's 64-groups straddle ranks; ranks 0–3 serve the fewest runs;
#: the layer runs above split by K on every size).
MOD_RUNS = (("n", 8), ("n", 4), ("n", 3), ("n", 2), ("n", 1), ("k", 4))
#: The Hugging Face check (in the loading world of 3 ranks, run beside the big world):
#: (family, replace_mlps source) of the tiny models (hidden 128, intermediate 320: 20 blocks,
#: 6/7/7 at TP = 3) run with TP MLPs at TP = 2 and 3, default split.
HF_CASES = (("llama", "nvfp4"), ("qwen3", "w4a4"), ("gemma", "q2_0"))
HF_IDS = 11
#: The TP sizes and world ranks of the HF check in the loading world.
HF_SIZES = {3: (0, 1, 2), 2: (0, 1)}


def hf_groups(dist: Any) -> dict[int, tuple[tuple[int, ...], Any]]:
    """The HF check's process groups (every rank of the world takes part in creating each)."""
    return {size: (ranks, dist.new_group(list(ranks), timeout=TIMEOUT)) for size, ranks in HF_SIZES.items()}


#: A rank stuck in a collective fails after this long instead of gloo's 30 minutes.
TIMEOUT = datetime.timedelta(seconds=300)
#: The f32-root check's activation rows (m = 13 over the intermediate size).
ROOT_ROWS = 13


def cases() -> list[tuple[str, str, str, int]]:
    """(kind, METRALE_WEIGHT_QUANT, entry, m) for every entry point that serves the case."""
    from tests.layer_cases import A4_KINDS, LAYER_KINDS, WEIGHT_QUANT_MODES, entry_ms

    out = []
    for kind in LAYER_KINDS:
        for mode in WEIGHT_QUANT_MODES if kind in A4_KINDS else ("w4a4",):
            for entry, ms in entry_ms(kind, mode).items():
                ms = (*ms, 80) if entry in ("forward_prefill", "forward_km_q2") else ms
                out += [(kind, mode, entry, m) for m in ms if m in MS]
    return out


@functools.cache
def _pool() -> np.ndarray:
    from tests.layer_cases import x_pool

    return x_pool(7, POOL_ROWS, HIDDEN)


def case_input(index: int, m: int) -> np.ndarray:
    """The bf16 rows [m, HIDDEN] of case ``index``: a seeded draw from one pool holding the
    named edge rows (every m > 1 holds one; m = 1 is an edge row for odd indices)."""
    from tests.layer_cases import row_indices

    return _pool()[row_indices(index, POOL_ROWS, m)]


def root_input() -> np.ndarray:
    """The bf16 rows [ROOT_ROWS, INTER] the f32-root check projects (edge rows included)."""
    from tests.layer_cases import x_pool

    return x_pool(13, ROOT_ROWS, INTER)


def layer_parts() -> dict[str, Any]:
    """Every layer kind's seeded parts, once."""
    from tests.layer_cases import LAYER_KINDS, make_parts

    return {kind: make_parts(kind, HIDDEN, INTER, seed=11) for kind in LAYER_KINDS}


def down_weights(parts: Any) -> list[Any]:
    """The down weights of a layer kind that run the tree (every container but W8A8)."""
    return [
        ws.down_proj for ws in (parts.weights, parts.bf16_weights, parts.fp8_weights, parts.q2_weights) if ws
    ]


def root_quants(w: Any) -> list[tuple[str, Any]]:
    """(name, quantizer) of the activations a down weight takes: A16, and A4 where it declares
    an input_scale."""
    from metrale.reference.activations import quantize_a4, quantize_a16

    out = [("a16", quantize_a16)]
    if getattr(w, "input_scale", None) is not None:
        out.append(("a4", lambda x, s=w.input_scale: quantize_a4(x, s)))
    return out


def module_weights(fmt: str, inter: int = MOD_INTER, seed: int = 40) -> list[Any]:
    """Seeded whole gate, up, down containers [inter, MOD_HIDDEN] / [MOD_HIDDEN, inter] of
    ``fmt`` (w4a4: NVFP4 with input scales)."""
    from metrale.checkpoint.work import quantize_array
    from metrale.reference.elements import BF16
    from metrale.reference.formats import DenseWeight

    rng = np.random.default_rng(MOD_FORMATS.index(fmt) + seed)
    out = []
    for j, (n, k) in enumerate(((inter, MOD_HIDDEN), (inter, MOD_HIDDEN), (MOD_HIDDEN, inter))):
        w = (rng.standard_normal((n, k), dtype=np.float32) * 0.08).astype(BF16)
        name = ("gate_proj", "up_proj", "down_proj")[j]
        if fmt == "bf16":
            out.append(DenseWeight.quantize(w, name=name))
        elif fmt == "w4a4":
            out.append(quantize_array("nvfp4", w, name, input_amax=3.0 if j < 2 else 0.5))
        else:
            out.append(quantize_array(fmt, w, name))
    return out


def module_input(fmt: str, m: int) -> Any:
    """The torch bf16 input of a module case: [m, MOD_HIDDEN] (m = 80: [2, 40, MOD_HIDDEN]), a
    seeded draw from a pool holding the named edge rows."""
    import torch

    from tests.layer_cases import row_indices, x_pool

    pool = x_pool(50 + MOD_FORMATS.index(fmt), POOL_ROWS, MOD_HIDDEN)
    x = np.ascontiguousarray(pool[row_indices(MOD_FORMATS.index(fmt) + m, POOL_ROWS, m)])
    t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return t.reshape(2, 40, MOD_HIDDEN) if m == 80 else t


def _module_runs(
    groups: dict[int, tuple[tuple[int, ...], Any]], rank: int, out: dict[str, np.ndarray]
) -> None:
    """Every format as a TpMetraleFfn on every module run of this rank: output bits per m
    (``mod|split|size|fmt|m``) and the state_dict (``sd|split|size|fmt|key``, raw bytes)."""

    from metrale.reference.context import FfnConfig
    from metrale.torch import MetraleFfn

    for fmt in MOD_FORMATS:
        whole = MetraleFfn.from_weights(FfnConfig(MOD_HIDDEN, MOD_INTER), module_weights(fmt), "silu")
        for split, size in MOD_RUNS:
            ranks, g = groups[size]
            if rank not in ranks:
                continue
            tp = whole.tensor_parallel(g, split)
            for m in MOD_MS:
                # run() is the metrale::dense_ffn operator's body (forward wraps it in the op,
                # whose first call imports torch._dynamo: ~1 s a process; the HF check and
                # tests/test_torch_ffn.py go through forward)
                out[f"mod|{split}|{size}|{fmt}|{m}"] = raw(tp.run(module_input(fmt, m)))
            for key, t in tp.state_dict().items():
                out[f"sd|{split}|{size}|{fmt}|{key}"] = raw(t).view(np.uint8).reshape(-1)
                out[f"shape|{split}|{size}|{fmt}|{key}"] = np.array(t.shape, dtype=np.int64)


def raw(t: Any) -> np.ndarray:
    """The raw bits of a CPU torch tensor (same-size unsigned integers)."""
    import torch

    carrier = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(carrier).numpy().view(f"u{t.element_size()}")


def hf_config() -> dict[str, int]:
    """The tiny models' sizes for the tensor-parallel check."""
    return {"hidden_size": MOD_HIDDEN, "intermediate_size": MOD_INTER}


def hf_ids() -> Any:
    import torch

    return torch.arange(HF_IDS).reshape(1, HF_IDS) * 7 % 96


def _hf_runs(groups: dict[int, tuple[tuple[int, ...], Any]], rank: int, out: dict[str, np.ndarray]) -> None:
    """Each HF case's logits bits with single-device MLPs (``hf1|case``) and with TP MLPs on
    every group of this rank (``hf|size|case``)."""
    import torch

    from metrale.checkpoint.example import tiny_model
    from metrale.hf import replace_mlps

    ids = hf_ids()
    for c, (family, fmt) in enumerate(HF_CASES):
        runs = [(0, None)] + [(size, g) for size, (ranks, g) in groups.items() if rank in ranks]
        for size, g in runs:
            model = tiny_model(family, seed=c, **hf_config())
            replace_mlps(model, fmt, calibration=ids if fmt == "w4a4" else None, tp_group=g)
            with torch.no_grad():
                logits = model(input_ids=ids).logits
            out[f"hf1|{c}" if g is None else f"hf|{size}|{c}"] = raw(logits)


def _f32_roots(tb: Any, size: int, rank: int, parts_by_kind: dict[str, Any]) -> dict[str, np.ndarray]:
    """The finished f32 tree before ``to_bf16`` (most last-bit differences of a wrong order
    vanish in bf16) of this rank's split, per kind / down weight / activation kind."""
    from metrale.distributed import block_ranges, k_slice

    h = root_input()
    b0, b1 = block_ranges(INTER // 16, size)[rank]
    out = {}
    for kind, parts in parts_by_kind.items():
        for w in down_weights(parts):
            shard = k_slice(w, b0, b1)
            for qn, q in root_quants(w):
                got = tb._tree(q(tb._cover(h[:, 16 * b0 : 16 * b1], shard)), shard)
                out[f"roots|{size}|{kind}|{w.name}|{qn}"] = got.view(np.uint32)
    return out


def run(rank: int, world: int, port: int, out_dir: str) -> None:
    """World rank ``rank``: every case on every run whose group it belongs to; writes
    ``rank{r}.npz`` (``bits|split|size|case`` → uint16 [m, HIDDEN], ``roots|…`` → uint32) and
    ``rank{r}.json`` (``split|size|case`` → the launch log)."""
    import torch
    import torch.distributed as dist

    from metrale.distributed import TpBackend
    from metrale.reference.kernels import ReferenceBackend
    from metrale.reference.tiers import weight_quantization
    from tests.layer_cases import run_guarded

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=TIMEOUT
    )
    try:
        groups = {s: (ranks, dist.new_group(list(ranks), timeout=TIMEOUT)) for s, ranks in GROUPS.items()}
        mine = {
            (split, size): (groups[size][0].index(rank), groups[size][1])
            for split, size in RUNS
            if rank in groups[size][0]
        }
        parts_by_kind = layer_parts()
        layers: dict[tuple[str, int, str], Any] = {}
        bits: dict[str, np.ndarray] = {}
        launches: dict[str, list[str]] = {}
        for i, (kind, mode, entry, m) in enumerate(cases()):
            os.environ["METRALE_WEIGHT_QUANT"] = mode
            weight_quantization.cache_clear()
            x = case_input(i, m)
            p = parts_by_kind[kind]
            for (split, size), (r, g) in mine.items():
                if (split, size, kind) not in layers:
                    layers[split, size, kind] = p.tp_layer(r, size, group=g, split=split)
                layer = layers[split, size, kind]
                layer.backend.launches.clear()
                bits[f"bits|{split}|{size}|{i}"] = run_guarded(layer, entry, x)
                launches[f"{split}|{size}|{i}"] = list(layer.backend.launches)
        for (split, size), (r, g) in mine.items():
            if split == "k":
                bits.update(_f32_roots(TpBackend(ReferenceBackend(), g), size, r, parts_by_kind))
        _module_runs(groups, rank, bits)
        np.savez(Path(out_dir, f"rank{rank}.npz"), **bits)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(launches))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_load(rank: int, size: int, port: int, out_dir: str, paths: list[str]) -> None:
    """Each rank loads its slices of every checkpoint in ``paths`` with either split, as a
    ``DenseFfnLayer`` and as a ``TpMetraleFfn``, and writes the bits of rows 1, 2, 3, 5, 70
    (``load{r}.npz``: ``split|path-index|m`` → uint16, ``mod|split|path-index|m`` the module's),
    its intermediate size and the module's buffer bytes; a tiny Llama's logits with the NVFP4
    checkpoint's MLPs, single-device and tensor parallel (``hf|False``, ``hf|True``); and the
    HF_CASES logits single-device and at TP = 2 (ranks 0, 1) and 3 (``_hf_runs``)."""
    import torch
    import torch.distributed as dist

    from metrale import load_ffn_layer
    from metrale.distributed import TpMetraleFfn

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size, timeout=TIMEOUT
    )
    out: dict[str, np.ndarray] = {}
    try:
        for split in ("k", "n"):
            for j, p in enumerate(paths):
                tp = load_ffn_layer(
                    p, layer=1, backend="reference", tp_rank=rank, tp_size=size, tp_split=split
                )
                out[f"{split}|{j}|inter"] = np.array(tp.config.intermediate_size)
                mod = TpMetraleFfn.from_checkpoint(p, 1, split=split)
                for m in LOAD_MS:
                    x = load_input(m, tp.config.hidden_size)
                    out[f"{split}|{j}|{m}"] = tp(x).view(np.uint16)
                    xt = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
                    out[f"mod|{split}|{j}|{m}"] = raw(mod(xt))
                out[f"mod|{split}|{j}|bytes"] = np.array(sum(t.nbytes for t in mod.buffers()))
        # a tiny Llama of the checkpoints' sizes with the NVFP4 folder's MLPs, read slice by slice
        from metrale.checkpoint.example import tiny_model
        from metrale.hf import replace_mlps

        for g in (None, dist.group.WORLD):
            model = replace_mlps(tiny_model("llama", seed=3), paths[1], tp_group=g)
            with torch.no_grad():
                out[f"hf|{g is not None}"] = raw(model(input_ids=hf_ids()).logits)
        _hf_runs(hf_groups(dist), rank, out)
        np.savez(Path(out_dir, f"load{rank}.npz"), **out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


#: The row counts of the loading check.
LOAD_MS = (1, 2, 3, 5, 70)


def load_input(m: int, hidden: int) -> np.ndarray:
    """Seeded bf16 rows [m, hidden] of the loading check."""
    from metrale.reference.elements import BF16

    return np.random.default_rng(m).standard_normal((m, hidden), dtype=np.float32).astype(BF16)


def _cuda_world(rank: int, size: int, port: int, transport: str) -> int:
    """Join a CUDA world of ``size`` ranks over ``transport`` ("nccl": rank r on GPU r; "gloo":
    every rank on GPU 0) with NVLink multicast off; returns the rank's device."""
    import cupy
    import torch
    import torch.distributed as dist

    dev = rank if transport == "nccl" else 0
    torch.cuda.set_device(dev)
    cupy.cuda.Device(dev).use()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group(
        transport, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size, timeout=TIMEOUT
    )
    return dev


def run_cuda(rank: int, size: int, port: int, out_dir: str, transport: str) -> None:
    """A CUDA rank of ``size``: ``transport`` "nccl" (rank r on GPU r) or "gloo" (every rank on
    GPU 0, device arrays staged through the host). Every case with the down projection split by
    output rows; writes ``cuda{r}.npz`` (``case`` → uint16 bits) and ``cuda{r}.json`` (launch
    logs)."""
    import torch.distributed as dist

    from metrale.cuda import cuda_backend
    from metrale.reference.tiers import weight_quantization
    from tests.layer_cases import run_guarded

    _cuda_world(rank, size, port, transport)
    try:
        backend = cuda_backend()
        parts_by_kind = layer_parts()
        layers: dict[str, Any] = {}
        bits: dict[str, np.ndarray] = {}
        launches: dict[str, list[str]] = {}
        for i, (kind, mode, entry, m) in enumerate(cases()):
            os.environ["METRALE_WEIGHT_QUANT"] = mode
            weight_quantization.cache_clear()
            p = parts_by_kind[kind]
            if kind not in layers:
                layers[kind] = p.tp_layer(rank, size, backend=backend)
            layer = layers[kind]
            layer.backend.launches.clear()
            bits[str(i)] = run_guarded(layer, entry, case_input(i, m))
            launches[str(i)] = list(layer.backend.launches)
        np.savez(Path(out_dir, f"cuda{rank}.npz"), **bits)
        Path(out_dir, f"cuda{rank}.json").write_text(json.dumps(launches))
        dist.barrier()
    finally:
        dist.destroy_process_group()


#: Row counts of the CUDA module check: every m of 1 … 64 and the prefill [2, 40, hidden].
CUDA_MOD_MS = (*range(1, 65), 80)


def run_cuda_module(rank: int, size: int, port: int, out_dir: str, transport: str) -> None:
    """A CUDA rank of ``size`` running ``TpMetraleFfn`` (split ``"n"``): every format at every m
    of CUDA_MOD_MS (``y|fmt|m``), the same under ``torch.compile(fullgraph=True)``
    (``compiled|fmt``), a tiny Llama's logits with TP MLPs (``hf``) and, on the same GPU in
    the same process, with single-GPU metrale MLPs (``hf1``), a CUDA-graph replay on a
    new input (``graph``, NCCL only) and the errors of split ``"k"`` on CUDA and, with gloo, of
    a capture (``cudamod{r}.json``). Writes ``cudamod{r}.npz``."""
    import torch
    import torch.distributed as dist

    from metrale.checkpoint.example import tiny_model
    from metrale.hf import replace_mlps
    from metrale.reference.context import FfnConfig
    from metrale.torch import MetraleFfn

    dev = _cuda_world(rank, size, port, transport)
    out: dict[str, np.ndarray] = {}
    errors: dict[str, str] = {}
    cuda = torch.device("cuda", dev)
    try:
        for fmt in MOD_FORMATS:
            whole = MetraleFfn.from_weights(FfnConfig(MOD_HIDDEN, MOD_INTER), module_weights(fmt), "silu")
            tp = whole.tensor_parallel(split="n").to(cuda)
            for m in CUDA_MOD_MS:
                out[f"y|{fmt}|{m}"] = raw(tp(module_input(fmt, m).to(cuda)).cpu())
            compiled = torch.compile(tp, fullgraph=True, backend="aot_eager")
            out[f"compiled|{fmt}"] = raw(compiled(module_input(fmt, 33).to(cuda)).cpu())
        try:
            whole.tensor_parallel(split="k").to(cuda)(module_input("bf16", 1).to(cuda))
        except Exception as e:  # the message is what the test checks
            errors["k_on_cuda"] = f"{type(e).__name__}: {e}"
        for key, g in (("hf1", None), ("hf", dist.group.WORLD)):  # single-GPU MLPs, then TP MLPs
            model = tiny_model("llama", seed=0, **hf_config()).to(cuda)
            replace_mlps(model, "nvfp4", tp_group=g)
            with torch.no_grad():
                out[key] = raw(model(input_ids=hf_ids().to(cuda)).logits.cpu())
        tp = MetraleFfn.from_weights(FfnConfig(MOD_HIDDEN, MOD_INTER), module_weights("nvfp4"), "silu")
        tp = tp.tensor_parallel(split="n").to(cuda)
        static = module_input("nvfp4", 4).to(cuda)
        for _ in range(2):  # warm up: the layer, its buffers, the communicator
            tp(static)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                y = tp(static)
            static.copy_(module_input("w4a4", 4).to(cuda))
            graph.replay()
            torch.cuda.synchronize()
            out["graph"] = raw(y.cpu())
        except Exception as e:  # the capture's own end may raise too: keep the whole chain
            errors["graph"] = f"{type(e).__name__}: {e} (context: {e.__context__!r})"
        np.savez(Path(out_dir, f"cudamod{rank}.npz"), **out)
        Path(out_dir, f"cudamod{rank}.json").write_text(json.dumps(errors))
        dist.barrier()
    finally:
        dist.destroy_process_group()


#: The collective timeout of the disagreement world: a rank left waiting fails within it.
HOSTILE_TIMEOUT = datetime.timedelta(seconds=20)


def _rebuild_on_one_rank(tp: Any, rank: int, out_dir: str) -> None:
    """A forward on both ranks, then rank 1 alone reloads its own state (its layer dropped, to be
    rebuilt), then a forward on both: its bits saved (``rebuild{rank}.npy``)."""
    tp(module_input("nvfp4", 3))
    if rank == 1:
        tp.load_state_dict(tp.state_dict())
    np.save(Path(out_dir) / f"rebuild{rank}.npy", raw(tp(module_input("nvfp4", 3))))


def run_hostile(rank: int, size: int, port: int, out_dir: str) -> None:
    """Two ranks that disagree, case by case (different configs, splits, weights, row counts;
    one rank's failed construction, a bad split on one rank): each rank records the error it
    got (``hostile{rank}.json``); then an agreeing module's output bits (``hostile{rank}.npy``)."""
    import torch
    import torch.distributed as dist

    from metrale.distributed import tp_layer
    from metrale.errors import MetraleError
    from metrale.reference.context import FfnConfig
    from metrale.reference.layer import FfnWeights
    from metrale.torch import TpMetraleFfn

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size, timeout=HOSTILE_TIMEOUT
    )
    cfg = FfnConfig(MOD_HIDDEN, MOD_INTER)
    ws = module_weights("nvfp4")
    good = TpMetraleFfn.from_weights(cfg, ws, "silu")
    half = FfnConfig(MOD_HIDDEN, MOD_INTER // 2)
    cases = {
        "config": lambda: TpMetraleFfn.from_weights(
            cfg if rank == 0 else half, ws if rank == 0 else module_weights("nvfp4", MOD_INTER // 2)
        ),
        "split": lambda: TpMetraleFfn.from_weights(cfg, ws, split="k" if rank == 0 else "n"),
        "weights": lambda: TpMetraleFfn.from_weights(
            cfg, ws if rank == 0 else module_weights("nvfp4", seed=41)
        ),
        "rows": lambda: good(module_input("nvfp4", 2 + rank)),
        "zero rows": lambda: TpMetraleFfn.from_weights(cfg, ws)(module_input("nvfp4", 3)[: 3 * rank]),
        "bad input": lambda: good(
            module_input("nvfp4", 3).to(torch.float32 if rank == 0 else torch.bfloat16)
        ),
        "build": lambda: tp_layer(cfg, rank, size + rank, weights=FfnWeights(*ws)),
        "bad split": lambda: TpMetraleFfn.from_weights(cfg, ws, split="n" if rank == 0 else "x"),
        "rebuild on one rank": lambda: _rebuild_on_one_rank(
            TpMetraleFfn.from_weights(cfg, ws), rank, out_dir
        ),
    }
    got: dict[str, str] = {}
    try:
        for name, f in cases.items():
            try:
                f()
                got[name] = "no error"
            except MetraleError as e:
                got[name] = f"{type(e).__name__}: {e}"
        np.save(Path(out_dir) / f"hostile{rank}.npy", raw(good(module_input("nvfp4", 3))))
        (Path(out_dir) / f"hostile{rank}.json").write_text(json.dumps(got))
    finally:
        dist.destroy_process_group()
