"""Probe: the tile on the block-value chain (w4c_gemm_f{NF} / q2c_gemm_f{NF}, tile.CHAIN) against
the present exact tile (the tree) and bf16 cuBLAS (torch), Qwen3-8B FFN projections on one GPU:
µs per projection (a CUDA graph of 6 calls cycling over 3 weight copies, events around it,
median of 5) and block values per second; the chain's outputs of 4 rows checked against
chain.project_chain; a chain variant takes every row count, the tree is the routed path there
(decode and tensor-core kernels below 25 rows). STAGES16=3 builds NF = 16 with three stages;
BUILDS=8:4:1,... sets configs.TILE_CHAIN_BUILDS entries (NF:stages:CTAs per multiprocessor);
SA=w4s (or w4p) runs NVFP4 chunks over 128 rows on w4s_gemm_f16 (w4p_gemm_f16: its producer
warpgroup form; configs.TILE_CHAIN_SHARED_A);
LOCAL=16 (or empty) lists the NF whose counter over parts is in local memory; SG=1 or 4 sets
configs.NVFP4_RUN_SCALE_SLICES, RUN=threads,depth[,ctas] the run kernels' CTA, rings and CTAs
per multiprocessor (the gemv variant); NOSLOW=1 builds
the tiles without their slow epilogue (all rows here are fast:
the same bits); INLINE_SLOW=1 inlines it (tile_slow_run, before tile_slow); SLOW_CALL=1 builds
tile_slow out of line (a call: every wgmma serialised, as the tiles were before it was inlined);
PF=8,16 builds those NF with the next stage's first wgmma issued early (three stages). PART=1 or 2
builds the chain tiles with parts of that many steps (8 or 16 blocks; configs.TILE_CHAIN_PART_LOG,
chain.PART_BLOCKS: docs/chain-revision.md, "The part size"). FMT=fp8:
the FP8 chain tile (w8c_gemm_f{NF}, tile.gemm_fp8) against the routed FP8 overlay (w8a16_gemm: "tree").

    FMT=nvfp4|q2_0|fp8 MS=64,256,1024,4096 VARS=tree,chain16 python docs/bench/runs-2026-12-05/chain_tile.py
"""

import json
import os

import cupy as cp
import numpy as np
import torch

from metrale.cuda import configs, fp8_bf16, mma, nvfp4, q2_0, runtime, tile
from metrale.cuda.weights import upload_generic
from metrale.reference.chain import project_chain
from metrale.reference.elements import BF16
from metrale.reference.formats import Fp8Weight
from tests.gpu import gen

rng = np.random.default_rng(0)
FMT = os.environ.get("FMT", "nvfp4")
MS = [int(s) for s in os.environ.get("MS", "64,128,256,1024,4096").split(",")]
VARIANTS = {  # name -> (CHAIN, CHAIN_FRAGS)
    "tree": (False, None),
    "chain": (True, configs.TILE_CHAIN_FRAGS),
    "chain1": (True, (1,)),
    "chain8": (True, (8,)),
    "chain16": (True, (16,)),
    "gemv": (True, None),  # the fast decode kernels on the chain (nvfp4_a16fc_r*; m <= 4)
}
RUN = os.environ.get("VARS", "tree,chain,chain8,chain16").split(",")
TAG = os.environ.get("TAG", "")
if os.environ.get("STAGES16"):
    configs.TILE_CHAIN_BUILDS[16] = (int(os.environ["STAGES16"]), 1)
if os.environ.get("BUILDS"):  # NF:stages:ctas_per_sm,... overriding configs.TILE_CHAIN_BUILDS
    for spec in os.environ["BUILDS"].split(","):
        nf, st, ctas = (int(v) for v in spec.split(":"))
        configs.TILE_CHAIN_BUILDS[nf] = (st, ctas)
if os.environ.get("SA"):  # chunks over 128 rows on w4s_gemm_f16 / w4p_gemm_f16 (SA=w4s / w4p)
    configs.TILE_CHAIN_SHARED_A = f"{os.environ['SA']}_gemm_f16"
if "SG" in os.environ:  # slices per scale copy of the fast chain decode kernels
    configs.NVFP4_RUN_SCALE_SLICES = int(os.environ["SG"])
if "RUN" in os.environ:  # their threads per CTA and ring depth for every R: RUN=512,3
    threads, depth, *ctas = (int(v) for v in os.environ["RUN"].split(","))
    configs.NVFP4_RUN_THREADS = threads
    configs.NVFP4_RUN_DEPTH = dict.fromkeys(configs.NVFP4_RUN_DEPTH, depth)
    configs.NVFP4_RUN_CTAS_PER_SM = ctas[0] if ctas else 1
if "LOCAL" in os.environ:  # NF list whose chain kernels keep the counter in local memory
    configs.TILE_CHAIN_LOCAL = frozenset(int(f) for f in os.environ["LOCAL"].split(",") if f)
if os.environ.get("PART"):  # steps per chain part (the part-size probe)
    from metrale.reference import chain

    steps = int(os.environ["PART"])
    configs.TILE_CHAIN_PART_LOG = steps.bit_length() - 1
    configs.TILE_CHAIN_LEVELS = 7 - configs.TILE_CHAIN_PART_LOG  # CTA K parts up to 128 steps
    chain.PART_BLOCKS = 8 * steps
    tile.CHAIN_PART_STEPS = steps
    tile.CHAIN_CTA_STEPS = (steps, 128)
if os.environ.get("PF"):  # NF list whose chain kernels prefetch (three stages)
    configs.TILE_CHAIN_PREFETCH = frozenset(int(f) for f in os.environ["PF"].split(","))


def patch_wg_source(old: str, new: str) -> None:
    """Build nvfp4_wgmma.cu with ``old`` replaced by ``new`` (this process only)."""
    src = runtime.source
    runtime.source = lambda f: src(f).replace(old, new) if f == tile.WG_FILE else src(f)


if os.environ.get("INLINE_SLOW") == "1":  # the slow epilogue inlined (as before tile_slow_run)
    patch_wg_source("__noinline__ void tile_slow_run", "__forceinline__ void tile_slow_run")
if os.environ.get("SLOW_CALL") == "1":  # tile_slow out of line: ptxas serialises the wgmma (C7510)
    patch_wg_source("__device__ __forceinline__ void tile_slow(", "__device__ __noinline__ void tile_slow(")
if os.environ.get("NOSLOW") == "1":
    patch_wg_source("if (any_slow)", "if (0)")


def use(v: str) -> None:
    """The variant's kernels; a chain variant takes every row count (tile.MIN_ROWS = 1), the tree
    the routed path (below 25 rows but 9..16 the decode and tensor-core kernels), gemv the fast
    decode kernels on the chain (tensor cores off: m <= 4 only)."""
    tile.CHAIN, frags = VARIANTS[v]
    tile.MIN_ROWS = 1 if tile.CHAIN and v != "gemv" else MIN_ROWS
    mma.ENABLED = v != "gemv"
    if frags:
        tile.CHAIN_FRAGS = frags


MIN_ROWS = tile.MIN_ROWS


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


def timed_torch(wt, xt) -> float:
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for w in wt:
            xt @ w.T
        s.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for i in range(6):
                xt @ wt[i % 3].T
        ts = []
        for _ in range(5):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(s)
            g.replay()
            e1.record(s)
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1000 / 6)
    return float(np.median(ts))


def host_weight(n: int, k: int):
    if FMT == "fp8":
        src = rng.standard_normal((n, k)) * np.exp2(rng.integers(-8, 1, (n, k)))
        return Fp8Weight.quantize(src.astype(np.float32))
    return gen.nvfp4(rng, n, k, a4=False) if FMT == "nvfp4" else gen.q2_0(rng, n, k)


def device_weight(w):
    if FMT == "fp8":  # the routed overlay's weight, and the chain tile's bytes and column scales
        tb = cp.asarray(fp8_bf16.tile_fp8_bytes(w.weight))
        return (fp8_bf16.upload_fp8(w), tb, cp.asarray(np.asarray(w.weight_scale, dtype=np.float32)))
    return upload_generic(w) if FMT == "nvfp4" else q2_0.upload_q2_0(w)


out: dict = {"fmt": FMT, "gpu": torch.cuda.get_device_name(), "cells": {}}
for tag, n, k, dual in (("gateup", 12288, 4096, True), ("down", 4096, 12288, False)):
    hosts, copies = [], []
    for _ in range(3):
        h = [host_weight(n, k) for _ in range(2 if dual else 1)]
        hosts.append(h)
        copies.append([device_weight(w) for w in h])
    wt = [torch.randn(n * (2 if dual else 1), k, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    for m in MS:
        xh = (rng.standard_normal((m, k)) * 0.5).astype(np.float32).astype(BF16)
        x = cp.asarray(xh.view(np.uint16))
        outs = [cp.zeros((m, n), cp.uint16) for _ in range(2)]

        def call(ws, x=x, outs=outs, m=m, n=n, k=k):
            if FMT == "fp8" and tile.CHAIN:
                args = [(w[1], w[2], np.float32(1), outs[i], np.int64(n)) for i, w in enumerate(ws)]
                assert tile.gemm_fp8(x, k, m, k // 16, args[0], args[-1], len(ws), n)
            elif FMT == "fp8":
                for i, w in enumerate(ws):
                    fp8_bf16.w8a16_gemm(x, w[0], outs[i])
            elif FMT == "nvfp4":
                nvfp4.nvfp4_a16(x, [(w, outs[i]) for i, w in enumerate(ws)], m, 4)
            else:
                for i, w in enumerate(ws):
                    q2_0.q2_0_gemm(x, w, outs[i])

        xt = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        cub = timed_torch(wt, xt)
        bv = m * n * k / 16 * (2 if dual else 1)
        cell = {"cublas_us": round(cub, 1)}
        for v in RUN:
            use(v)
            us = timed(call, copies)
            cell[v] = [round(us, 1), round(bv / us / 1e6, 2), round(us / cub, 2)]
            if v != "tree" and m == MS[len(MS) // 2]:
                call(copies[0])
                got = outs[0].get()[:4]
                want = project_chain(xh[:4], hosts[0][0], "A16").view(np.uint16)
                cell[f"{v}_exact_4_rows"] = bool(np.array_equal(got, want))
        out["cells"][f"{tag} m={m}"] = cell
        print(tag, m, cell, flush=True)
use("tree")
path = os.path.join(os.environ.get("OUT", "/tmp"), f"chain_tile_{FMT}{TAG}.json")
json.dump(out, open(path, "w"), indent=1)
