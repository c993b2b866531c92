"""Probe: the NVFP4 decode projections on the chain with 8-block parts (nvfp4_a16f8_r{R}: the
tree's fast kernels with lanes chaining 8 consecutive blocks; docs/chain-revision.md, "The part
size") against the routed tree kernels (nvfp4_a16f_r{R}) and the 64-block chain's run kernels
(nvfp4_a16fc_r{R}, tile.CHAIN), Qwen3-8B gate + up (one dual launch) and down at 1 and 2 rows:
µs per projection (a CUDA graph of 6 calls cycling over 3 weight copies, events around it, median
of 5, three rounds alternating), each variant's outputs checked against project_chain at its part
size (the tree's against project).

    PYTHONPATH=. python docs/bench/runs-2026-12-08/ch8_time.py
"""

import json
import os

import cupy as cp
import numpy as np

from metrale.cuda import mma, nvfp4, tile
from metrale.cuda.weights import upload_generic
from metrale.reference import chain
from metrale.reference.elements import BF16
from metrale.reference.projection import project
from tests.gpu import gen

rng = np.random.default_rng(0)
REAL_NAME = nvfp4._fast_name
MMA = mma.ENABLED


def use(v: str) -> None:
    """tree: the routed fast kernels; gemv: the 64-block chain's; ch8: the 8-block chain probe."""
    tile.CHAIN = v == "gemv"
    mma.ENABLED = MMA if v == "tree" else False
    nvfp4._fast_name = (lambda mode, r: f"nvfp4_{mode}f8_r{r}") if v == "ch8" else REAL_NAME


def want(v: str, x: np.ndarray, w) -> np.ndarray:
    with np.errstate(all="ignore"):
        if v == "tree":
            return project(x, w, "A16").view(np.uint16)
        chain.PART_BLOCKS = 8 if v == "ch8" else 64
        try:
            return chain.project_chain(x, w, "A16").view(np.uint16)
        finally:
            chain.PART_BLOCKS = 64


STREAM = cp.cuda.Stream(non_blocking=True)


def timed(call, copies) -> float:
    with STREAM:
        for ws in copies:
            call(ws)
        STREAM.synchronize()
        STREAM.begin_capture()
        for i in range(6):
            call(copies[i % 3])
        graph = STREAM.end_capture()
        graph.launch(STREAM)
        STREAM.synchronize()
        ts = []
        for _ in range(5):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(STREAM)
            graph.launch(STREAM)
            e1.record(STREAM)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1000 / 6)
    return float(np.median(ts))


out: dict = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cells": {}}
print(out["gpu"], flush=True)
for tag, n, k, dual in (("gateup", 12288, 4096, True), ("down", 4096, 12288, False)):
    hosts = [[gen.nvfp4(rng, n, k, a4=False) for _ in range(2 if dual else 1)] for _ in range(3)]
    copies = [[upload_generic(w) for w in h] for h in hosts]
    for m in (1, 2):
        xh = (rng.standard_normal((m, k)) * 0.5).astype(np.float32).astype(BF16)
        x = cp.asarray(xh.view(np.uint16))
        outs = [cp.zeros((m, n), cp.uint16) for _ in range(2)]

        def call(ws, x=x, outs=outs, m=m):
            nvfp4.nvfp4_a16(x, [(w, outs[i]) for i, w in enumerate(ws)], m, 4)

        cell: dict = {}
        for v in ("tree", "gemv", "ch8"):
            use(v)
            call(copies[0])
            cell[f"{v}_exact"] = bool(np.array_equal(outs[0].get(), want(v, xh, hosts[0][0])))
        for _ in range(3):
            for v in ("tree", "gemv", "ch8"):
                use(v)
                cell.setdefault(v, []).append(round(timed(call, copies), 1))
        out["cells"][f"{tag} m={m}"] = cell
        print(tag, m, cell, flush=True)
use("tree")
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "ch8_time.json"), "w"), indent=1)
