// metrale/cuda/kernels/w8a8_wgmma.cu -- the W8A8 GEMMs on Hopper's warpgroup tensor cores.
// @arch sm_90a
//
// Contract: arithmetic.md § projection (W8A8: S = sum_k q_w q_a over all of K in int32, exact since
// |S| < 2^31 and every partial sum is an integer; y = bf16((f32(S) * s_a) * s_w[n]), no blocks, no
// tree), § w8a8-arm. The same bits as w8a8.cu's kernels: an int32 sum is exact in any order and
// any split.
//
// Kernels (every pointer to bf16 is uint16 bits; strides in elements; rows of q and w 16-byte
// aligned, K a multiple of 16):
//   w8a8_wgmma_{BM}x{BN}(w, sw, N, K, q, ldq, sa, m, out, ldo, w2, sw2, out2, ldo2, t1)
//                                                                                (prefill rows)
//       grid (ceil(m / BM), T), block 2 BM (one warpgroup per 64 activation rows); column tiles
//       blockIdx.y < t1 of the first matrix, the rest (blockIdx.y - t1) of a second of the same
//       shape (w2, sw2, out2, ldo2: gate and up in one launch, w8a8_gemv_dual; one matrix: t1 =
//       T = ceil(N / BN)),
//       dynamic shared memory STAGES (BM + BN) 128 + 1024 bytes. wg_mainloop below with the
//       activation rows as A and the weight rows as B, over all of K; epilogue
//       y = bf16((f32(S) * s_a[r]) * s_w[n]) from the accumulators. Consecutive CTAs
//       (blockIdx.x) share one weight tile (read once from DRAM, then from L2).
//   w8a8_wgmma_silu_{BM}x{BN}(wg, swg, wu, swu, N, K, q, ldq, sa, m, gout, ldg, uout, ldu, table,
//                             part)                              (the pair tiles, prefill rows)
//       Gate and up with the W8A8 arm's SiLU step (w8a8.w8a8_gemv_dual_silu_quant): grid
//       (ceil(m / BM), P = ceil(N / H)), H = BN / 2, block 2 BM, the shared memory above. The B
//       operand is H rows of gate's weights and the same H rows of up's (wg_mainloop's split B),
//       so a thread holds both outputs of each of its columns: g and u as above (bf16), h =
//       bf16(silu[g] * f32(u)) (w8a8.cuh) over gout, u to uout, and each row's (amax bits,
//       non-finite flag) over the CTA's H columns to part [m][P] (w8a8.cu's w8a8_quantize_parts
//       then writes h's A8 codes). The same bits as w8a8_wgmma_{BM}x{BN} on both matrices and
//       w8a8.cu's SiLU-quantize kernels: every output is the same function of its row and column.
//   w8a8_wgmma_silu_st_{BM}x{BN}(the same, ctab in place of table, then words)
//       The same with the SiLU table's compact form (metrale/cuda/weights.py compact_table,
//       `words` floats <= the stage slots' bytes / 4) copied into the stage slots after the
//       mainloop: the epilogue's gathers from shared memory (w8a8.SILU_TILE_ST).
//                                                                                (m <= NB <= 64)
//       Split K for few rows (the weights streamed once, by many CTAs): grid (ceil(N / RA), S),
//       block 2 RA (one warpgroup per 64 weight rows), dynamic shared memory
//       STAGES KS (RA + NB) 128 + 1024 bytes (KS K tiles per stage: configs.W8a8WgmmaTile.ks).
//       CTA (c, s) runs wg_mainloop with RA weight rows as A
//       and the m activation rows (zero rows up to NB) as B over K tiles [s kps, (s + 1) kps),
//       adds its int32 partial sums into ws [m, N] with integer atomics (exact, order-free), and
//       the last CTA of column tile c (a counter per tile, cnt [ceil(N / RA)]) writes y from ws
//       and puts ws and the counter back to 0 for the next launch (ws and cnt start zeroed).
//       Before pdl_wait: its weights' copies of the first STAGES - 2 tiles. Two matrices of
//       one shape in one launch (w8a8_gemv_dual): column tiles c >= t1 are tiles c - t1 of the
//       second (w2, sw2, out2, ldo2; partial sums in ws rows m .. 2m - 1); one matrix: t1 =
//       gridDim.x.
//   w8a8_tma_n{BN}(tw, tq, sw, N, K, sa, m, out, ldo, part, flag, tw2, sw2, out2, ldo2, nmat)
//                                                                                (33 .. 256 rows)
//       Stream-K: grid G <= one CTA per multiprocessor, block 384 (warpgroup 0 the producer,
//       1 and 2 the MMAs), dynamic shared memory STAGES KS (128 + BN) 128 + 1024 bytes. Units =
//       (tile of 128 weight rows x BN activation rows, K step of KS 128-byte K tiles:
//       configs.W8A8_TMA_KS; a tile's last step may hold fewer), tile-major, U of them;
//       CTA c takes [c U / G, (c + 1) U / G). Per unit one thread of the producer loads the boxes
//       of the tensor maps tw (the weights [N, K], 128 rows) and tq (the codes [m, K], BN rows)
//       into a slot (mbarriers full / empty per slot); each MMA warpgroup runs four wgmma
//       m64n{BN}k32 with 64 weight rows as A and the activation rows as B. A tile's first piece
//       (K tile 0) is finished by its CTA: the later pieces, each the first segment of a later
//       CTA, are parked in part [G][2][64 BN] (int32, fragment order) under flag [G][2], added
//       (exact), y written, the flags put back to 0. Before pdl_wait the producer loads the
//       weight boxes of its first STAGES units. nmat = 2 (w8a8_gemv_dual): the unit list holds
//       the tiles of a second matrix of the same shape after the first's (tensor map tw2,
//       scales sw2, output out2 / ldo2), 2 U units. configs.W8A8_TMA_GATHER: the owner awaits
//       every later piece's flag at once and loads the pieces two at a time (else one by one).
//   w8a8_tma_silu_n{BN}(twg, twu, tq, swg, swu, N, K, sa, m, gout, ldg, uout, ldu, part, flag, ctab,
//                       words, hpart)                       (the W8A8 arm's SiLU step; not routed)
//       The same over gate and up with the SiLU step (w8a8.w8a8_gemv_dual_silu_quant,
//       w8a8.TMA_SILU): a tile is 64 columns of both (two 64-row boxes, twg and twu, per unit:
//       warpgroup 0's accumulators gate's, warpgroup 1's up's); the tile's owner writes u, h =
//       bf16(silu[g] f32(u)) over gout and each row's (amax, flag) over the tile to hpart [m][ceil(N /
//       64)] (tma_silu_epilogue); configs.W8A8_TMA_SILU_TIERS stages, then u's exchange, the
//       rows' amax reduction and the compact SiLU table (w8a8.tma_silu_smem).
//
// wg_mainloop<RA, RB, STAGES, WA>: int32 accumulators D [64 x RB] per warpgroup g += A [64 g .. 64 g
// + 63, K tiles] * B [RB, K tiles]^T. K in 128-byte tiles: every thread copies its share of a
// tile's RA + RB rows into one of STAGES shared-memory slots by cp.async (zero-filled past the
// valid rows and K; a thread's rows are fixed, so its source pointers are computed once), in the
// 128-byte-swizzled K-major layout wgmma reads (16-byte chunk c of row r at chunk c ^ (r mod 8);
// 8-row groups 1024 bytes apart). Per tile each warpgroup issues four wgmma.mma_async
// m64n{RB}k32 s32.s8.s8 (A and B from shared memory), then the copies of tile kt + STAGES - 2
// (while the tensor cores work), then waits for its previous group: a slot is refilled only
// after every warpgroup's wgmma on it completed, which the barrier after wait_group 1 ensures.
// Accumulator fragment: warp w of a warpgroup holds A rows 16 w + gid and + 8, B rows 8 j + 2 t
// and + 1 of each 8-row run j (gid = lane / 4, t = lane mod 4): acc[4 j + 2 h + e].
//
// Every kernel is PDL-capable (metrale/cuda/pdl.py): pdl_trigger first; before pdl_wait it reads
// only weights (the weights' first tiles, so HBM streams while the previous launch finishes) and
// writes no global memory.
//
// Build: sm_90a only (wgmma); the launcher uses w8a8.cu's kernels elsewhere. fp32 steps are
// common.cuh's inline-PTX ieee_mul (subnormals kept whatever -ftz).

#include "common.cuh"
#include "w8a8.cuh"
#include "wgmma.cuh"

__device__ __forceinline__ void wg_cp16(u32 dst, const void* src, int nbytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(nbytes));
}

// The asm text of one wgmma m64n{N}k32 s32.s8.s8: accumulator operands REGS, then the A and B
// shared-memory descriptors as operands DA and DB; WG_REGS{n} names operands %0 .. %n-1.
#define WG_TEXT(N, REGS, DA, DB) \
    "{\n" "wgmma.mma_async.sync.aligned.m64n" #N "k32.s32.s8.s8 " "{" REGS "}, %" #DA ", %" #DB ", 1;\n" "}\n"
#define WG_REGS8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define WG_REGS16 WG_REGS8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define WG_REGS32 WG_REGS16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_REGS64 \
    WG_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
              "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_REGS96 \
    WG_REGS64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
              "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"

// The eight accumulator operands d[i] .. d[i + 7] of a wgmma (read and written: "+r").
#define WG_D8(i)                                                                                     \
    "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), "+r"(d[i + 4]), "+r"(d[i + 5]),     \
        "+r"(d[i + 6]), "+r"(d[i + 7])

// D[64 x 128] s32 += A[64 x 32] s8 (smem, K-major) * B[128 x 32] s8 (smem, K-major).
__device__ __forceinline__ void wgmma_n128(int (&d)[64], unsigned long long da, unsigned long long db) {
    asm volatile(WG_TEXT(128, WG_REGS64, 64, 65)
        : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)
        : "l"(da), "l"(db));
}

// D[64 x 192] s32 += A[64 x 32] s8 (smem, K-major) * B[192 x 32] s8 (smem, K-major).
__device__ __forceinline__ void wgmma_n192(int (&d)[96], unsigned long long da, unsigned long long db) {
    asm volatile(WG_TEXT(192, WG_REGS96, 96, 97)
        : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56), WG_D8(64),
          WG_D8(72), WG_D8(80), WG_D8(88)
        : "l"(da), "l"(db));
}

// D[64 x 64] s32 += A[64 x 32] s8 (smem, K-major) * B[64 x 32] s8 (smem, K-major).
__device__ __forceinline__ void wgmma_n64(int (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile(WG_TEXT(64, WG_REGS32, 32, 33)
        : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24)
        : "l"(da), "l"(db));
}

// D[64 x 32] s32 += A[64 x 32] s8 (smem, K-major) * B[32 x 32] s8 (smem, K-major).
__device__ __forceinline__ void wgmma_n32(int (&d)[16], unsigned long long da, unsigned long long db) {
    asm volatile(WG_TEXT(32, WG_REGS16, 16, 17)
        : WG_D8(0), WG_D8(8)
        : "l"(da), "l"(db));
}

// D[64 x 16] s32 += A[64 x 32] s8 (smem, K-major) * B[16 x 32] s8 (smem, K-major).
__device__ __forceinline__ void wgmma_n16(int (&d)[8], unsigned long long da, unsigned long long db) {
    asm volatile(WG_TEXT(16, WG_REGS8, 8, 9)
        : WG_D8(0)
        : "l"(da), "l"(db));
}

template <int N_>
__device__ __forceinline__ void wgmma_tile(int (&d)[N_ / 2], u64 da, u64 db);
template <>
__device__ __forceinline__ void wgmma_tile<192>(int (&d)[96], u64 da, u64 db) { wgmma_n192(d, da, db); }
template <>
__device__ __forceinline__ void wgmma_tile<128>(int (&d)[64], u64 da, u64 db) { wgmma_n128(d, da, db); }
template <>
__device__ __forceinline__ void wgmma_tile<64>(int (&d)[32], u64 da, u64 db) { wgmma_n64(d, da, db); }
template <>
__device__ __forceinline__ void wgmma_tile<32>(int (&d)[16], u64 da, u64 db) { wgmma_n32(d, da, db); }
template <>
__device__ __forceinline__ void wgmma_tile<16>(int (&d)[8], u64 da, u64 db) { wgmma_n16(d, da, db); }

// The 1024-byte-aligned start of the dynamic shared memory (the swizzle's period).
__device__ __forceinline__ u32 wg_smem_base() {
    extern __shared__ unsigned char wg_smem[];
    return ((u32)__cvta_generic_to_shared(wg_smem) + 1023u) & ~1023u;
}

// Header: the A rows a[0 .. ra) (ra valid, the rest zero) and B rows b[0 .. rb) with row strides
// lda, ldb, over K tiles [kt0, kt1); acc zeroed here. WA: the weights are A (else B). SB (split
// B): B rows RB / 2 + i are b2[i] (two matrices' column tiles side by side; rb valid rows in
// each half). KS: K tiles per stage (a slot holds KS tiles' layouts one after the other, so a
// row's KS 128-byte pieces are requested together: KS 128 contiguous bytes; tiles from kt1 on
// are zero-filled, adding nothing). The weights' copies of the first STAGES - 2 stages are
// issued before pdl_wait, the activations' after it.
template <int RA, int RB, int STAGES, bool WA, bool SB = false, int KS = 1>
__device__ __forceinline__ void wg_mainloop(int (&acc)[RB / 2], const signed char* __restrict__ a, long long lda,
                                            int ra, const signed char* __restrict__ b, long long ldb, int rb,
                                            int K, int kt0, int kt1, const signed char* __restrict__ b2 = nullptr) {
    constexpr int NTH = 2 * RA, SUB = (RA + RB) * 128, STAGE = KS * SUB, CPT = (RA + RB) * 8 / NTH;
    static_assert((RA + RB) * 8 % NTH == 0 && (NTH / 8) % 8 == 0, "tile rows must split evenly over the threads");
    const u32 sbase = wg_smem_base();
    const int tid = threadIdx.x, grp = tid >> 7, ch = tid & 7;
    // This thread's copies: chunk ch (K bytes 16 ch .. 16 ch + 15 of a tile) of rows
    // tid / 8 + i NTH / 8, i < CPT (NTH / 8 is a multiple of 8: one swizzle phase for all).
    const signed char* src[CPT];
    int rok = 0;
#pragma unroll
    for (int i = 0; i < CPT; ++i) {
        const int row = (tid >> 3) + i * (NTH / 8);
        if (row < RA) {
            src[i] = a + (long long)min(row, ra - 1) * lda + ch * 16;
            rok |= (row < ra) << i;
        } else {
            const bool hi = SB && row - RA >= RB / 2;
            const int rr = row - RA - (hi ? RB / 2 : 0);
            src[i] = (hi ? b2 : b) + (long long)min(rr, rb - 1) * ldb + ch * 16;
            rok |= (rr < rb) << i;
        }
    }
    const u32 dst0 = (tid >> 3) * 128 + ((ch ^ ((tid >> 3) & 7)) << 4);
    // Copies i < CPA are A rows (row < RA: NTH / 8 = RA / 4 rows per i), the rest B rows; sel
    // 1: A only, 2: B only, 3: both.
    constexpr int CPA = RA / (NTH / 8);
    // the stage from K tile kf: K tiles kf + j, j < KS
    auto load = [&](int slot, int kf, int sel) {
#pragma unroll
        for (int j = 0; j < KS; ++j) {
            const int kt = kf + j, k = kt * 128 + ch * 16;
            const bool in = (KS == 1 || kt < kt1) && k < K;
            const long long off = in ? (long long)kt * 128 : 0;
#pragma unroll
            for (int i = 0; i < CPT; ++i)
                if (sel >> (i < CPA ? 0 : 1) & 1)
                    wg_cp16(sbase + slot * STAGE + j * SUB + dst0 + i * NTH * 16, src[i] + off,
                            (in && (rok >> i & 1)) ? 16 : 0);
        }
    };
#pragma unroll
    for (int i = 0; i < RB / 2; ++i) acc[i] = 0;
    const int nt = (kt1 - kt0 + KS - 1) / KS;  // stages
    constexpr int WSEL = WA ? 1 : 2;
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s)
        if (s < nt) load(s, kt0 + s * KS, WSEL);
    pdl_wait();
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < nt) load(s, kt0 + s * KS, 3 - WSEL);
        asm volatile("cp.async.commit_group;");
    }
    for (int i = 0; i < nt; ++i) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 3));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        const u32 st = sbase + (i % STAGES) * STAGE;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int j = 0; j < KS; ++j)
#pragma unroll
            for (int k = 0; k < 4; ++k)
                wgmma_tile<RB>(acc, wg_desc(st + j * SUB + grp * 64 * 128 + 32 * k),
                               wg_desc(st + j * SUB + RA * 128 + 32 * k));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        // stage i + STAGES - 2 from K tile kt0 + (i + STAGES - 2) KS (written so that KS = 1
        // compiles to the very code of the build before KS)
        if (i + STAGES - 2 < nt) load((i + STAGES - 2) % STAGES, kt0 + i * KS + STAGES * KS - 2 * KS, 3);
        asm volatile("cp.async.commit_group;");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    asm volatile("cp.async.wait_group 0;");
}

__device__ __forceinline__ u32 w8_y(int s, float s_a, float s_w) {
    return f32_to_bf16(ieee_mul(ieee_mul(__int2float_rn(s), s_a), s_w));
}

template <int BM, int BN, int STAGES>
__device__ __forceinline__ void w8_wgmma_gemm(const signed char* __restrict__ w, const float* __restrict__ sw,
                                              int N, int K, const signed char* __restrict__ q, long long ldq,
                                              const float* __restrict__ sa, int m, u16* __restrict__ out,
                                              long long ldo, const signed char* __restrict__ w2,
                                              const float* __restrict__ sw2, u16* __restrict__ out2,
                                              long long ldo2, int t1) {
    const bool second = (int)blockIdx.y >= t1;  // column tiles t1 .. of the second matrix
    if (second) {
        w = w2, sw = sw2, out = out2, ldo = ldo2;
    }
    const int r0 = blockIdx.x * BM, n0 = ((int)blockIdx.y - (second ? t1 : 0)) * BN;
    int acc[BN / 2];
    wg_mainloop<BM, BN, STAGES, false>(acc, q + (long long)r0 * ldq, ldq, m - r0, w + (long long)n0 * K, K, N - n0,
                                       K, 0, (K + 127) >> 7);
    const int tid = threadIdx.x, grp = tid >> 7, warp = (tid >> 5) & 3, gid = (tid & 31) >> 2, t = tid & 3;
    const bool pairs = ((ldo & 1) == 0) && ((reinterpret_cast<unsigned long long>(out) & 3) == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = r0 + grp * 64 + warp * 16 + gid + 8 * h;
        if (r >= m) continue;
        const float s_a = sa[r];
        u16* orow = out + (long long)r * ldo;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int n = n0 + 8 * j + 2 * t;
            const u32 y0 = n < N ? w8_y(acc[4 * j + 2 * h], s_a, sw[n]) : 0u;
            const u32 y1 = n + 1 < N ? w8_y(acc[4 * j + 2 * h + 1], s_a, sw[n + 1]) : 0u;
            if (pairs && n + 1 < N) {
                *reinterpret_cast<u32*>(orow + n) = y0 | (y1 << 16);
            } else {
                if (n < N) orow[n] = (u16)y0;
                if (n + 1 < N) orow[n + 1] = (u16)y1;
            }
        }
    }
}

// Gate and up side by side with the SiLU step (w8a8_wgmma_silu_{BM}x{BN}): B rows 0 .. H - 1 are
// gate's weight rows n0 .., rows H .. BN - 1 up's (H = BN / 2, n0 = blockIdx.y H), so a thread's
// accumulator run j < H / 8 and run j + H / 8 are the same column of gate and of up. Each is
// w8a8_gemv's y (g, u); h = bf16(silu[g] f32(u)) goes over gate_out, u to up_out, and the row's
// (amax bits, non-finite flag) over the tile's h to part [m][P] (P = gridDim.y; the quad's four
// threads hold the row's columns: shuffles, max / or in any order).
// The SiLU epilogue's table reader (chosen by the tag's type): the whole table in global memory,
// or compact_table's `words` floats copied to the start of the dynamic shared memory, whose stage
// slots the mainloop has freed (its last waits: every copy landed, every wgmma completed).
__device__ __forceinline__ TableAct silu_epilogue_act(TableAct*, const float* __restrict__ table, int) {
    return TableAct{table};
}
__device__ __forceinline__ CompactAct silu_epilogue_act(CompactAct*, const float* __restrict__ ctab, int words) {
    extern __shared__ unsigned char wg_smem[];  // dynamic shared memory: 16-byte aligned
    __syncthreads();
    load_compact_table(reinterpret_cast<float4*>(wg_smem), ctab, words);
    __syncthreads();
    return CompactAct(reinterpret_cast<const float*>(wg_smem));
}

// Act: TableAct (table: the whole SiLU table) or CompactAct (table: compact_table's `words` floats).
template <int BM, int BN, int STAGES, class Act>
__device__ __forceinline__ void w8_wgmma_silu(const signed char* __restrict__ wg, const float* __restrict__ swg,
                                              const signed char* __restrict__ wu, const float* __restrict__ swu,
                                              int N, int K, const signed char* __restrict__ q, long long ldq,
                                              const float* __restrict__ sa, int m, u16* __restrict__ gout,
                                              long long ldg, u16* __restrict__ uout, long long ldu,
                                              const float* __restrict__ table, uint2* __restrict__ part, int words) {
    constexpr int H = BN / 2, HJ = H / 8;
    static_assert(H % 8 == 0, "gate and up halves of whole 8-row runs");
    const int r0 = blockIdx.x * BM, n0 = blockIdx.y * H;
    int acc[BN / 2];
    wg_mainloop<BM, BN, STAGES, false, true>(acc, q + (long long)r0 * ldq, ldq, m - r0, wg + (long long)n0 * K, K,
                                             N - n0, K, 0, (K + 127) >> 7, wu + (long long)n0 * K);
    const Act act = silu_epilogue_act(static_cast<Act*>(nullptr), table, words);
    const int tid = threadIdx.x, grp = tid >> 7, warp = (tid >> 5) & 3, gid = (tid & 31) >> 2, t = tid & 3;
    const bool pairs = ((ldg & 1) == 0) && ((ldu & 1) == 0) &&
                       (((reinterpret_cast<unsigned long long>(gout) | reinterpret_cast<unsigned long long>(uout)) & 3) == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = r0 + grp * 64 + warp * 16 + gid + 8 * h;
        u32 amax = 0;
        int bad = 0;
        if (r < m) {
            const float s_a = sa[r];
            u16* grow = gout + (long long)r * ldg;
            u16* urow = uout + (long long)r * ldu;
#pragma unroll
            for (int j = 0; j < HJ; ++j) {
                const int n = n0 + 8 * j + 2 * t;
                u32 hv[2] = {0u, 0u}, uv[2] = {0u, 0u};
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (n + e < N) {
                        uv[e] = w8_y(acc[4 * (j + HJ) + 2 * h + e], s_a, swu[n + e]);
                        hv[e] = act_mul1(w8_y(acc[4 * j + 2 * h + e], s_a, swg[n + e]), uv[e], act);
                        w8_scan1(hv[e], &amax, &bad);
                    }
                }
                if (pairs && n + 1 < N) {
                    *reinterpret_cast<u32*>(grow + n) = hv[0] | (hv[1] << 16);
                    *reinterpret_cast<u32*>(urow + n) = uv[0] | (uv[1] << 16);
                } else {
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (n + e < N) {
                            grow[n + e] = (u16)hv[e];
                            urow[n + e] = (u16)uv[e];
                        }
                }
            }
        }
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            bad |= __shfl_xor_sync(0xffffffffu, bad, o);
        }
        if (r < m && t == 0) part[(long long)r * gridDim.y + blockIdx.y] = make_uint2(amax, (u32)bad);
    }
}

template <int RA, int NB, int STAGES, int KS>
__device__ __forceinline__ void w8_wgmma_sk(const signed char* __restrict__ w, const float* __restrict__ sw, int N,
                                            int K, const signed char* __restrict__ q, long long ldq,
                                            const float* __restrict__ sa, int m, u16* __restrict__ out,
                                            long long ldo, int* __restrict__ ws, unsigned int* __restrict__ cnt,
                                            int kps, const signed char* __restrict__ w2,
                                            const float* __restrict__ sw2, u16* __restrict__ out2, long long ldo2,
                                            int t1) {
    constexpr int NTH = 2 * RA;
    __shared__ int last;
    const bool hi = (int)blockIdx.x >= t1;  // a column tile of the second matrix
    if (hi) {
        w = w2;
        sw = sw2;
        out = out2;
        ldo = ldo2;
        ws += (long long)m * N;
    }
    const int n0 = ((int)blockIdx.x - (hi ? t1 : 0)) * RA, kt0 = blockIdx.y * kps, kt1 = min(kt0 + kps, (K + 127) >> 7);
    int acc[NB / 2];
    wg_mainloop<RA, NB, STAGES, true, false, KS>(acc, w + (long long)n0 * K, K, N - n0, q, ldq, m, K, kt0, kt1);
    const int tid = threadIdx.x, warp = tid >> 5, gid = (tid & 31) >> 2, t = tid & 3;
#pragma unroll
    for (int j = 0; j < NB / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int n = n0 + warp * 16 + gid + 8 * (e >> 1), r = 8 * j + 2 * t + (e & 1);
            if (n < N && r < m && acc[4 * j + e] != 0) atomicAdd(ws + (long long)r * N + n, acc[4 * j + e]);
        }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(cnt + blockIdx.x, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    // The column tile's RA m sums, 8 independent loads in flight per thread.
    for (int base = 0; base < RA * m; base += 8 * NTH) {
        int v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = base + u * NTH + tid, n = n0 + i % RA;
            v[u] = (i < RA * m && n < N) ? __ldcg(ws + (long long)(i / RA) * N + n) : 0;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = base + u * NTH + tid, r = i / RA, n = n0 + i % RA;
            if (i < RA * m && n < N) {
                out[(long long)r * ldo + n] = (u16)w8_y(v[u], sa[r], sw[n]);
                ws[(long long)r * N + n] = 0;
            }
        }
    }
    if (tid == 0) cnt[blockIdx.x] = 0u;
}

// ---- the stream-K GEMM on TMA (w8a8_tma_n{BN}; its TMA and mbarrier helpers in wgmma.cuh) ----

__device__ __forceinline__ unsigned int ld_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(unsigned int* p, unsigned int v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// A unit's weight boxes into the slot at dst: one 128-row box of the tile's matrix (tw where
// first, else tw2), or (SILU) 64 rows of gate's (tw) then the same 64 rows of up's (tw2).
template <bool SILU>
__device__ __forceinline__ void tma_weights(u32 dst, const TmaDesc& tw, const TmaDesc& tw2, bool first, int x0,
                                            int y0, u32 bar) {
    if constexpr (SILU) {
        tma_box(dst, tw, x0, y0, bar);
        tma_box(dst + 64 * 128, tw2, x0, y0, bar);
    } else {
        tma_box(dst, first ? tw : tw2, x0, y0, bar);
    }
}

// The SiLU form's epilogue (w8a8_tma_silu_n{BN}): the finished tile's int32 sums, gate's in
// warpgroup 0 and up's in warpgroup 1 at the same fragment positions (the same columns n, rows r).
// Warpgroup 1 writes u = w8a8_gemv's y to uout and to xs; then warpgroup 0 forms g, h =
// bf16(silu[g] f32(u)) over gout, and each row's (amax bits, non-finite flag) over the tile's
// 64 columns into hpart [m][P] (the quad's lanes by shuffles, the four warps through red).
template <int BN>
__device__ __forceinline__ void tma_silu_epilogue(const int (&acc)[BN / 2], int g, int lt, int n0, int r0, int N,
                                                  int m, const float* __restrict__ sa,
                                                  const float* __restrict__ swg, const float* __restrict__ swu,
                                                  u16* __restrict__ gout, long long ldg, u16* __restrict__ uout,
                                                  long long ldu, u16* xs, uint2* red, const float* ts,
                                                  uint2* __restrict__ hpart, int P, int col) {
    const int warp = lt >> 5, gid = (lt & 31) >> 2, t = lt & 3;
    if (g == 1) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + 16 * warp + gid + 8 * h;
            const float s_w = n < N ? swu[n] : 0.0f;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int r = r0 + 8 * j + 2 * t + e, i = 4 * j + 2 * h + e;
                    u32 u = 0u;
                    if (n < N && r < m) {
                        u = w8_y(acc[i], sa[r], s_w);
                        uout[(long long)r * ldu + n] = (u16)u;
                    }
                    xs[i * 128 + lt] = (u16)u;
                }
        }
    }
    named_sync(3, 256);  // u in xs; the table's copies landed (each consumer thread's before it arrived)
    if (g == 0) {
        const CompactAct act(ts);
        u32 amax[BN / 4];
        u32 bad = 0u;  // bit 2 j + e: row r0 + 8 j + 2 t + e
#pragma unroll
        for (int q = 0; q < BN / 4; ++q) amax[q] = 0u;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + 16 * warp + gid + 8 * h;
            const float s_w = n < N ? swg[n] : 0.0f;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int r = r0 + 8 * j + 2 * t + e, i = 4 * j + 2 * h + e;
                    if (n < N && r < m) {
                        const u32 hv = act_mul1(w8_y(acc[i], sa[r], s_w), (u32)xs[i * 128 + lt], act);
                        gout[(long long)r * ldg + n] = (u16)hv;
                        int b = 0;
                        w8_scan1(hv, &amax[2 * j + e], &b);
                        bad |= (u32)b << (2 * j + e);
                    }
                }
        }
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {  // the eight lanes gid = 0 .. 7 of each t: one row set
            bad |= __shfl_xor_sync(0xffffffffu, bad, o);
#pragma unroll
            for (int q = 0; q < BN / 4; ++q) amax[q] = max(amax[q], __shfl_xor_sync(0xffffffffu, amax[q], o));
        }
        if (gid == 0)
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    red[warp * BN + 8 * j + 2 * t + e] = make_uint2(amax[2 * j + e], (bad >> (2 * j + e)) & 1u);
        named_sync(4, 128);
        if (lt < BN && r0 + lt < m) {
            uint2 v = red[lt];
#pragma unroll
            for (int w = 1; w < 4; ++w) {
                const uint2 o = red[w * BN + lt];
                v = make_uint2(max(v.x, o.x), v.y | o.y);
            }
            hpart[(long long)(r0 + lt) * P + col] = v;
        }
    }
    named_sync(3, 256);  // xs and red free for the next tile
}

// SILU = false: w8a8_tma_n{BN}; true: w8a8_tma_silu_n{BN} (tw / sw / out: gate's 64-row boxes,
// scales and h; tw2 / sw2 / out2: up's; nmat unused), each tile 64 columns of both.
// GATHER: the owner of a tile's first piece waits for every later piece's flag at once and loads
// the pieces two at a time (configs.W8A8_TMA_GATHER); else one piece after another.
template <int BN, int STAGES, int KS, bool SILU, bool GATHER>
__device__ __forceinline__ void w8_tma_gemm(const TmaDesc& tw, const TmaDesc& tq, const float* __restrict__ sw,
                                            int N, int K, const float* __restrict__ sa, int m,
                                            u16* __restrict__ out, long long ldo, int* __restrict__ part,
                                            unsigned int* __restrict__ flag, const TmaDesc& tw2,
                                            const float* __restrict__ sw2, u16* __restrict__ out2, long long ldo2,
                                            int nmat, const float* __restrict__ ctab = nullptr, int words = 0,
                                            uint2* __restrict__ hpart = nullptr) {
    // a unit's K step: KS K tiles of 128 bytes (sub-tile j of a slot at j SUB: its weight rows,
    // then its activation rows); a tile's last step may hold fewer (ns below). A tile covers
    // WCOLS columns: 128 weight rows of one matrix, or (SILU) 64 of gate's and the same 64 of up's.
    constexpr int WROWS = 128, WCOLS = SILU ? 64 : 128, SUB = (WROWS + BN) * 128, STAGE = KS * SUB;
    __shared__ __align__(8) u64 bars[2 * STAGES];
    const u32 sbase = wg_smem_base();
    const u32 full0 = (u32)__cvta_generic_to_shared(&bars[0]), empty0 = full0 + 8 * STAGES;
    const int tid = threadIdx.x, wg = tid >> 7, lt = tid & 127;
    const int G = gridDim.x, c = blockIdx.x;
    const int KTILES = (K + 127) >> 7, KT = (KTILES + KS - 1) / KS;  // K tiles, K steps
    const int NT = (N + WCOLS - 1) / WCOLS, RT = (m + BN - 1) / BN;
    const int TT = NT * RT, U = (SILU ? 1 : nmat) * TT * KT, u0 = tk_start(c, G, U), u1 = tk_start(c + 1, G, U);
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        if (lt == 0) {  // one thread issues the two boxes of every unit
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&tw)) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&tq)) : "memory");
            if (nmat > 1) asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&tw2)) : "memory");
            // Before pdl_wait (no launch of the FFN writes weights, metrale/cuda/pdl.py): the
            // weight boxes of the first STAGES units into their slots.
            const int npre = min(STAGES, u1 - u0);
            for (int it = 0; it < npre; ++it) {
                const int u = u0 + it, tile = u / KT, kt = u - tile * KT, tl = tile % TT;
                const int ns = KS == 1 ? 1 : min(KS, KTILES - kt * KS);
                mbar_expect_tx(full0 + 8 * it, ns * SUB);
                for (int j = 0; j < ns; ++j)
                    tma_weights<SILU>(sbase + it * STAGE + j * SUB, tw, tw2, tile < TT, (kt * KS + j) * 128,
                                      (tl / RT) * WCOLS, full0 + 8 * it);
            }
            pdl_wait();
            for (int u = u0, it = 0; u < u1; ++u, ++it) {
                const int tile = u / KT, kt = u - tile * KT, tl = tile % TT, slot = it % STAGES;
                const int ns = KS == 1 ? 1 : min(KS, KTILES - kt * KS);
                const u32 st = sbase + slot * STAGE, ph = (u32)(it / STAGES) & 1u;
                if (it >= npre) {
                    mbar_wait(empty0 + 8 * slot, ph ^ 1u);
                    mbar_expect_tx(full0 + 8 * slot, ns * SUB);
                    for (int j = 0; j < ns; ++j)
                        tma_weights<SILU>(st + j * SUB, tw, tw2, tile < TT, (kt * KS + j) * 128, (tl / RT) * WCOLS,
                                          full0 + 8 * slot);
                }
                for (int j = 0; j < ns; ++j)
                    tma_box(st + j * SUB + WROWS * 128, tq, (kt * KS + j) * 128, (tl % RT) * BN, full0 + 8 * slot);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    // SILU: after the stages, xs (u: 128 BN bytes), red (32 BN bytes), the compact SiLU table
    // (its `words` floats, copied before the wait: no launch writes it)
    u16* xs = nullptr;
    uint2* red = nullptr;
    const float* ts = nullptr;
    if constexpr (SILU) {
        extern __shared__ unsigned char wg_smem[];
        unsigned char* after = wg_smem + (sbase - (u32)__cvta_generic_to_shared(wg_smem)) + STAGES * STAGE;
        xs = reinterpret_cast<u16*>(after);
        red = reinterpret_cast<uint2*>(after + 128 * BN);
        float4* tab = reinterpret_cast<float4*>(after + 160 * BN);
        for (int i = tid - 128; 4 * i < words; i += 256) tab[i] = __ldg(reinterpret_cast<const float4*>(ctab) + i);
        ts = reinterpret_cast<const float*>(tab);
    }
    pdl_wait();
    const int g = wg - 1, warp = lt >> 5, gid = (lt & 31) >> 2, t = lt & 3;
    int acc[BN / 2];
    int it = 0;
    for (int u = u0; u < u1;) {
        const int tile = u / KT, ka = u - tile * KT, nk = min(KT - ka, u1 - u), tl = tile % TT;
        const int n0 = (tl / RT) * WCOLS, r0 = (tl % RT) * BN;
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0;
        for (int i = 0; i < nk; ++i, ++it) {
            const int slot = it % STAGES;
            const u32 st = sbase + slot * STAGE;
            mbar_wait(full0 + 8 * slot, (u32)(it / STAGES) & 1u);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            const int ns = KS == 1 ? 1 : min(KS, KTILES - (ka + i) * KS);  // uniform over the CTA
#pragma unroll
            for (int j = 0; j < KS; ++j)
                if (j < ns)
#pragma unroll
                    for (int k = 0; k < 4; ++k)
                        wgmma_tile<BN>(acc, wg_desc(st + j * SUB + g * 64 * 128 + 32 * k),
                                       wg_desc(st + j * SUB + WROWS * 128 + 32 * k));
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            if (i > 0 && lt == 0) mbar_arrive(empty0 + 8 * ((it - 1) % STAGES));
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (lt == 0) mbar_arrive(empty0 + 8 * ((it - 1) % STAGES));
        const int tend = (tile + 1) * KT;  // the tile's last unit + 1
        if (ka != 0) {
            // a later piece of the tile (this CTA's first segment): park the sums for the CTA that
            // owns the tile's first K tile, in fragment order
            int* dst = part + (size_t)(2 * c + g) * (BN / 2) * 128 + lt;
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) __stcg(dst + i * 128, acc[i]);
            __threadfence();
            named_sync(1 + g, 128);
            if (lt == 0) st_release(flag + 2 * c + g, 1u);
        } else {
            // the tile's first piece: add the parked pieces of the CTAs c + 1 .. that cover the rest
            if constexpr (GATHER) {
                // np pieces; thread j waits for pieces j, j + 128, .. (every wait at once), then the
                // pieces' loads two at a time (int32 sums: exact in any order)
                int np = 0;
                while (u + nk < tend && c + 1 + np < G && tk_start(c + 1 + np, G, U) < tend) ++np;
                for (int j = lt; j < np; j += 128)
                    while (ld_acquire(flag + 2 * (c + 1 + j) + g) == 0u) {
                    }
                named_sync(1 + g, 128);
                for (int p = 0; p < np; p += 2) {
                    const int* s0 = part + (size_t)(2 * (c + 1 + p) + g) * (BN / 2) * 128 + lt;
                    const int* s1 = part + (size_t)(2 * (c + 2 + p) + g) * (BN / 2) * 128 + lt;
                    const bool two = p + 1 < np;
#pragma unroll
                    for (int i = 0; i < BN / 2; ++i) {
                        const int a = __ldcg(s0 + i * 128), b = two ? __ldcg(s1 + i * 128) : 0;
                        acc[i] += a + b;
                    }
                }
                named_sync(1 + g, 128);
                for (int j = lt; j < np; j += 128) flag[2 * (c + 1 + j) + g] = 0u;
            } else {
                for (int c2 = c + 1; u + nk < tend && c2 < G && tk_start(c2, G, U) < tend; ++c2) {
                    if (lt == 0)
                        while (ld_acquire(flag + 2 * c2 + g) == 0u) {
                        }
                    named_sync(1 + g, 128);
                    const int* src = part + (size_t)(2 * c2 + g) * (BN / 2) * 128 + lt;
#pragma unroll
                    for (int i = 0; i < BN / 2; ++i) acc[i] += __ldcg(src + i * 128);
                    named_sync(1 + g, 128);
                    if (lt == 0) flag[2 * c2 + g] = 0u;
                }
            }
            if constexpr (SILU) {
                tma_silu_epilogue<BN>(acc, g, lt, n0, r0, N, m, sa, sw, sw2, out, ldo, out2, ldo2, xs, red, ts,
                                      hpart, NT, tl / RT);
                u += nk;
                continue;
            }
            // y = bf16((f32(S) * s_a[r]) * s_w[n]); this thread's weight rows n, activation rows r
            const bool second = tile >= TT;
            const float* __restrict__ swm = second ? sw2 : sw;
            u16* __restrict__ outm = second ? out2 : out;
            const long long ldm = second ? ldo2 : ldo;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int n = n0 + 64 * g + 16 * warp + gid + 8 * h;
                if (n >= N) continue;
                const float s_w = swm[n];
#pragma unroll
                for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = r0 + 8 * j + 2 * t + e;
                        if (r < m) outm[(long long)r * ldm + n] = (u16)w8_y(acc[4 * j + 2 * h + e], sa[r], s_w);
                    }
            }
        }
        u += nk;
    }
}

// w8a8_wgmma_{BM}x{BN}: grid (ceil(m / BM), ceil(N / BN)), block 2 BM, dynamic shared memory
// STAGES (BM + BN) 128 + 1024 bytes.
#define W8A8_WGMMA(BM, BN, STAGES)                                                                   \
    extern "C" __global__ void __launch_bounds__(2 * BM, 1) w8a8_wgmma_##BM##x##BN(                   \
        const signed char* __restrict__ w, const float* __restrict__ sw, int N, int K,              \
        const signed char* __restrict__ q, long long ldq, const float* __restrict__ sa, int m,      \
        u16* __restrict__ out, long long ldo, const signed char* __restrict__ w2,                   \
        const float* __restrict__ sw2, u16* __restrict__ out2, long long ldo2, int t1) {            \
        pdl_trigger();                                                                              \
        w8_wgmma_gemm<BM, BN, STAGES>(w, sw, N, K, q, ldq, sa, m, out, ldo, w2, sw2, out2, ldo2, t1); \
    }

// w8a8_wgmma_silu_{BM}x{BN}: grid (ceil(m / BM), ceil(N / (BN / 2))), block 2 BM, dynamic shared
// memory STAGES (BM + BN) 128 + 1024 bytes.
#define W8A8_WGMMA_SILU(BM, BN, STAGES)                                                               \
    extern "C" __global__ void __launch_bounds__(2 * BM, 1) w8a8_wgmma_silu_##BM##x##BN(               \
        const signed char* __restrict__ wg, const float* __restrict__ swg, const signed char* __restrict__ wu, \
        const float* __restrict__ swu, int N, int K, const signed char* __restrict__ q, long long ldq, \
        const float* __restrict__ sa, int m, u16* __restrict__ gout, long long ldg, u16* __restrict__ uout, \
        long long ldu, const float* __restrict__ table, uint2* __restrict__ part) {                     \
        pdl_trigger();                                                                                 \
        w8_wgmma_silu<BM, BN, STAGES, TableAct>(wg, swg, wu, swu, N, K, q, ldq, sa, m, gout, ldg, uout, ldu, table, \
                                                part, 0);                                              \
    }                                                                                                  \
    extern "C" __global__ void __launch_bounds__(2 * BM, 1) w8a8_wgmma_silu_st_##BM##x##BN(            \
        const signed char* __restrict__ wg, const float* __restrict__ swg, const signed char* __restrict__ wu, \
        const float* __restrict__ swu, int N, int K, const signed char* __restrict__ q, long long ldq, \
        const float* __restrict__ sa, int m, u16* __restrict__ gout, long long ldg, u16* __restrict__ uout, \
        long long ldu, const float* __restrict__ ctab, uint2* __restrict__ part, int words) {            \
        pdl_trigger();                                                                                 \
        w8_wgmma_silu<BM, BN, STAGES, CompactAct>(wg, swg, wu, swu, N, K, q, ldq, sa, m, gout, ldg, uout, ldu, \
                                                  ctab, part, words);                                  \
    }

// w8a8_wgmma_sk_n{NB}: grid (ceil(N / RA), S), block 2 RA, dynamic shared memory
// STAGES KS (RA + NB) 128 + 1024 bytes; kps K tiles of 128 bytes per split, KS per stage.
#define W8A8_WGMMA_SK(RA, NB, STAGES, KS)                                                            \
    extern "C" __global__ void __launch_bounds__(2 * RA) w8a8_wgmma_sk_n##NB(                        \
        const signed char* __restrict__ w, const float* __restrict__ sw, int N, int K,              \
        const signed char* __restrict__ q, long long ldq, const float* __restrict__ sa, int m,      \
        u16* __restrict__ out, long long ldo, int* __restrict__ ws, unsigned int* __restrict__ cnt, \
        int kps, const signed char* __restrict__ w2, const float* __restrict__ sw2,                 \
        u16* __restrict__ out2, long long ldo2, int t1) {                                           \
        pdl_trigger();                                                                              \
        w8_wgmma_sk<RA, NB, STAGES, KS>(w, sw, N, K, q, ldq, sa, m, out, ldo, ws, cnt, kps, w2, sw2, out2, \
                                    ldo2, t1);                                                      \
    }

// w8a8_tma_n{BN}: the stream-K GEMM above (384 threads, one CTA per multiprocessor; the
// producer gives registers to the MMA warpgroups with setmaxnreg).
#define W8A8_TMA(BN, STAGES, KS, GATHER)                                                                  \
    extern "C" __global__ void __launch_bounds__(384, 1) w8a8_tma_n##BN(                                  \
        const __grid_constant__ TmaDesc tw, const __grid_constant__ TmaDesc tq, const float* __restrict__ sw, \
        int N, int K, const float* __restrict__ sa, int m, u16* __restrict__ out, long long ldo,        \
        int* __restrict__ part, unsigned int* __restrict__ flag, const __grid_constant__ TmaDesc tw2,    \
        const float* __restrict__ sw2, u16* __restrict__ out2, long long ldo2, int nmat) {                \
        pdl_trigger();                                                                                    \
        w8_tma_gemm<BN, STAGES, KS, false, GATHER>(tw, tq, sw, N, K, sa, m, out, ldo, part, flag, tw2, sw2, out2, \
                                                   ldo2, nmat);                                           \
    }

// w8a8_tma_silu_n{BN}: the same over gate (twg: boxes of 64 rows) and up (twu) side by side with the
// W8A8 arm's SiLU step (w8a8.w8a8_gemv_dual_silu_quant): h over gout, u to uout, each row's
// (amax, flag) over each 64-column tile to hpart [m][ceil(N / 64)]; the compact SiLU table's
// `words` floats, xs and red after the stages (w8a8.tma_silu_smem).
#define W8A8_TMA_SILU(BN, STAGES, KS, GATHER)                                                             \
    extern "C" __global__ void __launch_bounds__(384, 1) w8a8_tma_silu_n##BN(                             \
        const __grid_constant__ TmaDesc twg, const __grid_constant__ TmaDesc twu,                         \
        const __grid_constant__ TmaDesc tq, const float* __restrict__ swg, const float* __restrict__ swu,  \
        int N, int K, const float* __restrict__ sa, int m, u16* __restrict__ gout, long long ldg,        \
        u16* __restrict__ uout, long long ldu, int* __restrict__ part, unsigned int* __restrict__ flag,   \
        const float* __restrict__ ctab, int words, uint2* __restrict__ hpart) {                          \
        pdl_trigger();                                                                                    \
        w8_tma_gemm<BN, STAGES, KS, true, GATHER>(twg, tq, swg, N, K, sa, m, gout, ldg, part, flag, twu, swu, uout,  \
                                                  ldu, 2,                                                 \
                                          ctab, words, hpart);                                            \
    }

// @instances W8A8_WGMMA   (lines generated from metrale/cuda/configs.py)
// @instances W8A8_WGMMA_SILU
// @instances W8A8_WGMMA_SK
// @instances W8A8_TMA
// @instances W8A8_TMA_SILU
