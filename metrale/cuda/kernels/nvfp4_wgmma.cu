// nvfp4_wgmma.cu -- the tiled NVFP4 and Q2_0 x A16 / A4 GEMM of nvfp4_tile.cu on Hopper's
// warpgroup MMA: the same CTA tile, prologue, operands, tree and outputs (tile.cuh), the block
// dots by wgmma.mma_async m64n{8 NF}k16 with the weight operand in registers.
// @arch sm_90a
//
// Kernels (extern "C"; the arguments, grid, prologue and split-K parts of nvfp4_tile.cu's
// w4a16b_gemm_f{NF} / q2a16b_gemm_f{NF}):
//   w4a16w_gemm_f{NF}, w4a4w_gemm_f{NF}, q2a16w_gemm_f{NF}(xh, fac, slow, m, w0, s0, rs0, out0, ldo0,
//                                        w1, s1, rs1, out1, ldo1, N, B, gz, kp8, dlog, partial)
//       (w4a4w: the NVFP4 tile on w4a4b_prep's A4 operand, the tree's level 1 fused: A4 below)
//       grid (G ceil(N / 128), ceil(T / G), gz parts) over T = rows_pad / (8 NF) row tiles in groups
//       of G (tile.cuh tile_at, tile.ROW_GROUP), block 256 = two warpgroups, built for
//       configs.NVFP4_WGMMA_TILE_CTAS[NF] CTAs per multiprocessor (NF = 2: two); warpgroup
//       h takes weight rows 64 h .. 64 h + 63 of the CTA's 128 (warp w of the CTA: rows 16 w ..
//       16 w + 15, as in nvfp4_tile.cu), all 8 NF activation rows. Dynamic shared memory: 1024
//       bytes of alignment, 3 stages of (the 8 NF activation rows in wgmma's 128-byte-swizzled
//       K-major layout, two 1024-byte-aligned halves of 64 K elements | 128 weight rows x WROW |
//       128 x SB scale bytes) rounded up to 1024 bytes, then the counter's levels 1 .. dlog - 1.
//   w4c_gemm_f{NF}, q2c_gemm_f{NF}(the same arguments), NF in configs.TILE_CHAIN_FRAGS
//       the same tile on the block-value chain (docs/chain-revision.md; metrale/reference/chain.py
//       is their reference, tile.CHAIN routes them): NVFP4 x A16 and A4 (w4a16b_prep's or
//       w4a4b_prep's operand), Q2_0 x A16; configs.TILE_CHAIN_BUILDS[NF]: stages, CTAs per
//       multiprocessor. A CTA's K part is whole chain parts (kp8 = 2^dlog steps, dlog >= 3, or all of
//       K): the counter over parts keeps levels 0 .. dlog - 4 in shared memory after the stages.
//   w4s_gemm_f16(the same arguments, then xmap: the TMA map of xh, tma.row_tiles(xh, rows_pad, 2 K,
//                2 K, 256))
//       NVFP4 x A16 / A4 on the chain, 64 weight rows x 256 activation rows per CTA: the weights
//       decoded once into shared memory for both warpgroups (wgmma with A from shared memory;
//       at its definition below); configs.TILE_CHAIN_SHARED_A routes chunks over 128 rows to it.
//       grid (G ceil(N / 64), ceil(T / G), gz parts), T = rows_pad / 256, block 256,
//       tile.SHARED_A_SMEM bytes.
//   w4p_gemm_f16(w4s_gemm_f16's arguments)
//       the same tile warp-specialised: block 384, a producer warpgroup (copies, TMA, decode) and
//       two consumer warpgroups (MMAs, chains); configs.TILE_CHAIN_SHARED_A = "producer" routes
//       to it.
//   w8c_prep(x, ldx, m, rows_pad, B, xh, fac, slow)
//       the FP8 prologue (docs/chain-revision.md, "The FP8 chain tile"; at its definition below):
//       the A16 codes' two limbs as f16 in the weight decode's k order, fac = 2^(E - 14), slow
//       rows outside -119 <= E <= 114.
//   w8c_gemm_f{NF}(the arguments of w4c_gemm_f{NF}; w = tile_fp8_bytes, s = f32 column scales),
//       NF in configs.TILE_FP8_CHAIN_BUILDS: FP8 x A16 on the chain (tile.gemm_fp8), two f16
//       wgmma per block, stages of two activation limbs and 144-byte weight rows.
//
// Exactness: per block, each warpgroup issues one wgmma m64n{8 NF}k16 f32.bf16.bf16 with D
// overwritten (scale-d 0): A = its 64 weight rows' decoded operand (the m16n8k16 A fragment
// nvfp4_tile.cu builds, one per warp: tile_pair_operands), B = the block's 16 K elements of the
// 8 NF activation rows (xh from w4a16b_prep / w4a4b_prep, whose k order is the decode's). D
// holds, per (weight row, activation row), the same exact block dot nvfp4_tile.cu's
// mma.sync accumulator holds (every product exact, every partial sum a representable multiple
// of the block's grid: nvfp4_tile.cu, Exactness), in the same fragment order (tile.cuh), so the
// block values, the tree and the outputs are nvfp4_tile.cu's bits.
//
// A4 (w4a4w_gemm_f{NF}): every block value is exact (nvfp4_tile.cu, Exactness: P_b wscale_b, and
// on a slow row (P_b wscale_b) fac_b, at most 20 significant bits, normal, or NaN), so the
// contract's level-1 node RNE(v_2i + v_2i+1) is one fma: ieee_fma(P, wscale, v_2i) (a slow row:
// ieee_fma(P wscale, fac, v_2i)), the product exact and the sum rounded once, signed zeros as
// the add gives them (an exact zero product keeps its sign). One multiply fewer per block pair.
//
// Pipeline: 3 cp.async stages of 8 blocks (one __syncthreads each, then a proxy fence so wgmma
// reads what cp.async wrote); each block's wgmma is one commit group, and block b + 1's is issued
// before block b's values are formed (two register sets of accumulators; the operands of block
// pair p in slot p & 1). ptxas keeps that overlap only in a kernel without calls (tile.cuh,
// tile_slow; tests/test_cuda_compile.py checks its notes). Measured on an H200 against
// nvfp4_tile.cu (performance-log.md, "2026-12-04 (afternoon)"): 4.7-4.8 against 4.4-4.5 T block
// values/s at 4096 rows.
#include "tile.cuh"
#include "wgmma.cuh"

#define W4W_R8(i)                                                                                    \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),     \
        "+f"(d[i + 6]), "+f"(d[i + 7])
// The accumulator operands %0 .. %(n - 1) of a wgmma's PTX, n = 64, 32, 16 (operands W4W_R8).
#define W4W_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
#define W4W_D32                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                 \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define W4W_D64                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                 \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "        \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "        \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "

// D[64 x 8 NF] f32 = A[64 x 16] (registers a) * B[8 NF x 16]^T (shared memory, descriptor db), NF
// in configs.NVFP4_WGMMA_TILE_FRAGS or configs.TILE_CHAIN_FRAGS.
template <int NF>
__device__ __forceinline__ void w4w_mma(float (&d)[4 * NF], const u32 (&a)[4], u64 db);
template <>
__device__ __forceinline__ void w4w_mma<16>(float (&d)[64], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        W4W_D64
        "{%64, %65, %66, %67}, %68, 0, 1, 1, 0;"
        : W4W_R8(0), W4W_R8(8), W4W_R8(16), W4W_R8(24), W4W_R8(32), W4W_R8(40), W4W_R8(48), W4W_R8(56)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <>
__device__ __forceinline__ void w4w_mma<8>(float (&d)[32], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        W4W_D32
        "{%32, %33, %34, %35}, %36, 0, 1, 1, 0;"
        : W4W_R8(0), W4W_R8(8), W4W_R8(16), W4W_R8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <>
__device__ __forceinline__ void w4w_mma<4>(float (&d)[16], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        W4W_D16
        "{%16, %17, %18, %19}, %20, 0, 1, 1, 0;"
        : W4W_R8(0), W4W_R8(8)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <>
__device__ __forceinline__ void w4w_mma<2>(float (&d)[8], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, 0, 1, 1, 0;"
        : W4W_R8(0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

template <>
__device__ __forceinline__ void w4w_mma<1>(float (&d)[4], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 0, 1, 1, 0;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// The descriptor of block b of a stage from the stage's (dact: its activation halves' start).
template <int NF>
__device__ __forceinline__ u64 w4w_block_desc(u64 dact, int b) {
    return dact + (u64)(((b >> 2) * (8 * NF * 128) + (b & 3) * 32) >> 4);
}

template <int N>
__device__ __forceinline__ void w4w_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

template <int NF, bool SLOW, class F, bool FUSE1>
__device__ __forceinline__ void w4w_body(const unsigned char* __restrict__ xh, const float* __restrict__ fac, int m,
                                         int row0, const WeightSet& set, int n0, int N, int B, int s_begin, int Sl,
                                         int dlog, float* __restrict__ partial, int part_i, int gz, int zs,
                                         unsigned char* smem) {
    constexpr int ACT = 8 * NF * 256;
    constexpr int STAGE = tile_stage_bytes<NF, F, true>();  // smem: 1024-byte aligned (tile_stages)
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = B * 16;
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    float4* ctr = (float4*)(smem + W4B_STAGES * STAGE);  // levels 1 .. dlog - 1
    const u32 rm = (6u - 4u * t) & 31u, rs = (12u - 4u * t) & 31u, sh = 2u * t;
    const int wc0 = 16 * warp + g;
    const float* facl = fac + (size_t)(row0 + 2 * t) * B;

    float L0[NF][4];
    float q[NF][4], r[NF][4], sr[NF][4];

    const TileCopies<NF, F, true> cps(xh, row0, K, set, n0, N, B);
    tile_prologue_x(smem, cps, s_begin, Sl, STAGE);
    for (int ls = 0; ls < Sl; ++ls) {
        cp_async_wait<W4B_STAGES - 2>();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async data to wgmma's reads
        __syncthreads();
        if (ls + W4B_STAGES - 1 < Sl)
            cps.load(smem + ((ls + W4B_STAGES - 1) % W4B_STAGES) * STAGE, s_begin + ls + W4B_STAGES - 1);
        cp_async_commit();
        const int buf = ls % W4B_STAGES;
        const unsigned char* sp = smem + buf * STAGE;
        const u64 dact = wg_desc(sbase + warp_uniform(buf) * STAGE);
        const unsigned char* wp = sp + ACT + wc0 * F::WROW;
        const unsigned char* sc = sp + ACT + W4B_COLS * F::WROW;
        const float* facp = facl + 8 * (s_begin + ls);
        // block b + 1's wgmma in flight while block b's values form; pair p's operands in slot p & 1
        u32 a[2][2][4];
        float ws[2][2][2];
        float d[2][4 * NF];
        float e0[NF][4];
        tile_pair_operands<F>(a[0], ws[0], 0, wp, sc, wc0, rm, rs, sh);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        w4w_mma<NF>(d[0], a[0][0], dact);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            if (b < 7) {
                const int nb = b + 1, p = nb >> 1;
                if ((nb & 1) == 0) tile_pair_operands<F>(a[p & 1], ws[p & 1], p, wp, sc, wc0, rm, rs, sh);
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
                w4w_mma<NF>(d[nb & 1], a[p & 1][nb & 1], w4w_block_desc<NF>(dact, nb));
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                w4w_wait<1>();
            } else {
                w4w_wait<0>();
            }
            const int p = b >> 1;
            float v[NF][4];
#pragma unroll
            for (int nf = 0; nf < NF; ++nf)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float dw = d[b & 1][4 * nf + j], w = ws[p & 1][b & 1][j >> 1];
                    if (FUSE1 && (b & 1)) {  // v exact: level 1 = v + e0 rounded once
                        v[nf][j] = SLOW ? ieee_fma(ieee_mul(dw, w), __ldg(facp + b + (size_t)(8 * nf + (j & 1)) * B),
                                                   e0[nf][j])
                                        : ieee_fma(dw, w, e0[nf][j]);
                        continue;
                    }
                    float x = ieee_mul(dw, w);
                    if (SLOW) x = ieee_mul(x, __ldg(facp + b + (size_t)(8 * nf + (j & 1)) * B));
                    if (b & 1) v[nf][j] = x;
                    else e0[nf][j] = x;
                }
            if ((b & 1) && FUSE1) tile_pair_up<NF>(p, v, q, r, sr);
            else if (b & 1) tile_pair_tree<NF>(p, e0, v, q, r, sr);
        }
        tile_counter_push<NF>(ls, dlog, sr, L0, ctr, tid);
    }
    cp_async_wait<0>();
    tile_finish<NF>(L0, ctr, tid, Sl, dlog, set, n0, N, row0, m, wc0, t, partial, part_i, gz, zs);
}

// FUSE1: every block value exact (the A4 operand: w4a4b_prep), so block 2i + 1's value and its
// add into block 2i's (the tree's level 1) are one fma (A4 in the header).
template <bool FUSE1>
struct W4wBody {
    static constexpr bool WG = true;
    static constexpr int STAGES = W4B_STAGES;
    template <int NF, bool SLOW, class F, int NFC = NF, class... A>
    static __device__ __forceinline__ void run(A... a) {
        w4w_body<NF, SLOW, F, FUSE1>(a...);
    }
};

// ---- the block-value chain (docs/chain-revision.md; built beside the tree, routed by tile.CHAIN) ----

// The CTA's counter over parts: levels 0 .. dlogp - 1 of this thread's NF float4 part-root sums,
// in shared memory after the stages (LOCAL false: float4 [dlogp][NF][256 threads]) or in the
// thread's local memory (LOCAL true: L1 / L2, touched once per part; the stages keep all of shared
// memory, whatever the CTA's K part). CHAIN_LEVELS bounds dlogp (tile.CHAIN_CTA_STEPS).
// Steps (8 blocks) per chain part: 2^CHAIN_PART_LOG (3: 64-block parts, chain.PART_BLOCKS; the
// part-size probe builds smaller ones, docs/chain-revision.md "The part size").
// @defines CHAIN (CHAIN_LEVELS, CHAIN_PART_LOG from metrale/cuda/configs.py)
// The counter over parts: levels in shared memory after the stages (one float4 per level, NF
// and thread), or (LOCAL) in a local array; built in place (a local one is not initialised: every
// level is written before it is read).
template <int NF, bool LOCAL>
struct ChainCtr;
template <int NF>
struct ChainCtr<NF, false> {
    float4* s;
    int tid;
    __device__ __forceinline__ explicit ChainCtr(unsigned char* after_stages)
        : s((float4*)after_stages), tid(threadIdx.x) {}
    __device__ __forceinline__ float4& at(int L, int nf) { return s[(L * NF + nf) * W4B_THREADS + tid]; }
};
template <int NF>
struct ChainCtr<NF, true> {
    float4 v[CHAIN_LEVELS][NF];
    __device__ __forceinline__ explicit ChainCtr(unsigned char*) {}
    __device__ __forceinline__ float4& at(int L, int nf) { return v[L][nf]; }
};

// The part root sr of local part lp into the counter over parts: added into levels 0 .. lvl - 1,
// parked at the first clear bit lvl of lp; the last part of a full CTA part (lvl = dlogp) keeps
// the root.
template <int NF, class Ctr>
__device__ __forceinline__ void chain_push(int lp, int dlogp, float (&sr)[NF][4], Ctr& ctr) {
    const int lvl = __ffs(~lp) - 1;
    for (int L = 0; L < lvl; ++L) {
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
            const float4 c = ctr.at(L, nf);
            sr[nf][0] = ieee_add(c.x, sr[nf][0]);
            sr[nf][1] = ieee_add(c.y, sr[nf][1]);
            sr[nf][2] = ieee_add(c.z, sr[nf][2]);
            sr[nf][3] = ieee_add(c.w, sr[nf][3]);
        }
    }
    if (lvl < dlogp) {
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) ctr.at(lvl, nf) = make_float4(sr[nf][0], sr[nf][1], sr[nf][2], sr[nf][3]);
    }
}

// The chains' start: every value -0.0 (chain-revision.md: a start that changes no bit).
template <int NF>
__device__ __forceinline__ void chain_start(float (&c)[NF][4]) {
#pragma unroll
    for (int nf = 0; nf < NF; ++nf)
#pragma unroll
        for (int j = 0; j < 4; ++j) c[nf][j] = -0.0f;
}

// Block b's values into the chains: P (the accumulator dv; a slow row's P times its fac, facp at
// the step's first block of this lane's rows, B blocks per row) times the weight row's scale (s0:
// row wc0, s1: wc0 + 8), one fma into c.
template <int NF, bool SLOW>
__device__ __forceinline__ void chain_block(float (&c)[NF][4], const float (&dv)[4 * NF], float s0, float s1,
                                            const float* facp, int b, int B) {
#pragma unroll
    for (int nf = 0; nf < NF; ++nf)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float P = dv[4 * nf + j];
            if (SLOW) P = ieee_mul(P, __ldg(facp + b + (size_t)(8 * nf + (j & 1)) * B));
            c[nf][j] = ieee_fma(P, (j >> 1) ? s1 : s0, c[nf][j]);
        }
}

// The counter's levels for CTA K parts of 2^dlog steps: one per doubling of parts.
__device__ __forceinline__ int chain_dlogp(int dlog) { return dlog > CHAIN_PART_LOG ? dlog - CHAIN_PART_LOG : 0; }
// Chain parts in Sl steps (the last may be short).
__device__ __forceinline__ int chain_parts(int Sl) { return (Sl + (1 << CHAIN_PART_LOG) - 1) >> CHAIN_PART_LOG; }

// After local step ls of Sl: at a part's end (2^CHAIN_PART_LOG steps, or the CTA's last) its root c
// into the counter, and c restarted at -0.0 unless the CTA's part is over.
template <int NF, class Ctr>
__device__ __forceinline__ void chain_step_end(int ls, int Sl, int dlogp, float (&c)[NF][4], Ctr& ctr) {
    constexpr int LAST = (1 << CHAIN_PART_LOG) - 1;
    if ((ls & LAST) == LAST || ls == Sl - 1) {
        chain_push<NF>(ls >> CHAIN_PART_LOG, dlogp, c, ctr);
        if (ls != Sl - 1) chain_start<NF>(c);
    }
}

// The CTA's roots at its end: np parts pushed (fewer than 2^dlogp: the set bits of np, the lowest
// first, as tile_finish folds) into c, which holds the last part's root.
template <int NF, class Ctr>
__device__ __forceinline__ void chain_fold(int np, int dlogp, float (&c)[NF][4], Ctr& ctr) {
    if (np == (1 << dlogp)) return;
    bool have = false;
    for (int L = 0; L < dlogp; ++L) {
        if (((np >> L) & 1) == 0) continue;
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
            const float4 v = ctr.at(L, nf);
            c[nf][0] = have ? ieee_add(v.x, c[nf][0]) : v.x;
            c[nf][1] = have ? ieee_add(v.y, c[nf][1]) : v.y;
            c[nf][2] = have ? ieee_add(v.z, c[nf][2]) : v.z;
            c[nf][3] = have ? ieee_add(v.w, c[nf][3]) : v.w;
        }
        have = true;
    }
}

// The CTA's K part on the chain: steps [s_begin, s_begin + Sl) of 8 blocks, 2^dlog steps at most,
// whole parts of 2^CHAIN_PART_LOG steps (8: 64 blocks, dlog >= 3 unless the CTA holds all of K). Per block, the
// warpgroup's wgmma gives P_b (the scaled A16 / A4 operand: nvfp4_tile.cu, Exactness; a slow row
// P_b = D fac_b, one rounding as ldexpf's), then c = fma(P_b, f_b, c) (f_b = f32(wscale_b), Q2_0
// f32(d)); after a part's last step c is its root, pushed into the counter over parts and
// restarted at -0.0. At the end the roots fold like tile_finish's (the set bits of the CTA's
// part count, the lowest first) and go out (tile_store).
// PF (three stages): the next stage's first wgmma is issued before this stage's last block values
// form (its barrier and copies there, not at the stage's start): the tensor core does not wait
// for a barrier between stages; a stage's copies then lead its use by one stage.
template <int NF, bool SLOW, class F, int ST, bool PF, bool LOCAL>
__device__ __forceinline__ void w4c_body(const unsigned char* __restrict__ xh, const float* __restrict__ fac, int m,
                                         int row0, const WeightSet& set, int n0, int N, int B, int s_begin, int Sl,
                                         int dlog, float* __restrict__ partial, int part_i, int gz, int zs,
                                         unsigned char* smem) {
    constexpr int ACT = 8 * NF * 256;
    constexpr int STAGE = tile_stage_bytes<NF, F, true>();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = B * 16;
    const int dlogp = chain_dlogp(dlog);
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    ChainCtr<NF, LOCAL> ctr(smem + ST * STAGE);
    const u32 rm = (6u - 4u * t) & 31u, rs = (12u - 4u * t) & 31u, sh = 2u * t;
    const int wc0 = 16 * warp + g;
    const float* facl = fac + (size_t)(row0 + 2 * t) * B;
    static_assert(!PF || ST == 3, "the prefetching chain body runs three stages");
    float c[NF][4];
    chain_start<NF>(c);
    u32 a[2][2][4];
    float ws[2][2][2];
    float d[2][4 * NF];
    // block 0 of the stage in buffer buf: its pair's operands into slot 0, its wgmma into d[0]
    auto first_block = [&](int buf) {
        const unsigned char* sp = smem + buf * STAGE;
        tile_pair_operands<F>(a[0], ws[0], 0, sp + ACT + wc0 * F::WROW, sp + ACT + W4B_COLS * F::WROW, wc0, rm, rs,
                              sh);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        w4w_mma<NF>(d[0], a[0][0], wg_desc(sbase + warp_uniform(buf) * STAGE));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    };

    const TileCopies<NF, F, true> cps(xh, row0, K, set, n0, N, B);
    tile_prologue_x<NF, F, true, ST>(smem, cps, s_begin, Sl, STAGE);
    if (PF) {
        cp_async_wait<ST - 2>();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async data to wgmma's reads
        __syncthreads();
        first_block(0);
    }
    for (int ls = 0; ls < Sl; ++ls) {
        const int buf = ls % ST;
        if (!PF) {
            cp_async_wait<ST - 2>();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncthreads();
            if (ls + ST - 1 < Sl)
                cps.load(smem + ((ls + ST - 1) % ST) * STAGE, s_begin + ls + ST - 1);
            cp_async_commit();
            first_block(buf);
        }
        const unsigned char* sp = smem + buf * STAGE;
        const u64 dact = wg_desc(sbase + warp_uniform(buf) * STAGE);
        const unsigned char* wp = sp + ACT + wc0 * F::WROW;
        const unsigned char* sc = sp + ACT + W4B_COLS * F::WROW;
        const float* facp = facl + 8 * (s_begin + ls);
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            if (b < 7) {
                const int nb = b + 1, p = nb >> 1;
                if ((nb & 1) == 0) tile_pair_operands<F>(a[p & 1], ws[p & 1], p, wp, sc, wc0, rm, rs, sh);
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
                w4w_mma<NF>(d[nb & 1], a[p & 1][nb & 1], w4w_block_desc<NF>(dact, nb));
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                w4w_wait<1>();
            } else if (PF && ls + 1 < Sl) {
                // stage ls + 1 is in (its copies, the last group); every thread is past stage
                // ls - 1's wgmmas, so its buffer takes stage ls + 2
                cp_async_wait<0>();
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                __syncthreads();
                if (ls + 2 < Sl)
                    cps.load(smem + ((ls + 2) % ST) * STAGE, s_begin + ls + 2);
                cp_async_commit();
                first_block((ls + 1) % ST);
                w4w_wait<1>();
            } else {
                w4w_wait<0>();
            }
            const int p = b >> 1;
            chain_block<NF, SLOW>(c, d[b & 1], ws[p & 1][b & 1][0], ws[p & 1][b & 1][1], facp, b, B);
        }
        chain_step_end<NF>(ls, Sl, dlogp, c, ctr);
    }
    cp_async_wait<0>();
    chain_fold<NF>(chain_parts(Sl), dlogp, c, ctr);
    tile_store<NF>(c, set, n0, N, row0, m, wc0, t, partial, part_i, gz, zs);
}

template <int ST, bool PF, bool LOCAL>
struct W4cBody {
    static constexpr bool WG = true;
    static constexpr int STAGES = ST;
    template <int NF, bool SLOW, class F, int NFC = NF, class... A>
    static __device__ __forceinline__ void run(A... a) {
        w4c_body<NF, SLOW, F, ST, PF, LOCAL>(a...);
    }
};

// ---- NVFP4 x A16 / A4 on the chain, one decoded weight tile per CTA (w4s_gemm_f16) ----
//
// w4c_gemm_f16 decodes each weight block once per warpgroup and 128 activation rows: about a
// fifth of its instructions. Here a CTA takes 64 weight rows (columns n0 .. n0 + 63) x 256
// activation rows: warpgroup h multiplies rows 128 h .. 128 h + 127 against all 64 weight rows
// with wgmma m64n128k16 taking A (the decoded weights, bf16) from shared memory, so each block is
// decoded once per 256 rows, the 256 threads sharing it (one 16-byte chunk each per block pair).
// Step s's A is decoded during step s - 1 from weight bytes copied two steps ahead; the stage
// barrier publishes it (after a proxy fence, as for cp.async's data). A step's activations come
// by TMA (two boxes of 128 bytes x 256 rows of xh, the 128-byte swizzle: TileCopies' layout),
// issued by one thread, on the buffer's mbarrier: no copy instructions in the other threads. The block dots, block
// values, chains, counter and outputs are w4c_body's (same D per (weight row, activation row):
// the same operands in the same k order), the counter in local memory.
//
// Shared memory (after 1024 bytes of alignment): activations [2 buffers][2 halves][256 rows][128
// bytes] (wgmma's K-major 128-byte swizzle, as TMA's 128-byte swizzle stores a box) | decoded A [2 slots][2
// halves][64 rows][128 bytes] (the same layout) | weight bytes [3 buffers][64 rows x 80 bytes of
// codes, 64 x 8 scale bytes] | f32 scales [2 slots][8 blocks][64] (columns wc0 and wc0 + 8 of a
// lane adjacent: sa_scale_pos).
constexpr int SA_COLS = 64, SA_ROWS = 256;
constexpr int SA_ACT = SA_ROWS * 256, SA_A = SA_COLS * 256, SA_RAW = SA_COLS * (80 + 8), SA_SCF = 8 * SA_COLS * 4;
constexpr int SA_OFF_A = 2 * SA_ACT, SA_OFF_RAW = SA_OFF_A + 2 * SA_A, SA_OFF_SCF = SA_OFF_RAW + 3 * SA_RAW;
static_assert(1024 + SA_OFF_SCF + 2 * SA_SCF == 185856, "tile.SHARED_A_SMEM: the launch's dynamic shared memory");

// D[64 x 8 NF] f32 = A[64 x 16] (shared memory, descriptor da) * B[8 NF x 16]^T (descriptor db),
// NF = 16 (the fast body) or 8 (the slow body's passes).
template <int NF>
__device__ __forceinline__ void w4s_mma(float (&d)[4 * NF], u64 da, u64 db);
template <>
__device__ __forceinline__ void w4s_mma<16>(float (&d)[64], u64 da, u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        W4W_D64
        "%64, %65, 0, 1, 1, 0, 0;"
        : W4W_R8(0), W4W_R8(8), W4W_R8(16), W4W_R8(24), W4W_R8(32), W4W_R8(40), W4W_R8(48), W4W_R8(56)
        : "l"(da), "l"(db));
}
template <>
__device__ __forceinline__ void w4s_mma<8>(float (&d)[32], u64 da, u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        W4W_D32
        "%32, %33, 0, 1, 1, 0, 0;"
        : W4W_R8(0), W4W_R8(8), W4W_R8(16), W4W_R8(24)
        : "l"(da), "l"(db));
}

// Where column col's f32 scale of a block lies among the 64: columns 16 w + g and 16 w + g + 8
// (a lane's two weight rows) at 16 w + 2 g and 16 w + 2 g + 1, one 8-byte load.
__device__ __forceinline__ int sa_scale_pos(int col) {
    return (col & ~15) + ((col & 7) << 1) + ((col >> 3) & 1);
}

// A CTA's weight copies, one 16-byte code chunk of the 256 per step for chunk index q (w4s_gemm_f16's
// thread q; w4p_gemm_f16's producer thread t takes q = t and t + 128): weight row q / 4, bytes
// 16 (q % 4) of its 64; q < 64 also copies row q's 8 scale bytes. Rows past N copy nothing (their
// bytes stay zero-filled).
struct SaCopies {
    const unsigned char* w;   // the chunk at step 0
    const unsigned char* ws;  // the scale bytes at step 0 (q < 64 and the row < N)
    const unsigned char* w0;
    int q, wok, wsz;
    __device__ __forceinline__ SaCopies(const WeightSet& set, int n0, int N, int B, int q_) : q(q_) {
        const int col = q >> 2;
        w0 = set.w;
        wok = n0 + col < N;
        w = wok ? set.w + (size_t)(n0 + col) * B * 8 + (q & 3) * 16 : set.w;
        wsz = q < SA_COLS && n0 + q < N ? 8 : 0;
        ws = wsz != 0 ? set.ws + (size_t)(n0 + q) * B : set.ws;
    }
    __device__ __forceinline__ void load_w(unsigned char* raw, int s) const {
        cp_async16(raw + (q >> 2) * 80 + (q & 3) * 16, wok ? w + (size_t)s * 64 : w0, wok ? 16 : 0);
        if (q < SA_COLS) cp_async8(raw + SA_COLS * 80 + q * 8, wsz != 0 ? ws + (size_t)s * 8 : ws, wsz);
    }
    // The weights of a pass's first two steps (of Sl), uncommitted, into the first two buffers.
    __device__ __forceinline__ void load_first(unsigned char* smem, int s_begin, int Sl) const {
        load_w(smem + SA_OFF_RAW, s_begin);
        if (Sl > 1) load_w(smem + SA_OFF_RAW + SA_RAW, s_begin + 1);
    }
};

// A CTA of the shared-A tile (w4s_gemm_f16, w4p_gemm_f16): its weight set, rows, columns (tile_at;
// ok false: no tile, the CTA exits), K part and shared memory from the launch, and the activation
// buffers' two mbarriers (bars, shared address; init_bars: thread 0 initialises them, visible
// after the next barrier).
struct SaTile {
    WeightSet set;
    bool ok;
    int row0, n0, part_i, zs, s_begin, Sl;
    unsigned char* smem;
    u32 bars;
    __device__ __forceinline__ SaTile(const WeightSet& set_, int m, int N, int B, int gz, int kp8,
                                      unsigned char* raw_smem, u64* bar_words)
        : set(set_) {
        ok = tile_at(m, SA_ROWS, N, SA_COLS, row0, n0);
        part_i = blockIdx.z / gz, zs = blockIdx.z % gz;
        s_begin = part_i * kp8, Sl = min((B >> 3) - s_begin, kp8);
        smem = tile_stages<true>(raw_smem);
        bars = (u32)__cvta_generic_to_shared(bar_words);
    }
    __device__ __forceinline__ void init_bars() const {
        if (threadIdx.x == 0) {
            mbar_init(bars, 1);
            mbar_init(bars + 8, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
    }
};

// Step s's activations (rows row0 .. row0 + 255 of xh, 256 bytes each) into buffer dst by TMA:
// the two 128-byte halves as two boxes, completing on the buffer's mbarrier (thread 0 only).
__device__ __forceinline__ void sa_load_x(const TmaDesc& xmap, u32 dst, u32 bar, int s, int row0) {
    mbar_expect_tx(bar, SA_ACT);
    tma_box(dst, xmap, 256 * s, row0, bar);
    tma_box(dst + SA_ACT / 2, xmap, 256 * s + 128, row0, bar);
}

// Chunk q (0..1023) of a step's A: block nb = q / 128 of weight row q % 64, its elements 8 h ..
// 8 h + 7 (h = q / 64 % 2), from the step's bytes raw into A slot a (shared address): the four
// bf16 pairs of w4b_pair for t = 0..3 (k 2t, 2t + 1 <- nibbles t, t + 4), one 16-byte store at
// the row's swizzled chunk. w4s_gemm_f16's thread t decodes q = t + 256 k in the k-th odd block.
__device__ __forceinline__ void sa_decode(const unsigned char* raw, u32 a, int q) {
    const int col = q & 63, h = (q >> 6) & 1, nb = q >> 7;
    const u32 W = *(const u32*)(raw + col * 80 + 8 * nb + 4 * h);
    const u32 v0 = w4b_pair(W, 6u, 12u), v1 = w4b_pair(W, 2u, 8u), v2 = w4b_pair(W, 30u, 4u),
              v3 = w4b_pair(W, 26u, 0u);
    const u32 addr = a + (nb >> 2) * (SA_COLS * 128) + col * 128 + ((((nb & 3) * 2 + h) ^ (col & 7)) << 4);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v0), "r"(v1), "r"(v2), "r"(v3)
                 : "memory");
}

// Scale pair q (0..255) of a step as f32 into scf: weight row q % 64, blocks 2 j, 2 j + 1 (j =
// q / 64).
__device__ __forceinline__ void sa_scales(const unsigned char* raw, float* scf, int q) {
    const int col = q & 63, j = q >> 6, pos = sa_scale_pos(col);
    float lo, hi;
    e4m3x2_to_f32(*(const unsigned short*)(raw + SA_COLS * 80 + col * 8 + 2 * j), lo, hi);
    scf[(2 * j) * SA_COLS + pos] = lo;
    scf[(2 * j + 1) * SA_COLS + pos] = hi;
}

// One step's 8 blocks on the shared A (descriptors da, db of the step's slot and rows): block b +
// 1's wgmma in flight while block b's values form, P_b (a slow row: P_b fac_b) chained with the
// row's f32 scale (sc: the step's scales at this lane's pair); release() once the last MMA and
// the last scale read are done (before the last block's values), after(b) behind each block.
template <int NF, bool SLOW, class Release, class After>
__device__ __forceinline__ void sa_step(float (&d)[2][4 * NF], float (&c)[NF][4], u64 da, u64 db, const float* sc,
                                        const float* facp, int B, Release release, After after) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    w4s_mma<NF>(d[0], da, db);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#pragma unroll
    for (int b = 0; b < 8; ++b) {
        if (b < 7) {
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            w4s_mma<NF>(d[(b + 1) & 1], w4w_block_desc<8>(da, b + 1), w4w_block_desc<32>(db, b + 1));
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            w4w_wait<1>();
        } else {
            w4w_wait<0>();
        }
        const float2 s01 = *(const float2*)(sc + b * SA_COLS);
        if (b == 7) release();
        chain_block<NF, SLOW>(c, d[b & 1], s01.x, s01.y, facp, b, B);
        after(b);
    }
}

// The CTA's K part (w4c_body's steps, parts and counter) on the shared decoded A: warpgroup h
// takes activation rows 128 h + 64 p .. + 8 NF - 1 (NF = 16, p = 0: all its rows; a slow CTA runs
// NF = 8 in passes p = 0, 1, the fac loads' registers beside the chains). The launch issued the
// weights of the first two steps. bars: the activation buffers' mbarriers, ph0 / ph1 the phases
// they completed before this pass.
template <int NF, bool SLOW>
__device__ __forceinline__ void w4s_body(const float* __restrict__ fac, int m, int row0, const WeightSet& set,
                                         int n0, int N, int B, int s_begin, int Sl, int dlog,
                                         float* __restrict__ partial, int part_i, int gz, int zs, unsigned char* smem,
                                         const SaCopies& cps, const TmaDesc& xmap, u32 bars, int ph0, int ph1,
                                         int p) {
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int dlogp = chain_dlogp(dlog);
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    ChainCtr<NF, true> ctr(nullptr);
    const int wc0 = 16 * warp + g, rowg = row0 + 128 * wg + 64 * p;
    const float* facl = fac + (size_t)(rowg + 2 * t) * B;
    unsigned char* raw = smem + SA_OFF_RAW;
    float* scf = (float*)(smem + SA_OFF_SCF);
    float c[NF][4];
    chain_start<NF>(c);
    float d[2][4 * NF];

    // step 0's activations (its weights and step 1's are in flight since the launch), then its A
    if (tid == 0) sa_load_x(xmap, sbase, bars, s_begin, row0);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 4; ++k) sa_decode(raw, sbase + SA_OFF_A, tid + 256 * k);
    sa_scales(raw, scf, tid);
    for (int ls = 0; ls < Sl; ++ls) {
        const int buf = ls & 1;
        if (ls > 0) cp_async_wait<0>();  // step ls + 1's weights
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // this thread's A stores
        __syncthreads();
        if (tid == 0 && ls + 1 < Sl)
            sa_load_x(xmap, sbase + (buf ^ 1) * SA_ACT, bars + 8 * (buf ^ 1), s_begin + ls + 1, row0);
        if (ls + 2 < Sl) cps.load_w(raw + ((ls + 2) % 3) * SA_RAW, s_begin + ls + 2);
        cp_async_commit();
        mbar_wait(bars + 8 * buf, ((buf ? ph1 : ph0) + (ls >> 1)) & 1);  // step ls's activations
        const u64 da = wg_desc(sbase + SA_OFF_A + warp_uniform(buf) * SA_A);
        const u64 db = wg_desc(sbase + warp_uniform(buf * SA_ACT + (rowg - row0) * 128));
        const float* sc = scf + buf * (8 * SA_COLS) + 16 * warp + 2 * g;
        const unsigned char* nraw = raw + ((ls + 1) % 3) * SA_RAW;
        const u32 na = sbase + SA_OFF_A + (buf ^ 1) * SA_A;
        const float* facp = facl + 8 * (s_begin + ls);
        sa_step<NF, SLOW>(d, c, da, db, sc, facp, B, [] {}, [&](int b) {
            if ((b & 1) && ls + 1 < Sl) {  // step ls + 1's A, a quarter per odd block
                sa_decode(nraw, na, tid + 256 * (b >> 1));
                if (b == 7) sa_scales(nraw, scf + (buf ^ 1) * (8 * SA_COLS), tid);
            }
        });
        chain_step_end<NF>(ls, Sl, dlogp, c, ctr);
    }
    cp_async_wait<0>();
    chain_fold<NF>(chain_parts(Sl), dlogp, c, ctr);
    tile_store<NF>(c, set, n0, N, rowg, m, wc0, t, partial, part_i, gz, zs);
}

// The arguments, prologue (rows padded to 256), parts and mma_finish of w4c_gemm_f{NF}; grid
// (G ceil(N / 64), ceil(T / G), gz parts) over T = rows_pad / 256 row tiles, block 256,
// tile.SHARED_A_SMEM bytes of dynamic shared memory.
// The shared-A kernels' parameters: w4c_gemm_f{NF}'s, then the TMA map of xh.
#define SA_GEMM_PARAMS                                                                                    \
    const unsigned char *__restrict__ xh, const float *__restrict__ fac, const unsigned char *__restrict__ slow, \
        int m, const unsigned char *w0, const unsigned char *s0, float rs0, unsigned short *out0, long long ldo0, \
        const unsigned char *w1, const unsigned char *s1, float rs1, unsigned short *out1, long long ldo1, int N, \
        int B, int gz, int kp8, int dlog, float *__restrict__ partial, const __grid_constant__ TmaDesc xmap
// A shared-A kernel's first lines: its dynamic shared memory, the two mbarriers and its SaTile tl
// from SA_GEMM_PARAMS; a CTA past the grid's tiles returns.
#define SA_TILE(tl)                                                                                        \
    extern __shared__ __align__(16) unsigned char sa_smem[];                                            \
    __shared__ __align__(8) u64 sa_bars[2];                                                              \
    const SaTile tl(weight_set_at(blockIdx.z % gz, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1), m, N, B, gz, \
                    kp8, sa_smem, sa_bars);                                                              \
    if (!tl.ok) return;
extern "C" __global__ void __launch_bounds__(W4B_THREADS, 1) w4s_gemm_f16(SA_GEMM_PARAMS) {
    SA_TILE(tl)
    const SaCopies cps(tl.set, tl.n0, N, B, threadIdx.x);
    cps.load_first(tl.smem, tl.s_begin, tl.Sl);
    tl.init_bars();
    pdl_wait();
    pdl_trigger();
    if (!__syncthreads_or(slow[tl.row0 + threadIdx.x])) {
        w4s_body<16, false>(fac, m, tl.row0, tl.set, tl.n0, N, B, tl.s_begin, tl.Sl, dlog, partial, tl.part_i, gz,
                            tl.zs, tl.smem, cps, xmap, tl.bars, 0, 0, 0);
        return;
    }
    for (int p = 0; p < 2; ++p) {
        if (p > 0) {  // every thread is past pass 0's reads; the first two steps' weights again
            __syncthreads();
            cps.load_first(tl.smem, tl.s_begin, tl.Sl);
        }
        // pass 0 completed (Sl + 1) / 2 phases of buffer 0's mbarrier and Sl / 2 of buffer 1's
        w4s_body<8, true>(fac, m, tl.row0, tl.set, tl.n0, N, B, tl.s_begin, tl.Sl, dlog, partial, tl.part_i, gz,
                          tl.zs, tl.smem, cps, xmap, tl.bars, p * ((tl.Sl + 1) / 2), p * (tl.Sl / 2), p);
    }
}

// ---- the same tile warp-specialised (w4p_gemm_f16): a producer warpgroup, two consumers ----
//
// w4s_gemm_f16's CTA tile, shared memory and arithmetic with 384 threads: warpgroup 0 (56
// registers, setmaxnreg) copies and decodes, warpgroups 1 and 2 (224 registers) multiply and
// chain their 128 activation rows each, so the decode, the copies and their barrier leave the
// consumers' instruction stream. Per step j (slot j & 1) the producer waits until the consumers
// released the slot (named barrier SA_EMPTY + slot, after their last MMA of step j - 2), issues
// the step's activations by TMA (mbarrier of the slot), decodes the step's weights (copied by its
// threads two steps ahead) into the slot's A and scales, fences them for the async proxy and
// arrives on SA_FULL + slot; a consumer syncs on SA_FULL + slot, waits for the activations'
// mbarrier, runs the step's 8 blocks and arrives on SA_EMPTY + slot. The producer runs one step
// ahead of the consumers.
constexpr int SA_FULL = 1, SA_EMPTY = 3, SA_PROD = 5, SA_ALL = 384;

// The producer's pass over the CTA's K part (steps s_begin .. s_begin + Sl - 1) with its copies
// (cps: chunks t and t + 128); the weights of its first two steps are in flight (uncommitted).
__device__ __forceinline__ void sp_produce(const SaCopies (&cps)[2], int s_begin, int Sl, int row0,
                                           unsigned char* smem, const TmaDesc& xmap, u32 bars) {
    const int pt = threadIdx.x;
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    unsigned char* raw = smem + SA_OFF_RAW;
    float* scf = (float*)(smem + SA_OFF_SCF);
    cp_async_commit();
    for (int j = 0; j < Sl; ++j) {
        const int slot = j & 1;
        if (j >= 2) named_sync(SA_EMPTY + slot, SA_ALL);  // the consumers are past step j - 2
        if (pt == 0) sa_load_x(xmap, sbase + slot * SA_ACT, bars + 8 * slot, s_begin + j, row0);
        if (j == 0)  // step j's weight bytes, this thread's copies (step j + 1's may stay in flight)
            cp_async_wait<0>();
        else
            cp_async_wait<1>();
        named_sync(SA_PROD, 128);  // everyone's; and every producer thread past decoding step j - 1
        if (j + 2 < Sl)
            for (const SaCopies& c : cps) c.load_w(raw + ((j + 2) % 3) * SA_RAW, s_begin + j + 2);
        cp_async_commit();
        const unsigned char* r = raw + (j % 3) * SA_RAW;
#pragma unroll
        for (int i = 0; i < 8; ++i) sa_decode(r, sbase + SA_OFF_A + slot * SA_A, pt + 128 * i);
        sa_scales(r, scf + slot * (8 * SA_COLS), pt);
        sa_scales(r, scf + slot * (8 * SA_COLS), pt + 128);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the A stores, for wgmma
        named_arrive(SA_FULL + slot, SA_ALL);
    }
    for (int j = Sl; j < Sl + 2; ++j)  // the consumers' releases of the last two steps
        if (j >= 2) named_sync(SA_EMPTY + (j & 1), SA_ALL);
    cp_async_wait<0>();
}

// A consumer warpgroup's pass (w4s_body's MMAs, chains, counter and outputs): warpgroup h of the
// two takes activation rows 128 h + 64 p .. + 8 NF - 1; ph0 / ph1 the activation mbarriers'
// phases completed before this pass.
template <int NF, bool SLOW>
__device__ __forceinline__ void sp_consume(const float* __restrict__ fac, int m, int row0, const WeightSet& set,
                                           int n0, int N, int B, int s_begin, int Sl, int dlog,
                                           float* __restrict__ partial, int part_i, int gz, int zs,
                                           unsigned char* smem, u32 bars, int ph0, int ph1, int p) {
    const int ct = threadIdx.x - 128, wg = ct >> 7, lane = ct & 31, warp = (ct >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int dlogp = chain_dlogp(dlog);
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    ChainCtr<NF, true> ctr(nullptr);
    const int wc0 = 16 * warp + g, rowg = row0 + 128 * wg + 64 * p;
    const float* facl = fac + (size_t)(rowg + 2 * t) * B;
    const float* scf = (const float*)(smem + SA_OFF_SCF);
    float c[NF][4];
    chain_start<NF>(c);
    float d[2][4 * NF];
    for (int ls = 0; ls < Sl; ++ls) {
        const int buf = ls & 1;
        named_sync(SA_FULL + buf, SA_ALL);
        mbar_wait(bars + 8 * buf, ((buf ? ph1 : ph0) + (ls >> 1)) & 1);
        const u64 da = wg_desc(sbase + SA_OFF_A + warp_uniform(buf) * SA_A);
        const u64 db = wg_desc(sbase + warp_uniform(buf * SA_ACT + (rowg - row0) * 128));
        const float* sc = scf + buf * (8 * SA_COLS) + 16 * warp + 2 * g;
        const float* facp = facl + 8 * (s_begin + ls);
        // the slot's A, scales and activations all read: released before the last block's values
        sa_step<NF, SLOW>(d, c, da, db, sc, facp, B, [&] { named_arrive(SA_EMPTY + buf, SA_ALL); }, [](int) {});
        chain_step_end<NF>(ls, Sl, dlogp, c, ctr);
    }
    chain_fold<NF>(chain_parts(Sl), dlogp, c, ctr);
    tile_store<NF>(c, set, n0, N, rowg, m, wc0, t, partial, part_i, gz, zs);
}

// w4s_gemm_f16's arguments, grid and shared memory; block 384.
extern "C" __global__ void __launch_bounds__(SA_ALL, 1) w4p_gemm_f16(SA_GEMM_PARAMS) {
    SA_TILE(tl)
    const int tid = threadIdx.x;
    const SaCopies cps[2] = {{tl.set, tl.n0, N, B, tid}, {tl.set, tl.n0, N, B, tid + 128}};  // the producer's
    if (tid < 128)
        for (const SaCopies& c : cps) c.load_first(tl.smem, tl.s_begin, tl.Sl);
    tl.init_bars();
    pdl_wait();
    pdl_trigger();
    const bool any_slow = __syncthreads_or(tid < SA_ROWS ? slow[tl.row0 + tid] : 0);
    if (tid < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        for (int p = 0; p < (any_slow ? 2 : 1); ++p) {
            if (p > 0)
                for (const SaCopies& c : cps) c.load_first(tl.smem, tl.s_begin, tl.Sl);
            sp_produce(cps, tl.s_begin, tl.Sl, tl.row0, tl.smem, xmap, tl.bars);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    if (!any_slow) {
        sp_consume<16, false>(fac, m, tl.row0, tl.set, tl.n0, N, B, tl.s_begin, tl.Sl, dlog, partial, tl.part_i, gz,
                              tl.zs, tl.smem, tl.bars, 0, 0, 0);
        return;
    }
    for (int p = 0; p < 2; ++p)  // pass 0 completed (Sl + 1) / 2 and Sl / 2 phases of the mbarriers
        sp_consume<8, true>(fac, m, tl.row0, tl.set, tl.n0, N, B, tl.s_begin, tl.Sl, dlog, partial, tl.part_i, gz,
                            tl.zs, tl.smem, tl.bars, p * ((tl.Sl + 1) / 2), p * (tl.Sl / 2), p);
}

// ---- FP8 x A16 on the chain (docs/chain-revision.md, "The FP8 chain tile") ----

// D[64 x 8 NF] f32 = A[64 x 16] (registers, f16) * B[8 NF x 16]^T (shared memory, f16).
template <int NF>
__device__ __forceinline__ void w8w_mma(float (&d)[4 * NF], const u32 (&a)[4], u64 db);
template <>
__device__ __forceinline__ void w8w_mma<8>(float (&d)[32], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        W4W_D32
        "{%32, %33, %34, %35}, %36, 0, 1, 1, 0;"
        : W4W_R8(0), W4W_R8(8), W4W_R8(16), W4W_R8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

template <>
__device__ __forceinline__ void w8w_mma<4>(float (&d)[16], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        W4W_D16
        "{%16, %17, %18, %19}, %20, 0, 1, 1, 0;"
        : W4W_R8(0), W4W_R8(8)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <>
__device__ __forceinline__ void w8w_mma<2>(float (&d)[8], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, 0, 1, 1, 0;"
        : W4W_R8(0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <>
__device__ __forceinline__ void w8w_mma<1>(float (&d)[4], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 0, 1, 1, 0;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// Two e4m3 (the low and high byte of h) as an f16 pair, exactly.
__device__ __forceinline__ u32 e4m3x2_f16x2(unsigned short h) {
    u32 r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(h));
    return r;
}

// An integer of at most 11 significant bits as the bits of its f16 (exact).
__device__ __forceinline__ unsigned short i2h_bits(int v) {
    unsigned short h;
    asm("cvt.rn.f16.s32 %0, %1;" : "=h"(h) : "r"(v));
    return h;
}

// The FP8 prologue: per row r < rows_pad and block b, the A16 codes c = 2^8 a1 + a0 (a0 in
// 0 .. 255, a1 in -128 .. 127) as f16 into xh [rows_pad][2 K]: step s's 128 elements of limb 0
// (blocks 8 s .. 8 s + 7), then of limb 1; inside a block, k slot p holds element
// 4 ((p & 7) >> 1) + (p & 1) + 2 (p >> 3) (lane t's weight word t: slots 2t, 2t+1, 2t+8, 2t+9).
// fac [B][rows_pad] = 2^(E - 14) (NaN for a non-finite block; 1 past m); slow[r] = 1 where a
// block of the row is non-finite or, nonzero, has E outside -119 .. 114 (below, the epilogue's
// 2^(E - 14) t may round; above, it may pass f32's largest value: w8c_body). One CTA per row,
// block prep_threads(B), launched programmatically.
extern "C" __global__ void __launch_bounds__(1024) w8c_prep(const unsigned short* __restrict__ x, long long ldx,
                                                            int m, int rows_pad, int B,
                                                            unsigned short* __restrict__ xh,
                                                            float* __restrict__ fac,
                                                            unsigned char* __restrict__ slow) {
    const int r = blockIdx.x;
    const bool live = r < m;
    const unsigned short* src = x + (size_t)r * ldx;
    pdl_wait();
    pdl_trigger();
    int bad = 0;
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
        int c[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        int E = 14;
        bool fin = true;
        if (live) {
            unsigned short xs[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) xs[j] = src[(size_t)b * 16 + j];
            a16_block_int(xs, c, E, fin);
            bool nz = false;
#pragma unroll
            for (int j = 0; j < 16; ++j) nz |= c[j] != 0;
            bad |= !fin || (nz && (E < -119 || E > 114));
        }
        u32 w[2][8];
#pragma unroll
        for (int q = 0; q < 8; ++q) {  // slots 2q, 2q + 1
            const int j0 = 4 * ((2 * q & 7) >> 1) + 2 * (q >> 2);
#pragma unroll
            for (int l = 0; l < 2; ++l) {
                const int v0 = l ? c[j0] >> 8 : c[j0] & 255, v1 = l ? c[j0 + 1] >> 8 : c[j0 + 1] & 255;
                w[l][q] = (u32)i2h_bits(v0) | ((u32)i2h_bits(v1) << 16);
            }
        }
        const int s = b >> 3, bb = b & 7;
#pragma unroll
        for (int l = 0; l < 2; ++l) {
            uint4* dst = (uint4*)(xh + (size_t)r * 2 * B * 16 + (size_t)s * 256 + l * 128 + bb * 16);
            dst[0] = make_uint4(w[l][0], w[l][1], w[l][2], w[l][3]);
            dst[1] = make_uint4(w[l][4], w[l][5], w[l][6], w[l][7]);
        }
        fac[(size_t)b * rows_pad + r] = !live ? 1.0f : (fin ? pow2f(E - 14) : __uint_as_float(0x7fc00000u));
    }
    const bool sl = __syncthreads_or(bad) != 0;
    if (threadIdx.x == 0) slow[r] = sl ? 1 : 0;
}

// Step s's factors of the CTA's 8 NF rows (w8c_prep's fac [B][rows_pad], rows row0 ..) into the
// stage at base, block-major after its weight rows (block b's 8 NF factors at 32 NF b): 16 NF
// copies of 16 bytes, in the caller's commit group.
template <int NF, class F>
__device__ __forceinline__ void w8c_load_fac(unsigned char* base, const float* __restrict__ fac, int row0,
                                             int rows_pad, int s) {
    constexpr int OFF = 8 * NF * 256 * F::LIMBS + W4B_COLS * F::WROW + W4B_COLS * F::SB;
    static_assert(16 * NF <= W4B_THREADS, "one copy per thread");
    const int q = threadIdx.x;
    if (q < 16 * NF) {
        const int b = q / (2 * NF), c = q % (2 * NF);
        cp_async16(base + OFF + b * 32 * NF + c * 16, fac + (size_t)(8 * s + b) * rows_pad + row0 + 4 * c, 16);
    }
}

// The CTA's K part on the chain, FP8: per block, the warpgroup's two wgmma (limbs 0 and 1 of the
// activation operand against the block's rounded e4m3 weights as f16) give the exact limb dots
// D_0, D_1 (chain-revision.md); t = fma(D_1, 2^8, D_0), c = fma(t, fac, c): the contract's
// c + v, v = f32((2^8 D_1 + D_0) fac), for a row in the window -119 <= E <= 114 (fac t is v:
// tests/test_fp8_chain_epilogue.py); SLOW: v in float64, one rounding, c = c + v. Parts,
// counter and output as w4c_body's (the output scale the weight row's). Weight rows in shared
// memory: the step's 8 blocks of 16 e4m3 bytes in K order (tile_fp8_bytes); lane (g, t) takes
// word t of each block of rows wc0, wc0 + 8 by four ldmatrix.x4 (matrix i: 8 rows' block i, at
// the WROW stride's distinct bank groups).
template <int NF, bool SLOW, class F, int ST, bool LOCAL, int NFC>
__device__ __forceinline__ void w8c_body(const unsigned char* __restrict__ xh, const float* __restrict__ fac, int m,
                                         int row0, const WeightSet& set, int n0, int N, int B, int s_begin, int Sl,
                                         int dlog, float* __restrict__ partial, int part_i, int gz, int zs,
                                         unsigned char* smem) {
    constexpr int ACT = 2 * 8 * NF * 256;
    constexpr int STAGE = tile_stage_bytes<NF, F, true>();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = B * 16;
    const int dlogp = chain_dlogp(dlog);
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    ChainCtr<NF, LOCAL> ctr(smem + ST * STAGE);
    const int wc0 = 16 * warp + g;
    const int rows_pad = (m + 8 * NFC - 1) / (8 * NFC) * (8 * NFC);  // NFC > NF: tile_slow
    float c[NF][4];
    chain_start<NF>(c);
    float d[2][2][4 * NF];  // [block & 1][limb]
    const TileCopies<NF, F, true> cps(xh, row0, K, set, n0, N, B);
#pragma unroll
    for (int i = 0; i < ST - 1; ++i) {  // tile_prologue_x's groups, with the stages' factors
        if (i < Sl) {
            cps.load_x(smem + i * STAGE, s_begin + i);
            w8c_load_fac<NF, F>(smem + i * STAGE, fac, row0, rows_pad, s_begin + i);
        }
        cp_async_commit();
    }
    for (int ls = 0; ls < Sl; ++ls) {
        const int buf = ls % ST;
        cp_async_wait<ST - 2>();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (ls + ST - 1 < Sl) {
            unsigned char* next = smem + ((ls + ST - 1) % ST) * STAGE;
            cps.load(next, s_begin + ls + ST - 1);
            w8c_load_fac<NF, F>(next, fac, row0, rows_pad, s_begin + ls + ST - 1);
        }
        cp_async_commit();
        u32 w0[8], w1[8];  // word t of blocks 0 .. 7 of rows wc0, wc0 + 8
        const u32 wa = sbase + buf * STAGE + ACT + (16 * warp + (lane & 7)) * F::WROW + 16 * (lane >> 3);
        w4b_ldsm4(wa, w0[0], w0[1], w0[2], w0[3]);
        w4b_ldsm4(wa + 64, w0[4], w0[5], w0[6], w0[7]);
        w4b_ldsm4(wa + 8 * F::WROW, w1[0], w1[1], w1[2], w1[3]);
        w4b_ldsm4(wa + 8 * F::WROW + 64, w1[4], w1[5], w1[6], w1[7]);
        const u64 dact = wg_desc(sbase + warp_uniform(buf) * STAGE);
        const float* facs =
            (const float*)(smem + buf * STAGE + ACT + W4B_COLS * F::WROW + W4B_COLS * F::SB) + 2 * t;
        auto issue = [&](int b) {
            const u32 a[4] = {e4m3x2_f16x2((unsigned short)(w0[b] & 0xFFFFu)),
                              e4m3x2_f16x2((unsigned short)(w1[b] & 0xFFFFu)),
                              e4m3x2_f16x2((unsigned short)(w0[b] >> 16)),
                              e4m3x2_f16x2((unsigned short)(w1[b] >> 16))};
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            w8w_mma<NF>(d[b & 1][0], a, w4w_block_desc<NF>(dact, b));
            w8w_mma<NF>(d[b & 1][1], a, w4w_block_desc<NF>(dact, 8 + b));
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        };
        issue(0);
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            if (b < 7) {
                issue(b + 1);
                w4w_wait<1>();
            } else {
                w4w_wait<0>();
            }
#pragma unroll
            for (int nf = 0; nf < NF; ++nf) {
                const float2 f2 = *(const float2*)(facs + 8 * NF * b + 8 * nf);  // rows 8 nf + 2 t, + 1
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float f = h ? f2.y : f2.x;
#pragma unroll
                    for (int jj = 0; jj < 2; ++jj) {
                        const int j = 2 * jj + h;
                        const float d0 = d[b & 1][0][4 * nf + j], d1 = d[b & 1][1][4 * nf + j];
                        if (SLOW) {
                            const double v = __dmul_rn(__fma_rn((double)d1, 256.0, (double)d0), (double)f);
                            c[nf][j] = ieee_add(c[nf][j], ieee_d2f(v));
                        } else {
                            c[nf][j] = ieee_fma(ieee_fma(d1, 256.0f, d0), f, c[nf][j]);
                        }
                    }
                }
            }
        }
        chain_step_end<NF>(ls, Sl, dlogp, c, ctr);
    }
    cp_async_wait<0>();
    chain_fold<NF>(chain_parts(Sl), dlogp, c, ctr);
    tile_store<NF, true>(c, set, n0, N, row0, m, wc0, t, partial, part_i, gz, zs);
}

template <int ST, bool LOCAL>
struct W8cBody {
    static constexpr bool WG = true;
    static constexpr int STAGES = ST;
    template <int NF, bool SLOW, class F, int NFC = NF, class... A>
    static __device__ __forceinline__ void run(A... a) {
        w8c_body<NF, SLOW, F, ST, LOCAL, NFC>(a...);
    }
};

#define NVFP4_WGMMA_TILE(NF, MINB) TILE_GEMM_KERNEL(w4a16w_gemm_f##NF, W4wBody<false>, TileNvfp4, NF, MINB)
#define NVFP4_A4_WGMMA_TILE(NF, MINB) TILE_GEMM_KERNEL(w4a4w_gemm_f##NF, W4wBody<true>, TileNvfp4, NF, MINB)
#define Q2_WGMMA_TILE(NF, MINB) TILE_GEMM_KERNEL(q2a16w_gemm_f##NF, W4wBody<false>, TileQ2, NF, MINB)
// @instances NVFP4_WGMMA_TILE   (lines generated from metrale/cuda/configs.py)
// @instances NVFP4_A4_WGMMA_TILE
// @instances Q2_WGMMA_TILE
// ST stages, PF the body's prefetch, LC its counter in local memory, MINB CTAs per multiprocessor;
// W4C_BODY / W8C_BODY paste the body's type (no comma in a macro argument).
#define W4C_BODY(ST, PF, LC) W4cBody<ST, PF, LC>
#define NVFP4_CHAIN_TILE(NF, ST, PF, LC, MINB) \
    TILE_GEMM_KERNEL(w4c_gemm_f##NF, W4C_BODY(ST, PF, LC), TileNvfp4, NF, MINB)
#define Q2_CHAIN_TILE(NF, ST, PF, LC, MINB) TILE_GEMM_KERNEL(q2c_gemm_f##NF, W4C_BODY(ST, PF, LC), TileQ2, NF, MINB)
// @instances NVFP4_CHAIN_TILE
// @instances Q2_CHAIN_TILE
#define W8C_BODY(ST, LC) W8cBody<ST, LC>
#define FP8_CHAIN_TILE(NF, ST, LC, MINB) TILE_GEMM_KERNEL(w8c_gemm_f##NF, W8C_BODY(ST, LC), TileFp8, NF, MINB)
// @instances FP8_CHAIN_TILE
