"""Kernel configurations, stated once.

The launchers read these tables, and ``instances(macro)`` turns them into the ``extern "C"``
instantiation lines of the ``.cu`` files: a line ``// @instances MACRO`` in a kernel file is
replaced by ``MACRO(args)`` lines at build time (``runtime.source``), so the kernels a launcher
asks for are exactly the kernels the file defines. The same way a line ``// @defines GROUP``
becomes ``defines(GROUP)``'s ``#define`` lines: the launch constants the launchers and the
kernels share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: Where each kernel family's routing below was decided: the measurements (on an H200, every
#: variant bit-equal to the routed kernel) that ``metrale bench --variants FAMILY`` repeats; the
#: documents before that harness came from the per-family scripts it replaced (their own schema).
VARIANT_MEASUREMENTS: dict[str, tuple[str, ...]] = {
    "fp8-dec": ("docs/bench/runs-2026-12-01b/fp8_decode.json",),
    "fp8-gemm": (
        "docs/bench/runs-2026-12-01b/fp8_gemm_bench.json",
        "docs/bench/runs-2026-12-01c/0552_fp8_gemm_raster.json",
        "docs/bench/runs-2026-12-01c/0609_fp8_gemm_small_m.json",
    ),
    "q2-dec": ("docs/bench/runs-2026-12-01b/q2dec.json",),
    "nvfp4-gemm": (
        "docs/bench/nvfp4_gemm_variants.json",
        "docs/bench/runs-2026-12-03/variants_nvfp4-gemm.json",
    ),
    "w8a8-gemm": (
        "docs/bench/runs-2026-12-01b/w8a8_tiles3.json",
        "docs/bench/runs-2026-12-01b/w8a8_small2.json",
        "docs/bench/runs-2026-12-01b/w8a8_small3.json",
        "docs/bench/runs-2026-12-01b/w8a8_small4.json",
        "docs/bench/runs-2026-12-02b/w8a8_sk128_m96_128.json",
        "docs/bench/runs-2026-12-02b/w8a8_sk_tiles_m48_64.json",
        "docs/bench/runs-2026-12-02b/w8a8_sk_stages_m64_128.json",
        "docs/bench/runs-2026-12-03b/w8a8_tma_variants.json",
        "docs/bench/runs-2026-12-03b/w8a8_variants_m192_384.json",
    ),
}
#: mma_gemm.cuh's launch shape (its ``// @defines MMA_GEMM`` line becomes these ``#define``s at
#: build time; metrale/cuda/mma.py launches with the same values): warps per CTA of the K-split
#: MMA kernels, blocks per weight run those warps split K by, warps per CTA of the prefill GEMM.
MMA_WARPS = 4
MMA_RUN = 64
GEMM_WARPS = 8
#: nvfp4.cuh's launch shapes (its ``// @defines NVFP4``, ``NVFP4_FAST`` and ``NVFP4_FAST_SLOT`` lines;
#: metrale/cuda/nvfp4.py launches with the same values): warps per CTA of the generic A16 / A4
#: kernels, threads per CTA of the fast decode kernels, bytes of one slot of their rings.
NVFP4_WARPS = 8
NVFP4_FAST_THREADS = 512
NVFP4_FAST_SLOT = 2304
#: The fast chain decode kernels (nvfp4.cuh ``nvfp4_run_body``) copy a run's scales for this many
#: slices of 8 blocks at once (1: 8 bytes with each slice, in its ring slot; 4: 32 bytes, a whole
#: sector, into a per-warp ring of group buffers after the rings).
NVFP4_RUN_SCALE_SLICES = 4
#: Their CTA (one per SM) and ring depth per R. A thread's work comes in whole runs (one column's
#: 64-block part) and a CTA round takes RUN_THREADS // Q whole columns, so 384 threads hold as
#: many runs as the Qwen3-8B down projection has per SM at one row (one round, 32 columns of 12
#: parts); the depths are what fits mma.SMEM_LIMIT at K = 12288 with the records of R rows.
#: Warp items of 32 // Q columns in 256-thread CTAs left 8 of 32 lanes idle at Q = 12 and ran two
#: rounds (docs/performance-log.md "2026-12-06 (morning)"); two or four lanes sharing a run
#: (their terms passed by shuffles) were slower at every row count.
NVFP4_RUN_THREADS = 384
NVFP4_RUN_DEPTH: dict[int, int] = {1: 5, 2: 4, 3: 3, 4: 3}
#: CTAs per multiprocessor they are built (``__launch_bounds__``) and launched for: 1; a probe may
#: ask 2 (smaller CTAs, as many warps per SM: 256 threads at ring depth 3 fit twice at one row of
#: K = 12288), which the one-CTA builds at 256 threads did not have (performance-log.md
#: "2026-12-07 (b)": slower there).
NVFP4_RUN_CTAS_PER_SM = 1
#: They issue their rings' first slices (weights and scales) before the PDL wait, the activation
#: records after it, as the W8A8 GEMMs do (1), or everything after the wait (0). On the chain's
#: FFN: NVFP4 48.8 -> 45.5 us at one row, W4A4 58.1 / 61.7 -> 51.9 / 54.9 at one / two (H100,
#: docs/performance-log.md "2026-12-07 (j)"): 1.
NVFP4_RUN_RING_EARLY = 1
#: The same for the tree's fast decode kernels (``nvfp4_fast_body``, the routed NVFP4 / W4A4 rows
#: 1..3): the (mode, rows per group) whose kernels issue their rings' first DEPTH - 1 items before
#: the wait. Measured on the FFN (H100, performance-log.md "2026-12-07 (j)", twice, every kernel
#: early against none): W4A4 50.3-51.6 / 59.2-60.5 -> 45.1-46.5 / 53.5-54.8 us at one / two rows,
#: W4A16 39.3-39.4 -> 37.1-37.4 at one row but 44.8-45.0 -> 49.4-49.8 at two; three rows not
#: measured.
NVFP4_FAST_RING_EARLY: frozenset[tuple[str, int]] = frozenset({("a16", 1), ("a4", 1), ("a4", 2)})
#: q2_0_dec.cu's most warps per CTA (its ``// @defines Q2_0_DEC``; metrale/cuda/q2_0.py starts
#: from it and halves it while the grid would leave multiprocessors idle).
Q2_0_DEC_WARPS = 8
#: q2_0_dec.cu's chain scratch (``q2c_dec_*`` / ``q2cp_dec_*``), floats per (row, column, part):
#: the part's 64 P_b and 4 more (so that the float4 rows of neighbouring parts start on
#: different banks), and its 16 f_b (its ``// @defines Q2_0_DEC``; q2_0.chain_scratch).
Q2_0_CHAIN_P_FLOATS = 68
Q2_0_CHAIN_F_FLOATS = 16
#: q2_0_dec.cu's decode kernels (tree and chain) load their rings' first D - 1 weight steps before
#: the PDL wait (1; the activations after it, as the W8A8 GEMMs) or after it (0). The FFN at one /
#: two rows 33.6-34.3 / 46.8-47.8 -> 30.7-31.4 / 45.5-45.8 us, on the chain 46.5 / 55.6 -> 42.8 /
#: 52.9 (H100, performance-log.md "2026-12-07 (j)"): 1.
Q2_0_DEC_RING_EARLY = 1
#: fp8_bf16_gemv.cu's decode kernels (tree and chain) load each warp's first weight chunk before
#: the PDL wait (1) or after it (0). FP8's FFN at one / two rows 82.8-83.8 / 100.1-101.4 ->
#: 80.8-81.2 / 98.3-99.0 us, BF16's 120.9-121.5 / 137.9-138.6 -> 117.3-117.4 / 136.0-136.1 (H100,
#: performance-log.md "2026-12-07 (j)"): 1.
FP8_BF16_DEC_W_EARLY = 1
#: fp8_bf16_gemv.cu's integer tensor-core GEMM ``{fp8,bf16}_mma_nt{NT}``: warps per CTA (they
#: split K into 64-block runs; its ``// @defines FP8_BF16_MMA`` line, metrale/cuda/fp8_bf16.py
#: launches with the same value).
FP8_BF16_MMA_WARPS = 4
#: nvfp4_gemv.cu generic kernels ``nvfp4_a16_r{R}_{e,o}``: activation rows per pass.
NVFP4_A16_ROWS: tuple[int, ...] = (1, 2, 3, 4)
#: nvfp4_a4.cu kernels ``nvfp4_a4_r{R}_{e,o}``: activation rows per pass.
NVFP4_A4_ROWS: tuple[int, ...] = (1, 4)
#: nvfp4_gemv.cu fast kernels ``nvfp4_a16f_r{R}``: rows -> cp.async ring depth (work-item slots
#: per warp; depth − 1 items in flight), and whether R uses the P/Q block dot (their chain twins
#: never do: without it they were up to 12 % faster at R = 1, 2 on the H100, equal on the
#: Qwen3-8B down projection at one row; docs/performance-log.md "2026-12-06 (morning)").
NVFP4_FAST_DEPTH: dict[int, int] = {1: 3, 2: 4, 3: 3, 4: 3}
NVFP4_FAST_PQ: dict[int, bool] = {1: True, 2: True, 3: False, 4: False}
#: nvfp4_a4.cu fast kernels ``nvfp4_a4f_r{R}`` (W4A4 decode, one pass of R = m rows): rows ->
#: cp.async ring depth, as NVFP4_FAST_DEPTH.
NVFP4_A4F_DEPTH: dict[int, int] = {1: 3, 2: 4, 3: 3, 4: 3}
#: Rows of the fast kernels' probe on the chain with 8-block parts (``nvfp4_a16f8_r{R}``,
#: ``nvfp4_a4f8_r{R}``: docs/chain-revision.md, "The part size"; not routed), each with its fast
#: kernel's ring depth and block dot.
NVFP4_CH8_ROWS: tuple[int, ...] = (1, 2)
#: The fast kernels' (mode, rows per group): A16 nvfp4_a16f_r{R}, A4 nvfp4_a4f_r{R}.
NVFP4_FAST_KERNELS: frozenset[tuple[str, int]] = frozenset(
    {("a16", r) for r in NVFP4_FAST_DEPTH} | {("a4", r) for r in NVFP4_A4F_DEPTH}
)


def fast_ring_early_mask(early: frozenset[tuple[str, int]]) -> int:
    """nvfp4.cuh's FAST_RING_EARLY (NVFP4_FAST_RING_EARLY): bit 4 MODE + R for each (mode, R) in
    ``early`` (MODE 0 = a16, 1 = a4; R = 1..4: bits 1..4 and 5..8)."""
    bad = early - NVFP4_FAST_KERNELS
    if bad:
        raise ValueError(f"NVFP4_FAST_RING_EARLY: no fast kernel {sorted(bad)}")
    return sum(1 << (4 * ("a16", "a4").index(mode) + r) for mode, r in early)


#: nvfp4_mma.cu kernel families: name prefix -> mode (0: A16 on the s8 MMA, 1: A4 on the s8 MMA,
#: 3: A16 or A4 on the f16 MMA (the "h" prefixes), the same bits; BLOCK_DOT picks the family).
NVFP4_MMA_MODES: tuple[tuple[str, int], ...] = (("w4a16", 0), ("w4a4", 1), ("w4a16h", 3), ("w4a4h", 3))
#: How the tensor-core engine forms block dots (mma.BLOCK_DOT; NVFP4 A16 and A4, Q2_0): "s8" (s8
#: MMAs: two per A16 block, its limbs) or "f16" (one f16 MMA, the codes as f16; the same bits).
#: Measured on an H200 (VARIANT_MEASUREMENTS nvfp4-gemm, Qwen3-8B, docs/performance-log.md): the
#: f16 candidates faster in every cell, gate+up m = 64 / 512 / 2048 188.6 / 1428 / 5524 us against
#: 217.8 / 1660 / 6469 (s8 routed), down 103.3 / 815 / 3263 against 120.9 / 973 / 3714.
BLOCK_DOT = "f16"
#: nvfp4_mma.cu kernels ``{w4a16,w4a4}_mma_nt{NT}_{a,u}`` and q2_0_mma.cu ``q2_mma_nt{NT}_{a,u}``
#: (mma_gemm.cuh): tiles of 8 rows per pass. The prefill GEMM tables below serve both files.
NVFP4_MMA_TILES: tuple[int, ...] = (1, 2, 3, 4)
#: nvfp4_mma.cu prefill GEMM ``w4a16_gemm_nt{NT}_d{D}_b{MINB}_{a,u}``: counter depth D (steps
#: of 8 blocks S8 <= 2^D) -> (8-row tiles per warp, CTAs per multiprocessor the registers are
#: capped for); the counter holds 4 NT (D + 1) floats per lane. The launcher takes the first
#: entry whose D covers S8. Measured on an H200 (VARIANT_MEASUREMENTS nvfp4-gemm, Qwen3-8B FFN,
#: m = 512 / 2048, docs/performance-log.md): gate+up (D = 5) 1.91 / 2.01 T block values/s with
#: (4, 1) against 1.85 / 1.88 with (2, 2); down (D = 7) 1.59 / 1.71 with (2, 2) against
#: 1.36 / 1.61 with (3, 1). NVFP4_GEMM_VARIANTS are built too, for that comparison.
NVFP4_GEMM_TILES: dict[int, tuple[int, int]] = {5: (4, 1), 7: (2, 2), 9: (2, 1)}
#: The GEMM for up to 8 rows: one 8-row tile per warp (D -> (NT, MINB)), K split into aligned
#: parts where the grid is small (metrale/cuda/mma.py).
NVFP4_GEMM_SMALL_TILES: dict[int, tuple[int, int]] = {5: (1, 2), 7: (1, 2), 9: (1, 2)}
NVFP4_GEMM_VARIANTS: tuple[tuple[int, int, int], ...] = ((5, 2, 2), (7, 3, 1))
#: nvfp4_tile.cu tiled bf16 GEMM ``w4a16b_gemm_f{NF}``: CTA tiles of 8 NF activation rows x 128
#: columns (NF 8-row fragments per warp).
NVFP4_TILE_FRAGS: tuple[int, ...] = (2, 4, 8)
#: nvfp4_wgmma.cu, the same tiles on Hopper's warpgroup MMA (``w4a16w_gemm_f{NF}``,
#: ``q2a16w_gemm_f{NF}``): wgmma m64n{8 NF}k16 per block and warpgroup.
NVFP4_WGMMA_TILE_FRAGS: tuple[int, ...] = (2, 4, 8)
#: CTAs per multiprocessor each NF's wgmma kernels are built for (``__launch_bounds__``): NF = 2
#: fits 128 registers without a spill (154 at one CTA), so two run at once (16 warps); NF = 4
#: would spill at 128, NF = 8 holds 255.
NVFP4_WGMMA_TILE_CTAS: dict[int, int] = {2: 2, 4: 1, 8: 1}
#: nvfp4_wgmma.cu's tiles on the block-value chain (docs/chain-revision.md: ``w4c_gemm_f{NF}``,
#: ``q2c_gemm_f{NF}``): each NF's pipeline stages and the CTAs per multiprocessor it is built
#: for. NF = 16's three stages (132 KB) would leave room for one 64 KB level of the counter over
#: parts (two parts per CTA), its two for two levels (four parts: K = 4096 without a K split);
#: NF = 2 holds few registers (two CTAs, as the tree's NF = 2); NF = 1 (8 rows, m64n8k16: the
#: decode-size tile) four CTAs of four 13 KB stages, so that a multiprocessor keeps about 150 KB
#: of weights in flight.
TILE_CHAIN_BUILDS: dict[int, tuple[int, int]] = {1: (4, 3), 2: (3, 2), 4: (3, 1), 8: (3, 1), 16: (2, 1)}
TILE_CHAIN_FRAGS: tuple[int, ...] = tuple(TILE_CHAIN_BUILDS)
#: The NF whose chain kernels issue the next stage's first wgmma before a stage's last block
#: values (three stages only).
TILE_CHAIN_PREFETCH: frozenset[int] = frozenset()
#: The NF whose chain kernels keep the counter over parts in local memory (L1 / L2, touched once
#: per part) instead of shared memory, so that their stages have all of it whatever the CTA's K
#: part; ``TILE_FP8_CHAIN_LOCAL`` the FP8 tiles'.
TILE_CHAIN_LOCAL: frozenset[int] = frozenset()
#: The kernel that takes the NVFP4 chain tiles' chunks of more than 128 rows instead of
#: ``w4c_gemm_f16`` ("" for none): ``w4s_gemm_f16`` (64 weight rows x 256 activation rows per CTA,
#: the weights decoded once into shared memory for both warpgroups) or ``w4p_gemm_f16`` (the same
#: tile with a producer warpgroup): the same bits (nvfp4_wgmma.cu).
TILE_CHAIN_SHARED_A = ""
TILE_FP8_CHAIN_LOCAL: frozenset[int] = frozenset({8})
#: Levels of a local counter over parts: CTA K parts of at most 2^4 chain parts (tile.CHAIN_CTA_STEPS).
TILE_CHAIN_LEVELS = 4
#: Steps (8 blocks) per chain part of the wgmma chain tiles, as a power of two: 3, the revision's
#: 64-block parts (chain.PART_BLOCKS = 8 << TILE_CHAIN_PART_LOG; tests/test_tile_plan.py). A
#: probe of smaller parts (docs/chain-revision.md, "The part size") sets both.
TILE_CHAIN_PART_LOG = 3
#: nvfp4_wgmma.cu's FP8 chain tiles ``w8c_gemm_f{NF}`` (docs/chain-revision.md, "The FP8 chain
#: tile"): NF -> (stages, CTAs per multiprocessor). Two accumulator pairs of 4 NF and the chains
#: hold NF = 8 in registers; a stage is 52 KB at NF = 8, 23 KB at NF = 1 (two activation limbs,
#: 144-byte weight rows, the step's factors).
TILE_FP8_CHAIN_BUILDS: dict[int, tuple[int, int]] = {1: (3, 2), 2: (3, 2), 4: (3, 1), 8: (3, 1)}
#: Its Q2_0 kernels ``q2a16b_gemm_f{NF}``: NF = 8 spills registers there and measured slower
#: than NF = 4 (3.2 against 3.8 T block values/s at 4096 rows on an H200).
Q2_0_TILE_FRAGS: tuple[int, ...] = (2, 4)
#: CTAs per multiprocessor the Q2_0 tile kernels are built for (``__launch_bounds__``: at most 128
#: registers; two CTAs' shared memory fits, parts of 32 steps included). Measured on an H200
#: (docs/performance-log.md, `metrale bench`, Qwen3-8B FFN): m = 64 / 256 / 4096 196.9 / 623.5 /
#: 9,364 us against 245.7 / 700.2 / 10,647 at one CTA per multiprocessor (225 registers). The
#: NVFP4 kernels at two (NF = 4) were slower than NF = 8 at one (gate GEMM m = 256 260 against
#: 198 us; NF = 8 spills 312 bytes at 128 registers).
Q2_0_TILE_CTAS_PER_SM = 2
#: q2_0_gemv.cu kernels ``q2_0_gemv_r{R}``: rows per warp -> columns per warp.
Q2_0_TIERS: dict[int, int] = {1: 4, 2: 4, 4: 4, 8: 2}
#: q2_0_dec.cu decode kernels ``q2_dec_r{R}_c{NC}_d{D}_{s,l}``, one pass for m <= Q2_0_DEC_MAX_ROWS
#: (R = m): variant -> (NC output columns per warp, activation planes staged in shared memory (``s``)
#: or read through L1 (``l``), CTAs per multiprocessor the grid is capped at (0: one CTA per 8 NC
#: columns; the cap is lowered to what fits), D load slots per warp (D - 1 steps in flight)).
#: Q2_0_DEC_ROUTE picks one: the first entry (most rows, most output columns N, variant) that
#: covers m and N. Measured on an H200 (VARIANT_MEASUREMENTS q2-dec, CUDA graphs over weights
#: 4x the L2; docs/performance-log.md): the down projections (N = 4096, K = 12288 / 14336) fastest
#: through L1 (c4l4 at m = 1, 3: 10.9 / 16.8 us Qwen3-8B; c4l2 at m = 2: 14.6), gate/up
#: (N = 12288 / 14336) with the limbs staged (c8s2 at m = 1, 3: 10.0 / 18.8; c4s2 at m = 2: 14.4).
Q2_0_DEC_ROWS: tuple[int, ...] = (1, 2, 3)
Q2_0_DEC_MAX_ROWS = 3
Q2_0_DEC_VARIANTS: dict[str, tuple[int, bool, int, int]] = {
    "c4s2": (4, True, 2, 2),
    "c4s4": (4, True, 2, 4),
    "c8s2": (8, True, 2, 2),
    "c4l2": (4, False, 0, 2),
    "c4l4": (4, False, 0, 4),
    "c8l2": (8, False, 0, 2),
}
Q2_0_DEC_ROUTE: tuple[tuple[int, int, str], ...] = (
    (1, 8192, "c4l4"),
    (1, 1 << 31, "c8s2"),
    (2, 8192, "c4l2"),
    (2, 1 << 31, "c4s2"),
    (3, 8192, "c4l4"),
    (3, 1 << 31, "c8s2"),
)
#: fp8_bf16_gemv.cu kernels ``{fp8,bf16}_gemv_r{R}``: rows per warp -> columns per warp.
FP8_BF16_TIERS: dict[int, int] = {1: 4, 2: 4, 4: 2, 8: 2}
#: The generic Q2_0 / FP8 / BF16 kernels on the block-value chain (``q2_0_chain_r{R}``,
#: ``{fp8,bf16}_chain_r{R}``; common.cuh ``ChainRuns``): rows per pass (R), and threads per CTA,
#: one per (column, chain part) of a round.
CHAIN_GENERIC_ROWS: tuple[int, ...] = (1, 2, 4)
CHAIN_GENERIC_THREADS = 256
#: fp8_bf16_gemv.cu decode kernels ``{fp8,bf16}_dec_r{R}_c{NC}_w{W}_p{P}_{h,i}`` (one pass over
#: R <= 3 rows; layout and arithmetic in the file's header).


@dataclass(frozen=True)
class Fp8Bf16Dec:
    """One decode kernel configuration: output columns per CTA (``nc``), warps per CTA
    splitting K by 512-element chunks (``warps``), whether the next chunk's weights are loaded
    before the current one is summed (``prefetch``), activation codes as double high words
    (``act`` 'h', 4 bytes per element) or int16 ('i', 2 bytes, converted per use)."""

    nc: int
    warps: int
    prefetch: bool
    act: str

    def name(self, prefix: str, rows: int) -> str:
        return f"{prefix}_dec_r{rows}_c{self.nc}_w{self.warps}_p{int(self.prefetch)}_{self.act}"


#: The decode kernel the launcher runs for m rows (m <= 3; more rows take the GEMV tiers
#: above or, from FP8_BF16_MMA_MIN_M, the tensor cores). Measured on an H200
#: (tools/fp8_decode_variants.py, Qwen3-8B FFN, CUDA graphs; docs/performance-log.md): m = 1 without
#: prefetch (FP8 70.6 us, BF16 93.3 against 74.4-102 / 110-175 for the other shapes), m = 2, 3
#: with 4 columns per CTA (FP8 94.7 / 126.5, BF16 123.5 / 141.4; 8 columns 1-4% slower).
FP8_BF16_DEC: dict[int, Fp8Bf16Dec] = {
    1: Fp8Bf16Dec(8, 4, False, "h"),
    2: Fp8Bf16Dec(4, 4, True, "h"),
    3: Fp8Bf16Dec(4, 4, True, "h"),
}
#: Further decode configurations built for ``metrale bench --variants fp8-dec`` (rows,
#: configuration).
FP8_BF16_DEC_VARIANTS: tuple[tuple[int, Fp8Bf16Dec], ...] = (
    (1, Fp8Bf16Dec(8, 4, True, "h")),
    (1, Fp8Bf16Dec(4, 4, True, "h")),
    (1, Fp8Bf16Dec(16, 4, True, "h")),
    (1, Fp8Bf16Dec(8, 8, True, "h")),
    (1, Fp8Bf16Dec(8, 4, True, "i")),
    (2, Fp8Bf16Dec(8, 4, True, "h")),
    (2, Fp8Bf16Dec(8, 4, True, "i")),
    (3, Fp8Bf16Dec(8, 4, True, "h")),
    (3, Fp8Bf16Dec(8, 4, False, "h")),
    (3, Fp8Bf16Dec(8, 4, True, "i")),
)
#: Which CUDA-core kernels serve m < FP8_BF16_MMA_MIN_M rows: "dec" (the decode kernels for
#: m <= 3, the GEMV tiers beyond) or "gemv" (the GEMV tiers only).
FP8_BF16_DECODE = "dec"
#: w8a16_gemm / dense_gemm run on the tensor cores from this many rows.
FP8_BF16_MMA_MIN_M = 4
#: Under the block-value chain (tile.CHAIN) BF16 runs its tensor-core kernels' chain form from
#: this many rows where the decode kernels' chain form (FP8_BF16_CHAIN_DEC) does not take them:
#: the generic chain kernel was no faster at one row and slower from two (H100, Qwen3-8B FFN on
#: the chain: 235.7 / 305.4 µs at 1 / 2 rows against 233.0 at 4 on the K-split form, whose 8-row
#: tile costs the same for fewer rows; performance-log.md "2026-12-07 (d)").
FP8_BF16_CHAIN_MMA_MIN_M = 1


#: The decode kernels' chain form (``{fp8,bf16}c_dec_*``, docs/chain-revision.md) that tile.CHAIN
#: runs for m rows (m <= 3): the tree's configurations. BF16 on it 124.1 / 146.9 µs at 1 / 2 rows
#: against the tree's 121.9 / 139.3 (H100, Qwen3-8B FFN; performance-log.md "2026-12-07 (e)").
FP8_BF16_CHAIN_DEC: dict[int, Fp8Bf16Dec] = dict(FP8_BF16_DEC)
#: Floats per (column, row, part) of their block values in shared memory: 64 values and room to
#: a multiple of four, so a chaining thread reads its part as 16 float4 loads, the 8 threads of a
#: quarter-warp (parts 68 floats apart: 4 banks on) on distinct banks.
FP8_BF16_CHAIN_DEC_PART_FLOATS = 68
#: FP8 takes the decode kernels' chain form too (else its chain tile from one row): off, the tile
#: was no slower at one row (93.0 against 96.9 µs; 95.9 with the row-major chain bytes,
#: performance-log.md "2026-12-07 (g)") and its fragment of 8 rows costs the same at two and three
#: (the chain form 106.9 / 131.3 there).
FP8_CHAIN_DEC = False


def fp8_bf16_dec_builds() -> list[tuple[int, Fp8Bf16Dec]]:
    """(rows, configuration) of every decode kernel built: the routing table's, then the variants."""
    return list(dict.fromkeys([*FP8_BF16_DEC.items(), *FP8_BF16_DEC_VARIANTS]))


def fp8_bf16_dec_instances() -> list[tuple[str, int, Fp8Bf16Dec]]:
    """(kernel prefix, rows, configuration) of every decode kernel built: the tree's
    (``fp8``, ``bf16``: fp8_bf16_dec_builds) and the chain form's (``fp8c``, ``bf16c``:
    FP8_BF16_CHAIN_DEC)."""
    tree = [(p, r, d) for p in ("fp8", "bf16") for r, d in fp8_bf16_dec_builds()]
    return tree + [(p, r, d) for p in ("fp8c", "bf16c") for r, d in FP8_BF16_CHAIN_DEC.items()]


#: fp8_bf16_gemv.cu tensor-core kernels ``{fp8,bf16}_mma_nt{NT}``: rows per CTA (8·NT) -> NT.
FP8_BF16_MMA_TILES: dict[int, int] = {8: 1, 16: 2, 32: 4}
#: fp8_bf16_mma.cu prefill GEMM ``fp8_bf16_gemm_nt{NT}_d{D}_b{MINB}_{p,l}`` (mma_gemm.cuh, wide
#: mode): counter depth D -> (8-row tiles per warp, CTAs per multiprocessor), as
#: NVFP4_GEMM_TILES. FP8_BF16_GEMM_SMALL_TILES serve chunks of up to 8 rows; the variants are
#: built for ``metrale bench --variants fp8-gemm``. Measured on an H200 (VARIANT_MEASUREMENTS
#: fp8-gemm, Qwen3-8B FP8 FFN at
#: m = 4096, every variant the same bits): with the weights' raster (FP8_BF16_GEMM_ROWS_FIRST)
#: the kernels without prefetch (``l``) at NT = 1 and 2 CTAs per SM were the fastest entry at
#: depth 5 (54.1 ms with depth 7 unchanged; the prefetching NT = 2 kernel 62.2) and at depth 7
#: (54.2 ms), ``l`` at the former NT = 2 at both depths 51.1 ms.
FP8_BF16_GEMM_TILES: dict[int, tuple[int, int]] = {5: (1, 2), 7: (1, 2), 9: (1, 1)}
FP8_BF16_GEMM_SMALL_TILES: dict[int, tuple[int, int]] = {5: (1, 1), 7: (1, 1), 9: (1, 1)}
FP8_BF16_GEMM_VARIANTS: tuple[tuple[int, int, int], ...] = ((5, 2, 1), (7, 2, 1), (5, 4, 1), (7, 1, 1))
#: The ``_l`` kernels (no prefetch of the next step, 64 registers fewer), (D, NT, MINB): built
#: for every entry above and these.
FP8_BF16_GEMM_LATE_VARIANTS: tuple[tuple[int, int, int], ...] = ((5, 4, 1), (7, 2, 1), (5, 1, 2), (7, 1, 2))
#: Counter depth -> the routed GEMM's name suffix: ``p`` (next step's weights prefetched) or
#: ``l`` (loaded as used), for both tables (depth 9, K > 16384, not measured: ``p``).
FP8_BF16_GEMM_SUFFIX: dict[int, str] = {5: "l", 7: "l", 9: "p"}
#: The prefill GEMM's raster (mma_gemm.cuh gemm_body): row tiles along grid.x, so the CTAs
#: running together share the weight columns (3.25 bytes per element: they do not fit in L2).
#: H200, the same tool: the FFN at m = 4096 62.2 against 74.1 ms (prefetching kernels), 51.1
#: against 53.1 ms (``l`` kernels); m = 512 7.97 against 9.65 ms.
FP8_BF16_GEMM_ROWS_FIRST = True
#: w8a16_gemm / dense_gemm take the prefill GEMM from this many rows (below: the K-split
#: ``{fp8,bf16}_mma_nt*`` kernels of fp8_bf16_gemv.cu, or the CUDA-core GEMV). Measured on an
#: H200 (VARIANT_MEASUREMENTS fp8-gemm, Qwen3-8B FFN): the GEMM 1.26-1.30x faster than the K-split
#: kernels at m = 8, 16, 64, 512, 4096 (FP8 m = 8: 281 against 359 us), so it takes every row
#: count the tensor cores serve (FP8_BF16_MMA_MIN_M).
FP8_BF16_GEMM_MIN_ROWS = 4
#: w8a8.cu dp4a kernels ``w8a8_gemv_r{R}`` (the tiers up to 2 rows): rows -> columns per warp.
#: H200, Qwen3-8B W8A8 FFN (docs/performance-log.md): m = 2 60.2 us on r2 against 65.1 on the MMA
#: tier; m = 3 71.6 on r3 against 65.6, so 3 rows stay on the tensor cores.
W8A8_GEMV_TIERS: dict[int, int] = {1: 4, 2: 4}
#: w8a8.cu tensor-core kernels ``w8a8_mma_r{R}_w{W}``: rows per CTA -> output columns per CTA,
#: the warps per CTA built, and each tier's K unroll.
W8A8_MMA_TIERS: dict[int, int] = {8: 16, 16: 16, 32: 32}
W8A8_MMA_WARPS: tuple[int, ...] = (4, 8)
W8A8_MMA_UNROLL: dict[int, int] = {8: 4, 16: 4, 32: 2}


@dataclass(frozen=True)
class W8a8GemmTile:
    """One w8a8.cu prefill GEMM ``w8a8_gemm_{bm}x{bn}``: CTA tile (activation rows, weight
    columns; 64 K-bytes per stage), warp grid, cp.async stages, CTAs per multiprocessor the
    register cap is set for."""

    bm: int
    bn: int
    wm: int
    wn: int
    stages: int
    minb: int

    @property
    def name(self) -> str:
        return f"w8a8_gemm_{self.bm}x{self.bn}"

    @property
    def threads(self) -> int:
        return 32 * self.wm * self.wn

    @property
    def smem(self) -> int:
        """Dynamic shared memory in bytes (STAGES slots of BM + BN rows of 64 bytes)."""
        return self.stages * (self.bm + self.bn) * 64


#: w8a8.cu prefill GEMM tiles in routing order: the launcher takes the first whose grid fills
#: ``minb`` CTAs on every multiprocessor, else the last. Measured on an H200 (Qwen3-8B FFN,
#: docs/performance-log.md): 128x128 fastest at m >= 512, 64x64 at m = 128; 128x256 (64x64 warp
#: tiles), 64x128 and 128-byte K tiles were slower.
W8A8_GEMM_TILES: tuple[W8a8GemmTile, ...] = (
    W8a8GemmTile(128, 128, 2, 4, 4, 2),
    W8a8GemmTile(64, 64, 2, 2, 4, 4),
)


@dataclass(frozen=True)
class W8a8WgmmaTile:
    """One w8a8_wgmma.cu kernel (sm_90a): per CTA ``bm`` rows of the wgmma's A operand (one
    warpgroup per 64) and ``bn`` rows of B (the wgmma's N), 128 K-bytes per cp.async stage. The
    prefill GEMM ``w8a8_wgmma_{bm}x{bn}`` takes activation rows as A and weight rows as B; the
    split-K kernel ``w8a8_wgmma_sk_n{bn}`` (``split_k``) weight rows as A and the activation
    rows (at most ``bn``) as B."""

    bm: int
    bn: int
    stages: int
    split_k: bool = False
    #: K tiles of 128 bytes per stage (the split-K kernels; a row's ks pieces requested together)
    ks: int = 1

    @property
    def name(self) -> str:
        return f"w8a8_wgmma_sk_n{self.bn}" if self.split_k else f"w8a8_wgmma_{self.bm}x{self.bn}"

    @property
    def silu_name(self) -> str:
        """The tile's gate + up kernel with the SiLU step in its epilogue (a pair tile's)."""
        return f"w8a8_wgmma_silu_{self.bm}x{self.bn}"

    @property
    def silu_st_name(self) -> str:
        """The same with the compact SiLU table in shared memory (w8a8.SILU_TILE_ST)."""
        return f"w8a8_wgmma_silu_st_{self.bm}x{self.bn}"

    @property
    def threads(self) -> int:
        return 2 * self.bm

    @property
    def minb(self) -> int:
        """CTAs per multiprocessor the grid must fill to be chosen (one: 1 CTA fits per SM)."""
        return 1

    @property
    def smem(self) -> int:
        """Dynamic shared memory in bytes (STAGES slots of KS tiles of BM + BN rows of 128 bytes,
        and 1024 for aligning the slots to the 128-byte swizzle's 1024-byte period)."""
        return self.stages * self.ks * (self.bm + self.bn) * 128 + 1024


#: w8a8_wgmma.cu tiles in routing order (w8a8.gemm_tile: the least work per multiprocessor in
#: whole waves, ties to the first), used from ``w8a8.GEMM_MIN_ROWS`` rows where the device is
#: sm_90 (elsewhere the mma.sync tiles above). Measured on an H200 (VARIANT_MEASUREMENTS w8a8-gemm,
#: docs/performance-log.md): 256x128 fastest from m = 512 (gate 12288x4096 at m = 4096: 365 us,
#: 1.13 POPS), 128x128 where 256x128 leaves multiprocessors idle (down 4096x12288 at m = 512:
#: 47 us against 71); 128x256 (one warpgroup per 64 rows x 256 columns) slower everywhere.
W8A8_WGMMA_TILES: tuple[W8a8WgmmaTile, ...] = (
    W8a8WgmmaTile(256, 128, 4),
    W8a8WgmmaTile(128, 128, 6),
    W8a8WgmmaTile(256, 192, 4),
    W8a8WgmmaTile(128, 192, 5),
)
#: The tiles w8a8.gemm_tile picks from: for one matrix, and for gate and up in one launch
#: ("pair", w8a8.TILE_PAIR): 256x192 gives Qwen3-8B's pair 128 CTAs at
#: 129..256 rows (one wave on 132 multiprocessors) where 256x128 gives 192; 128x192 the same
#: one wave at 65..128 rows.
W8A8_WGMMA_ROUTED: dict[str, tuple[str, ...]] = {
    "one": ("w8a8_wgmma_256x128", "w8a8_wgmma_128x128"),
    "pair": ("w8a8_wgmma_256x128", "w8a8_wgmma_256x192", "w8a8_wgmma_128x192"),
}
#: The tiles built with the W8A8 arm's SiLU step in the epilogue (``w8a8_wgmma_silu_{bm}x{bn}``,
#: gate and up side by side: w8a8.w8a8_gemv_dual_silu_quant): the routed pair tiles.
W8A8_SILU_TILES: tuple[str, ...] = W8A8_WGMMA_ROUTED["pair"]
#: Those tiles' epilogue reads the compact SiLU table (weights.compact_table) from shared memory,
#: copied into the stage slots after the mainloop (``w8a8_wgmma_silu_st_*``), instead of gathering
#: from the whole table in global memory: 2-7 % off the FFN at 96..512 rows with the 128x192 pair
#: (H100, docs/performance-log.md "2026-12-07 (j)").
W8A8_SILU_TILE_ST = True


#: w8a8_wgmma.cu split-K kernels for few rows ``w8a8_wgmma_sk_n{nb}`` (sm_90a): activation
#: rows per launch (the wgmma's N, m <= nb) -> the kernel (weight rows per CTA, stages); from
#: W8A8_SK_MIN_ROWS rows up to the largest nb (the W8A8 arm's verify batches), K split for about
#: W8A8_SK_CTAS_PER_SM CTAs per multiprocessor. Measured on an H200 (VARIANT_MEASUREMENTS
#: w8a8-gemm, verify rows, CUDA graphs): with 1, 12288x4096 (no split) streams at 3.3-3.4 TB/s
#: for m = 1..3 and 2.0 TB/s at m = 64, 4096x12288 (3 splits) at 3.3-3.4 and 2.0; 2 (2 and 5
#: splits) is 5% faster on the first, 12% slower on the second; 1.5 (4 splits of the second)
#: slower on both; the dp4a kernel (m = 1) and the mma.sync tiers 2.4-2.9 TB/s and 1.6-1.8 TB/s.
#: 128 weight rows per CTA (two warpgroups) for n32/n64 was slower (m = 32: gate 22.5 against
#: 19.4 us, down 22.4 against 18.7).
#: Past 32 rows the stream-K kernels below are as fast or faster (the n64 and n128 split-K
#: tiers they replaced: m = 64 gate 25.5 against 21.9 us, m = 128 down 37.9 against 30.2).
#: In the FFN 2 is faster (H200, Qwen3-8B, two runs each alternating, performance-log.md
#: "2026-12-07 (h)"): 47.2-47.4 / 47.9 / 49.1-49.2 / 50.2-50.3 / 52.2-52.4 / 59.7-60.2 us against
#: 47.8-48.4 / 48.8-49.2 / 51.4-51.6 / 52.5-52.9 / 52.6-53.4 / 60.7-61.4 at m = 1 / 2 / 4 / 8 /
#: 16 / 32 (gate and up, one launch of 384 column tiles, stay unsplit; down takes 5 splits
#: instead of 3); 3 was slower (51.7 .. 67.3).
W8A8_SK_TIERS: dict[int, W8a8WgmmaTile] = {
    nb: W8a8WgmmaTile(64, nb, st, split_k=True) for nb, st in ((16, 6), (32, 6))
}
#: The split-K tiers with 2 / 4 K tiles per stage (a variant, not yet measured: a process that
#: updates W8A8_SK_TIERS with one set before the kernels build runs it). Each weight row's 256 /
#: 512 contiguous bytes are requested together where the routed tiers ask for 128 at a time, a
#: stage apart; gemlite's A8W8 configurations for an H100 (``configs/h100.json``) take 256- to
#: 1024-byte K blocks at every M up to 64. The stages keep about as many weight bytes in flight
#: per multiprocessor as the routed tiers (n16: 3 CTAs x 4 stages of 8 KB).
W8A8_SK_KS_VARIANTS: dict[str, dict[int, W8a8WgmmaTile]] = {
    "ks2": {
        16: W8a8WgmmaTile(64, 16, 5, split_k=True, ks=2),
        32: W8a8WgmmaTile(64, 32, 4, split_k=True, ks=2),
    },
    "ks4": {
        16: W8a8WgmmaTile(64, 16, 4, split_k=True, ks=4),
        32: W8a8WgmmaTile(64, 32, 4, split_k=True, ks=4),
    },
}
W8A8_SK_MIN_ROWS = 1
#: The most rows the split-K kernels take (<= max(W8A8_SK_TIERS)).
W8A8_SK_MAX_ROWS = 32
W8A8_SK_CTAS_PER_SM = 2
#: w8a8_wgmma.cu stream-K kernels ``w8a8_tma_n{bn}`` (sm_90a): activation rows per tile (the
#: wgmma's N) -> stages of 128 weight rows and bn activation rows (128 K bytes each, loaded by
#: TMA), one persistent CTA per multiprocessor (w8a8.py). Measured on an H200 (Qwen3-8B,
#: single projections, CUDA graphs, docs/performance-log.md "2026-12-03 (night)"): gate /
#: down µs at m = 64 21.9 / 24.7 (split-K n64 25.5 / 24.4), m = 128 27.6 / 30.2 (split-K n128
#: 48.7 / 37.9, the 128x128 tile 25.7 / 44.6); at m = 1..16 slower than split K (19.0-19.5
#: against 15.7-17.1 gate), from m = 256 slower than the tiles (n256: 43.1 against 36.1 gate);
#: cp.async copies instead of TMA, two CTAs per multiprocessor and weights laid out so that a
#: box is contiguous were no faster.
#: Tiles of 256 weight rows (each MMA warpgroup two m64 halves, activations read from L2 once
#: per 256 weight rows) were slower at every m, n16 / n32 against split K included (H200,
#: Qwen3-8B FFN, performance-log.md "2026-12-07 (h)": 63.5 / 61.8 / 64.2 / 70.4 / 82.1 / 106.6 /
#: 112.2 / 120.8 us against 51.8 / 53.2 / 53.1 / 60.8 / 69.2 / 84.8 / 90.7 / 112.2 at m = 4 / 8 /
#: 16 / 32 / 64 / 96 / 128 / 256): the activations' L2 reads are not what bounds these kernels.
W8A8_TMA_TIERS: dict[int, int] = {64: 8, 128: 6}
#: K tiles of 128 bytes per stream-K unit (the TMA boxes of a weight row's KS pieces issued
#: together, each slot KS times as large). 1 is the routed build; the variant
#: W8A8_TMA_KS_VARIANT (KS, stages per tier: the same bytes per slot ring) is not yet measured
#: (docs/bench/runs-2026-12-07h/run_tks.sh). Its build skips a tile's missing K tiles in a
#: uniform branch around the wgmma, where ptxas notes C7519 (a warpgroup.arrive injected).
W8A8_TMA_KS = 1
#: The stream-K owner's fixup: every later piece's flag awaited at once and the pieces loaded two
#: at a time (True), or one piece after another, each behind its own flag (False, routed until
#: the other is GPU-tested and measured: docs/bench/runs-2026-12-08/run_d.sh). The CTAs owning a
#: tile's first piece ended ~25 % of the kernel after the others on the down projection at 64 /
#: 128 rows (H100, tma_balance.py there: ends median 0.71 / 0.66, p90 0.94 / 0.96 of the span),
#: gathering three or four pieces one after another.
W8A8_TMA_GATHER = False
W8A8_TMA_KS_VARIANT: tuple[int, dict[int, int]] = (2, {64: 4, 128: 3})
#: Beyond 128 rows (n128 in row tiles): down at m = 192 / 256 (64 CTAs of the 128x128 tile)
#: 41.9 / 36.1 against 48.8 / 45.1 us tiled.
#: The rows w8a8_gemv routes to them: all of W8A8_TMA_ROWS up to w8a8.GEMM_MIN_ROWS - 1, and from
#: there the rows where the tiled GEMM's grid would fill fewer than W8A8_TMA_GEMM_FILL of the
#: multiprocessors (down of an 8B model: 32 CTAs of 128x128; else the tile).
W8A8_TMA_ROWS: tuple[int, int] = (33, 256)
W8A8_TMA_GEMM_FILL = 0.5
#: Gate and up in one launch (w8a8.w8a8_gemv_dual) take the stream-K kernel at every m up to
#: this, whatever the tiles' grid: Qwen3-8B W8A8 FFN on an H200 (docs/performance-log.md) at
#: m = 96 / 128 85.0 / 92.9 µs against 90.3 / 94.5 on two launches of the tile; past 128 rows
#: the two tile launches are faster (m = 192: TMA for each of gate and up 147.6 against 130.6).
#: The W8A8 arm's pair tile with the SiLU step in its epilogue goes ahead of it where it takes
#: the rows (w8a8.pair_tile(silu=True): Qwen3-8B from 65 rows).
W8A8_TMA_PAIR_MAX_ROWS = 128
#: w8a8_wgmma.cu ``w8a8_tma_silu_n{bn}``: the stream-K pair with the W8A8 arm's SiLU step in its
#: epilogue (each tile 64 columns of gate and the same 64 of up; h, up and the rows' amax parts
#: written there, w8a8.w8a8_gemv_dual_silu_quant): activation rows per tile -> stages, fewer
#: than W8A8_TMA_TIERS' so that u's exchange, the amax reduction and the compact SiLU table fit
#: beside them (w8a8.tma_silu_smem).
W8A8_TMA_SILU_TIERS: dict[int, int] = {64: 7, 128: 5}
#: The most rows w8a8.cu's one-launch SiLU-quantize kernel (``w8a8_silu_quant``, a cluster of
#: 8 CTAs per row) serves; beyond, the slice pair. Measured on an H200 (Qwen3-8B W8A8 FFN,
#: docs/performance-log.md): cluster / pair µs at m = 1, 16, 32 51.7 / 52.3, 57.7 / 59.1,
#: 67.3 / 70.0; m = 64 76.2 / 76.1; m = 128, 256, 1024 96.0 / 94.0, 133.0 / 127.3,
#: 350.3 / 315.8 (8 clusters per row leave threads idle where many rows fill the GPU anyway).
W8A8_SILU_CLUSTER_MAX_ROWS = 32
#: w8a8.cu's one-launch SiLU-quantize kernels: CTAs per row (the cluster) -> (threads per CTA,
#: 8-element groups per thread), K <= 8 · groups · threads · CTAs (else the slice pair):
#: ``w8a8_silu_quant`` (8 CTAs) and ``w8a8_silu_quant_c{CL}``.
W8A8_SILU_QUANT_BUILDS: dict[int, tuple[int, int]] = {
    8: (256, 8),
    4: (256, 16),
    2: (512, 16),
    1: (512, 16),
}
#: Beyond W8A8_SILU_CLUSTER_MAX_ROWS: (most rows, CTAs per row) in order, the kernel
#: ``w8a8_silu_quant_c{CL}`` for the rows up to each; beyond the last: the slice pair. Qwen3-8B
#: W8A8 FFN on an H100 (docs/performance-log.md "2026-12-07 (c)"), one CTA per row against the
#: pair: 84.5 / 105.7 µs against 87.9 / 110.8 at m = 64 / 128, equal within noise at 192..512;
#: four CTAs per row were slower at 64 and 128 rows (91.6 / 115.2), two beyond (150.0 at 256).
W8A8_SILU_ROW_KERNELS: tuple[tuple[int, int], ...] = ((128, 1),)
#: w8a8.cu's ``w8a8_silu_quant_st`` (threads per CTA, 8-element groups per thread, CTAs per
#: multiprocessor): the one-CTA-per-row step with the SiLU table's compact form
#: (weights.compact_table, about 30 KB) in shared memory, persistent CTAs over the rows; K <= 8 ·
#: groups · threads (else the routing above).
W8A8_SILU_QUANT_ST: tuple[int, int, int] = (256, 8, 4)
#: elementwise.cu's ``act_mul_st`` (threads per CTA, 8-element groups per thread and step, CTAs
#: per multiprocessor): act_mul with the table's compact form in shared memory, persistent CTAs
#: (three copies of the 30 KB table per multiprocessor, 1536 threads with 64 bytes in flight each).
ACT_MUL_ST: tuple[int, int, int] = (512, 2, 3)
#: The rows from which act_mul takes ``act_mul_st`` where N and the rows allow (None: never);
#: each CTA then has at least ACT_MUL_ST_MIN_GROUPS groups (one step of the CTA: no more table
#: copies than steps). From 1024 rows: 1-2 % off the NVFP4 and Q2_0 FFNs at 1024 / 4096 rows
#: (H100, docs/performance-log.md "2026-12-07 (j)"); the step alone (Python-timed) was slower at
#: 64..1024 rows.
ACT_MUL_ST_MIN_ROWS: int | None = 1024
ACT_MUL_ST_MIN_GROUPS = 1024
#: The rows from which the SiLU-quantize step takes ``w8a8_silu_quant_st`` (None: never): 2 % off
#: the W8A8 FFN at 1024 / 4096 rows, 4-15 % slower at 64..256 (H100, performance-log.md
#: "2026-12-07 (j)").
W8A8_SILU_ST_MIN_ROWS: int | None = 1024


def nvfp4_gemm_builds() -> list[tuple[int, int, int]]:
    """(D, NT, MINB) of every NVFP4 prefill GEMM built: the routing table's, then the variants."""
    tables = [*NVFP4_GEMM_TILES.items(), *NVFP4_GEMM_SMALL_TILES.items()]
    return list(dict.fromkeys([*((d, *v) for d, v in tables), *NVFP4_GEMM_VARIANTS]))


def fp8_bf16_gemm_builds() -> list[tuple[int, int, int]]:
    """(D, NT, MINB) of every FP8/BF16 prefill GEMM built: the routing tables', then the variants."""
    tables = [*FP8_BF16_GEMM_TILES.items(), *FP8_BF16_GEMM_SMALL_TILES.items()]
    return list(dict.fromkeys([*((d, *v) for d, v in tables), *FP8_BF16_GEMM_VARIANTS]))


def fp8_bf16_gemm_late_builds() -> list[tuple[int, int, int]]:
    """(D, NT, MINB) of every ``_l`` FP8/BF16 prefill GEMM built: each ``_p`` build's, then the
    late variants."""
    return list(dict.fromkeys([*fp8_bf16_gemm_builds(), *FP8_BF16_GEMM_LATE_VARIANTS]))


#: Q2_0's decode kernels' chain form with the chains of each step run after the next step's
#: block dots (``q2cp_dec_*``, two term scratches per warp): built for these row counts, routed
#: for Q2_0_CHAIN_PIPE_ROWS. Qwen3-8B FFN on an H100 against ``q2c_dec_*``: 45.8 against 47.0 µs
#: at one row, 63.7 against 55.4 at two (performance-log.md "2026-12-07 (g)").
Q2_0_CHAIN_PIPE_ROWS_BUILT: tuple[int, ...] = (1,)
Q2_0_CHAIN_PIPE_ROWS: tuple[int, ...] = (1,)


def q2_chain_dec_builds() -> list[tuple[int, int, bool, int]]:
    """(rows, NC, staged, D) of every ``q2c_dec_*`` kernel built (the decode kernels' chain form,
    docs/chain-revision.md): the variants Q2_0_DEC_ROUTE routes, and the L1 form of each staged
    one."""
    out = []
    for rows, _, v in Q2_0_DEC_ROUTE:
        nc, sm, _, dp = Q2_0_DEC_VARIANTS[v]
        out += [(rows, nc, sm, dp), (rows, nc, False, dp)]
    return list(dict.fromkeys(out))


def q2_dec_builds() -> list[tuple[int, bool, int]]:
    """(NC, staged, D) of every q2_0_dec.cu kernel built: each variant's, and the L1 form of each
    staged one (taken where the rows' activations do not fit in shared memory)."""
    out = [(nc, sm, dp) for nc, sm, _, dp in Q2_0_DEC_VARIANTS.values()]
    return list(dict.fromkeys([*out, *((nc, False, dp) for nc, _, dp in out)]))


def _bool(b: bool) -> str:
    return "true" if b else "false"


def _pairs(macro: str, rows: tuple[int, ...], yes: str, no: str) -> list[str]:
    """``MACRO(R, true, yes)`` and ``MACRO(R, false, no)`` for each R: the two variants of a
    kernel (even/odd block count, aligned/unaligned loads) the launcher picks between."""
    return [f"{macro}({r}, {_bool(v)}, {yes if v else no})" for r in rows for v in (True, False)]


_INSTANCES: dict[str, Callable[[], list[str]]] = {
    "NVFP4_A16": lambda: _pairs("NVFP4_A16", NVFP4_A16_ROWS, "e", "o"),
    "NVFP4_A16F": lambda: [
        f"NVFP4_A16F({r}, {(NVFP4_RUN_DEPTH if c else NVFP4_FAST_DEPTH)[r]}, "
        f"{_bool(NVFP4_FAST_PQ[r] and not c)}, {_bool(c)}, {'fc' if c else 'f'})"
        for c in (False, True)
        for r in NVFP4_FAST_DEPTH
    ],
    "NVFP4_A16F8": lambda: [
        f"NVFP4_A16F8({r}, {NVFP4_FAST_DEPTH[r]}, {_bool(NVFP4_FAST_PQ[r])})" for r in NVFP4_CH8_ROWS
    ],
    "NVFP4_A4F8": lambda: [f"NVFP4_A4F8({r}, {NVFP4_A4F_DEPTH[r]})" for r in NVFP4_CH8_ROWS],
    "NVFP4_A16C": lambda: [f"NVFP4_A16C({r})" for r in NVFP4_A16_ROWS],
    "NVFP4_A4": lambda: _pairs("NVFP4_A4", NVFP4_A4_ROWS, "e", "o"),
    "NVFP4_A4C": lambda: [f"NVFP4_A4C({r})" for r in NVFP4_A4_ROWS],
    "NVFP4_A4F": lambda: [
        f"NVFP4_A4F({r}, {(NVFP4_RUN_DEPTH if c else NVFP4_A4F_DEPTH)[r]}, {_bool(c)}, {'fc' if c else 'f'})"
        for c in (False, True)
        for r in NVFP4_A4F_DEPTH
    ],
    "NVFP4_MMA": lambda: [
        f"NVFP4_MMA({prefix}, {mode}, {nt}, {_bool(al)}, {'a' if al else 'u'})"
        for prefix, mode in NVFP4_MMA_MODES
        for nt in NVFP4_MMA_TILES
        for al in (True, False)
    ],
    "NVFP4_GEMM": lambda: [
        f"NVFP4_GEMM({prefix}, {mode}, {nt}, {d}, {b}, {_bool(al)}, {'a' if al else 'u'})"
        for prefix, mode in NVFP4_MMA_MODES
        for d, nt, b in nvfp4_gemm_builds()
        for al in (True, False)
    ],
    "NVFP4_TILE": lambda: [f"NVFP4_TILE({nf})" for nf in NVFP4_TILE_FRAGS],
    "Q2_TILE": lambda: [f"Q2_TILE({nf}, {Q2_0_TILE_CTAS_PER_SM})" for nf in Q2_0_TILE_FRAGS],
    "NVFP4_WGMMA_TILE": lambda: [
        f"NVFP4_WGMMA_TILE({nf}, {NVFP4_WGMMA_TILE_CTAS[nf]})" for nf in NVFP4_WGMMA_TILE_FRAGS
    ],
    "NVFP4_A4_WGMMA_TILE": lambda: [
        f"NVFP4_A4_WGMMA_TILE({nf}, {NVFP4_WGMMA_TILE_CTAS[nf]})" for nf in NVFP4_WGMMA_TILE_FRAGS
    ],
    "Q2_WGMMA_TILE": lambda: [
        f"Q2_WGMMA_TILE({nf}, {NVFP4_WGMMA_TILE_CTAS[nf]})" for nf in NVFP4_WGMMA_TILE_FRAGS
    ],
    "NVFP4_CHAIN_TILE": lambda: [
        f"NVFP4_CHAIN_TILE({nf}, {st}, {_bool(nf in TILE_CHAIN_PREFETCH)}, "
        f"{_bool(nf in TILE_CHAIN_LOCAL)}, {ctas})"
        for nf, (st, ctas) in TILE_CHAIN_BUILDS.items()
    ],
    "FP8_CHAIN_TILE": lambda: [
        f"FP8_CHAIN_TILE({nf}, {st}, {_bool(nf in TILE_FP8_CHAIN_LOCAL)}, {ctas})"
        for nf, (st, ctas) in TILE_FP8_CHAIN_BUILDS.items()
    ],
    "Q2_CHAIN_TILE": lambda: [
        f"Q2_CHAIN_TILE({nf}, {st}, {_bool(nf in TILE_CHAIN_PREFETCH)}, "
        f"{_bool(nf in TILE_CHAIN_LOCAL)}, {ctas})"
        for nf, (st, ctas) in TILE_CHAIN_BUILDS.items()
    ],
    "Q2_MMA": lambda: [
        f"Q2_MMA({nt}, {_bool(al)}, {'a' if al else 'u'})" for nt in NVFP4_MMA_TILES for al in (True, False)
    ],
    "Q2_GEMM": lambda: [
        f"Q2_GEMM({nt}, {d}, {b}, {_bool(al)}, {'a' if al else 'u'})"
        for d, nt, b in dict.fromkeys(
            (d, *v) for d, v in [*NVFP4_GEMM_TILES.items(), *NVFP4_GEMM_SMALL_TILES.items()]
        )
        for al in (True, False)
    ],
    "Q2_GEMV": lambda: [f"Q2_GEMV({r}, {nc})" for r, nc in Q2_0_TIERS.items()],
    "Q2_CHAIN": lambda: [f"Q2_CHAIN({r})" for r in CHAIN_GENERIC_ROWS],
    "WIDE_CHAIN": lambda: [f"WIDE_CHAIN({r})" for r in CHAIN_GENERIC_ROWS],
    "Q2_DEC": lambda: (
        [
            f"Q2_DEC({r}, {nc}, {dp}, {_bool(sm)}, {'s' if sm else 'l'}, 0, q2)"
            for r in Q2_0_DEC_ROWS
            for nc, sm, dp in q2_dec_builds()
        ]
        + [
            f"Q2_DEC({r}, {nc}, {dp}, {_bool(sm)}, {'s' if sm else 'l'}, {ch}, {prefix})"
            for ch, prefix in ((1, "q2c"), (2, "q2cp"))
            for r, nc, sm, dp in q2_chain_dec_builds()
            if ch == 1 or r in Q2_0_CHAIN_PIPE_ROWS_BUILT
        ]
    ),
    "FP8_BF16_GEMV": lambda: [
        f"FP8_BF16_GEMV({p}_gemv, {_bool(p == 'bf16')}, {r}, {nc})"
        for p in ("fp8", "bf16")
        for r, nc in FP8_BF16_TIERS.items()
    ],
    "FP8_BF16_DEC": lambda: [
        f"FP8_BF16_DEC({p}, {_bool(p.startswith('bf16'))}, {r}, {d.nc}, {d.warps}, {int(d.prefetch)}, "
        f"{'hi'.index(d.act)}, {d.act}, {_bool(p.endswith('c'))})"
        for p, r, d in fp8_bf16_dec_instances()
    ],
    "FP8_BF16_MMA": lambda: [
        f"FP8_BF16_MMA({p}_mma, {_bool(p == 'fp8')}, {nt}, {_bool(p == 'bf16c')})"
        for p in ("fp8", "bf16", "bf16c")
        for nt in FP8_BF16_MMA_TILES.values()
    ],
    "FP8_BF16_GEMM": lambda: [f"FP8_BF16_GEMM({nt}, {d}, {b})" for d, nt, b in fp8_bf16_gemm_builds()],
    "FP8_BF16_GEMM_LATE": lambda: [
        f"FP8_BF16_GEMM_LATE({nt}, {d}, {b})" for d, nt, b in fp8_bf16_gemm_late_builds()
    ],
    "BF16_CHAIN_GEMM": lambda: [
        f"BF16_CHAIN_GEMM({nt}, {d}, {b}, {FP8_BF16_GEMM_SUFFIX[d]})"
        for d, (nt, b) in dict.fromkeys([*FP8_BF16_GEMM_TILES.items(), *FP8_BF16_GEMM_SMALL_TILES.items()])
    ],
    "W8A8_GEMV": lambda: [f"W8A8_GEMV({r}, {nc})" for r, nc in W8A8_GEMV_TIERS.items()],
    "W8A8_SILU_QUANT": lambda: [
        f"W8A8_SILU_QUANT({cl}, {t}, {v}, {'w8a8_silu_quant' if cl == 8 else f'w8a8_silu_quant_c{cl}'})"
        for cl, (t, v) in W8A8_SILU_QUANT_BUILDS.items()
    ],
    "ACT_MUL_ST": lambda: [f"ACT_MUL_ST({', '.join(map(str, ACT_MUL_ST))})"],
    "W8A8_SILU_QUANT_ST": lambda: [f"W8A8_SILU_QUANT_ST({', '.join(map(str, W8A8_SILU_QUANT_ST))})"],
    "W8A8_GEMM": lambda: [
        f"W8A8_GEMM({t.bm}, {t.bn}, {t.wm}, {t.wn}, {t.stages}, {t.minb})" for t in W8A8_GEMM_TILES
    ],
    "W8A8_WGMMA": lambda: [f"W8A8_WGMMA({t.bm}, {t.bn}, {t.stages})" for t in W8A8_WGMMA_TILES],
    "W8A8_WGMMA_SILU": lambda: [
        f"W8A8_WGMMA_SILU({t.bm}, {t.bn}, {t.stages})" for t in W8A8_WGMMA_TILES if t.name in W8A8_SILU_TILES
    ],
    "W8A8_TMA": lambda: [
        f"W8A8_TMA({bn}, {st}, {W8A8_TMA_KS}, {_bool(W8A8_TMA_GATHER)})" for bn, st in W8A8_TMA_TIERS.items()
    ],
    "W8A8_TMA_SILU": lambda: [
        f"W8A8_TMA_SILU({bn}, {st}, 1, {_bool(W8A8_TMA_GATHER)})" for bn, st in W8A8_TMA_SILU_TIERS.items()
    ],
    "W8A8_WGMMA_SK": lambda: [
        f"W8A8_WGMMA_SK({t.bm}, {t.bn}, {t.stages}, {t.ks})" for t in W8A8_SK_TIERS.values()
    ],
    "W8A8_MMA": lambda: [
        f"W8A8_MMA({r}, {r // 8}, {cols // 16}, {w}, {W8A8_MMA_UNROLL[r]})"
        for r, cols in W8A8_MMA_TIERS.items()
        for w in W8A8_MMA_WARPS
    ],
}


_DEFINES: dict[str, Callable[[], dict[str, int]]] = {  # read at build time: a probe may set the values
    "MMA_GEMM": lambda: {"MMA_WARPS": MMA_WARPS, "MMA_RUN": MMA_RUN, "GEMM_WARPS": GEMM_WARPS},
    "FP8_BF16_MMA": lambda: {"FP8_BF16_MMA_WARPS": FP8_BF16_MMA_WARPS},
    "FP8_BF16_DEC": lambda: {
        "DEC_PART_FLOATS": FP8_BF16_CHAIN_DEC_PART_FLOATS,
        "DEC_W_EARLY": FP8_BF16_DEC_W_EARLY,
    },
    "NVFP4": lambda: {"NVFP4_WARPS": NVFP4_WARPS},
    "CHAIN_GENERIC": lambda: {"CHAIN_GENERIC_THREADS": CHAIN_GENERIC_THREADS},
    "NVFP4_FAST": lambda: {
        "FAST_THREADS": NVFP4_FAST_THREADS,
        "RUN_THREADS": NVFP4_RUN_THREADS,
        "RUN_CTAS": NVFP4_RUN_CTAS_PER_SM,
        "RUN_SCALE_SLICES": NVFP4_RUN_SCALE_SLICES,
        "FAST_RING_EARLY": fast_ring_early_mask(NVFP4_FAST_RING_EARLY),
        "RUN_RING_EARLY": NVFP4_RUN_RING_EARLY,
    },
    "NVFP4_FAST_SLOT": lambda: {"FAST_SLOT": NVFP4_FAST_SLOT},
    "Q2_0_DEC": lambda: {
        "Q2D_WARPS": Q2_0_DEC_WARPS,
        "Q2D_P_FLOATS": Q2_0_CHAIN_P_FLOATS,
        "Q2D_F_FLOATS": Q2_0_CHAIN_F_FLOATS,
        "Q2D_RING_EARLY": Q2_0_DEC_RING_EARLY,
    },
    "CHAIN": lambda: {"CHAIN_LEVELS": TILE_CHAIN_LEVELS, "CHAIN_PART_LOG": TILE_CHAIN_PART_LOG},
}


def defines(group: str) -> list[str]:
    """The ``#define NAME VALUE`` lines of one kernel file's constant group, from the values above."""
    values = _DEFINES.get(group)
    if values is None:
        raise KeyError(f"no constants for kernel define group {group!r} (metrale/cuda/configs.py)")
    return [f"#define {name} {value}" for name, value in values().items()]


def instances(macro: str) -> list[str]:
    """The instantiation lines ``MACRO(args)`` of one kernel macro, from the tables above."""
    gen = _INSTANCES.get(macro)
    if gen is None:
        raise KeyError(f"no configuration table for kernel macro {macro!r} (metrale/cuda/configs.py)")
    return gen()
