"""Tensor parallel on the CUDA backend (the down projection split by output rows,
arithmetic.md § tp): every rank of TP = 2 and 3 returns the single-GPU layer's bits and launch
log for every layer kind, weight-quantization mode, entry point and m of tests/test_distributed.py.

Two or three ranks share GPU 0 over gloo (device arrays staged through the host; NCCL refuses
two ranks on one GPU), so one GPU checks the sharded kernels; with two GPUs, TP = 2 also runs
over NCCL, one rank per GPU.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np
import pytest

cp = pytest.importorskip("cupy")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gpu_count() -> int:
    try:
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:  # no driver / no device: the conftest skips every test here
        return 0


def _single_gpu() -> tuple[list[np.ndarray], list[list[str]]]:
    from metrale.cuda import cuda_backend
    from tests import tp_worker
    from tests.layer_cases import run_guarded, weight_quant_env

    parts = tp_worker.layer_parts()
    layers = {kind: p.layer(cuda_backend()) for kind, p in parts.items()}
    want, logs = [], []
    for i, (kind, mode, entry, m) in enumerate(tp_worker.cases()):
        layer = layers[kind]
        layer.backend.launches.clear()
        with weight_quant_env(mode):
            want.append(run_guarded(layer, entry, tp_worker.case_input(i, m)))
        logs.append(list(layer.backend.launches))
    return want, logs


def _spawn(worker: str, size: int, transport: str, tmp_path: Any) -> None:
    """``size`` spawned ranks running ``tests.tp_worker.<worker>`` (rendezvous on a free port)."""
    import torch.multiprocessing as mp

    from tests import tp_worker

    mp.start_processes(
        getattr(tp_worker, worker),
        args=(size, _free_port(), str(tmp_path), transport),
        nprocs=size,
        join=True,
        start_method="spawn",
    )


@pytest.mark.parametrize(
    ("size", "transport"),
    [
        (2, "gloo"),
        (3, "gloo"),
        pytest.param(
            2,
            "nccl",
            marks=pytest.mark.skipif(_gpu_count() < 2, reason="needs 2 GPUs"),
        ),
    ],
)
def test_tp_cuda_bits_equal_single_gpu(size: int, transport: str, tmp_path) -> None:
    from tests import tp_worker

    _spawn("run_cuda", size, transport, tmp_path)
    want, logs = _single_gpu()
    cases = tp_worker.cases()
    bad = []
    for rank in range(size):
        got = np.load(tmp_path / f"cuda{rank}.npz")
        launches = json.loads((tmp_path / f"cuda{rank}.json").read_text())
        for i, (kind, mode, entry, m) in enumerate(cases):
            where = f"TP={size} {transport} rank {rank} {kind} {mode} {entry} m={m}"
            g = got[str(i)]
            if g.shape != want[i].shape or not np.array_equal(g, want[i]):
                bad.append(f"{where}: bits differ")
            if launches[str(i)] != logs[i]:
                bad.append(f"{where}: launches {launches[str(i)]} != {logs[i]}")
    assert len(cases) > 300
    assert bad == [], f"{len(bad)} mismatches, first: {bad[:5]}"


def _single_gpu_module() -> dict[str, np.ndarray]:
    """The single-GPU MetraleFfn bits of every module case and the graph case's eager output
    (the tiny Llama's single-GPU logits come from each rank, beside its TP logits, so the
    model's other ops run on the same GPU in the same process)."""
    from metrale.reference.context import FfnConfig
    from metrale.torch import MetraleFfn
    from tests import tp_worker as w

    want = {}
    for fmt in w.MOD_FORMATS:
        ffn = MetraleFfn.from_weights(
            FfnConfig(w.MOD_HIDDEN, w.MOD_INTER), w.module_weights(fmt), "silu"
        ).cuda()
        for m in w.CUDA_MOD_MS:
            want[f"y|{fmt}|{m}"] = w.raw(ffn(w.module_input(fmt, m).cuda()).cpu())
        want[f"compiled|{fmt}"] = want[f"y|{fmt}|33"]
        if fmt == "nvfp4":
            want["graph"] = w.raw(ffn(w.module_input("w4a4", 4).cuda()).cpu())
    return want


@pytest.mark.parametrize(
    ("size", "transport"),
    [
        (2, "gloo"),
        (3, "gloo"),
        (1, "nccl"),  # one GPU: the NCCL device path and a captured collective
        pytest.param(2, "nccl", marks=pytest.mark.skipif(_gpu_count() < 2, reason="needs 2 GPUs")),
    ],
)
def test_tp_module_cuda_bits_equal_single_gpu(size: int, transport: str, tmp_path) -> None:
    """TpMetraleFfn (split "n") on CUDA: every format, m = 1 … 64 and a [2, 40, hidden]
    prefill, compiled (fullgraph, aot_eager), a tiny Llama with TP MLPs (logits) and a
    CUDA-graph replay (NCCL) give the single-GPU MetraleFfn's bits on every rank; split "k"
    on CUDA and (gloo) a capture are refused with named errors. On one GPU: TP = 2, 3 over
    gloo (ranks share the GPU) and TP = 1 over NCCL; on two, TP = 2 over NCCL."""
    _spawn("run_cuda_module", size, transport, tmp_path)
    want = _single_gpu_module()
    bad = []
    for rank in range(size):
        got = np.load(tmp_path / f"cudamod{rank}.npz")
        errors = json.loads((tmp_path / f"cudamod{rank}.json").read_text())
        keys = set(want) - ({"graph"} if transport == "gloo" else set())
        if (
            "hf" not in got.files
            or got["hf"].shape != got["hf1"].shape
            or not np.array_equal(got["hf"], got["hf1"])
        ):
            bad.append(
                f"TP={size} {transport} rank {rank}: tiny Llama logits with TP MLPs differ from single-GPU"
            )
        keys |= {"hf", "hf1"}
        if set(got.files) != keys:
            bad.append(f"rank {rank}: outputs {sorted(set(got.files) ^ keys)} missing or extra ({errors})")
        for key in sorted((keys - {"hf", "hf1"}) & set(got.files)):
            if got[key].shape != want[key].shape or not np.array_equal(got[key], want[key]):
                bad.append(f"TP={size} {transport} rank {rank} {key}: bits differ")
        if "split 'k' runs on the reference backend (CPU) only" not in errors.get("k_on_cuda", ""):
            bad.append(f"rank {rank}: split k on CUDA gave {errors.get('k_on_cuda')!r}")
        if transport == "gloo" and "CUDA-graph capture cannot record" not in errors.get("graph", ""):
            bad.append(f"rank {rank}: a gloo capture gave {errors.get('graph')!r}")
    assert bad == [], f"{len(bad)} mismatches, first: {bad[:5]}"
