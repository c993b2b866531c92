// metrale/cuda/kernels/fp8_bf16_gemv.cu -- FP8 (W8A16, e4m3 per-row scale) and BF16 dense weights
// x A16 activations.
//
// Contract: arithmetic.md § a16, § codes24 (c = rne(w 2^(22-F))), § projection (S_b exact;
// v_b = f32(S_b 2^(E_b + F_b - 36)) with ONE rounding; the fixed tree; y = bf16(root scale[n])
// for FP8, bf16(root) for BF16).
//
// How the exact block dot is done: sum_j c_w c_a 2^(F-22) = sum_j w_j c_a,j where w_j is the
// weight value itself for e4m3 (24-bit codes never round an e4m3 block) and, for BF16, the value
// c_w 2^(F-22) that metrale/cuda/fp8_bf16.py writes at upload (bf16 blocks spanning more than 2^15
// are rounded there, with the reference's weight_codes24). Each weight becomes a float64 by
// moving its bits into a double's exponent/fraction (a "raw" double = w 2^-1016 for e4m3,
// w 2^-896 for bf16; subnormals included), and the block is summed with DFMA: every product and
// every partial sum is an integer multiple of the smallest weight ulp below 2^53 of it, so all
// are exact in any order. v_b = ieee_d2f((acc 2^1016|896) 2^(E-14)): two exact scalings
// and one rounding to f32 (subnormal results included).
//
// Kernels:
//   fp8_bf16_a16_prep(x, ldx, K, m, ac, p2)
//       grid (ceil(m K/16 / 256)), block 256; one thread per (row, 16-block): ac double [m, K]
//       (the A16 codes), p2 double [m, B] (2^(E-14), or NaN for a block holding Inf/NaN).
//   fp8_gemv_r{1,2,4,8}(w, scale, N, K, ac, p2, m, out, ldo) and
//   bf16_gemv_r{1,2,4,8}(w, N, K, ac, p2, m, out, ldo)
//       grid (ceil(N / (4 NC)), ceil(m / R)), block 128 (4 warps); warp = NC columns x R rows.
//       Lane l owns blocks 2l, 2l+1 of each 64-block chunk (16-byte weight loads), adds the pair,
//       shfl_xor 1..16 gives the chunk's subtree; chunk roots go to shared memory and the padded
//       tree over chunks (C <= 64, so K <= 65536) finishes with the same shuffles. They serve
//       m < MMA_MIN_M rows (grid.y row groups) where no decode kernel does (configs.py
//       FP8_BF16_DECODE = "gemv", or m above the decode tiers).
//   fp8_bf16_dec_prep and {fp8,bf16}_dec_r{R}_c{NC}_w{W}_p{P}_{h,i} (below): the decode
//       kernels, m = 1, 2, 3 rows in one pass (w8a16_gemv / dense_gemv and the gemm entry
//       points at m <= 3; configurations in configs.py FP8_BF16_DEC).
//   fp8_bf16_mma_prep, {fp8,bf16}_mma_nt{1,2,4}, bf16c_mma_nt{1,2,4} (at the end): the integer
//       tensor-core GEMM from MMA_MIN_M (configs.py FP8_BF16_MMA_MIN_M) rows.
//
// Build: --fmad=false; the only fma() calls are exact by the argument above; fp32 steps and the
// f64 -> f32 rounding are common.cuh's inline-PTX ieee_* (subnormals kept whatever -ftz).

#include "common.cuh"

typedef unsigned short u16;
typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(256) fp8_bf16_a16_prep(
    const u16* __restrict__ x, long long ldx, int K, int m, double* __restrict__ ac,
    double* __restrict__ p2) {
    const int B = K >> 4;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)m * B) return;
    const int r = (int)(t / B), blk = (int)(t % B);
    int c[16], E;
    bool finite;
    a16_block_int(x + (long long)r * ldx + blk * 16, c, E, finite);
    double2* o = reinterpret_cast<double2*>(ac + (long long)r * K + blk * 16);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = make_double2((double)c[2 * j], (double)c[2 * j + 1]);
    // 2^(E - 14) as a double (always normal)
    p2[t] = finite ? __hiloint2double((E - 14 + 1023) << 20, 0) : __longlong_as_double(0x7FF8000000000000ll);
}

// raw doubles of weight elements: e4m3 byte -> w 2^-1016; bf16 bits -> w 2^-896 (exact).
__device__ __forceinline__ double wd_raw_e4m3(u32 b) {
    return __hiloint2double((int)(((b & 0x80u) << 24) | ((b & 0x7Fu) << 17)), 0);
}
__device__ __forceinline__ double wd_raw_bf16(u32 h) {
    return __hiloint2double((int)(((h & 0x8000u) << 16) | ((h & 0x7FFFu) << 13)), 0);
}

// Element j (0..15) of a block held as uint4 words (16 e4m3 bytes or 8 words of 2 bf16).
template <bool BF>
__device__ __forceinline__ double wd_elem(const uint4* blk, int j) {
    if (BF) {
        const uint4 v = blk[j >> 3];
        const u32 wds[4] = {v.x, v.y, v.z, v.w};
        const u32 wv = wds[(j >> 1) & 3];
        return wd_raw_bf16((j & 1) ? (wv >> 16) : (wv & 0xFFFFu));
    } else {
        const uint4 v = blk[0];
        const u32 wds[4] = {v.x, v.y, v.z, v.w};
        return wd_raw_e4m3((wds[j >> 2] >> (8 * (j & 3))) & 0xFFu);
    }
}

template <int R, int NC, bool BF>
__device__ __forceinline__ void fp8_bf16_gemv_warp(const uint4* __restrict__ w, const float* __restrict__ scale,
                                               int N, int K, const double* __restrict__ ac,
                                               const double* __restrict__ p2, int r0, int m, int n0,
                                               u16* __restrict__ out, long long ldo, float* sroot) {
    constexpr int WB = BF ? 2 : 1;  // uint4 per 16-element block
    const int lane = threadIdx.x & 31;
    const int B = K >> 4, C = (B + 63) >> 6;
    const long long row_u4 = (long long)K * (BF ? 2 : 1) / 16;  // uint4 per weight row
    const double unscale = BF ? 0x1p896 : 0x1p1016;
    for (int ch = 0; ch < C; ++ch) {
        const int b0 = ch * 64 + 2 * lane;
        uint4 wv[NC][2 * WB];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const int n = n0 + c;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int u = 0; u < WB; ++u)
                    wv[c][h * WB + u] = (n < N && b0 + h < B)
                                            ? __ldg(w + (long long)n * row_u4 + (long long)(b0 + h) * WB + u)
                                            : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = r0 + r;
            if (row >= m) continue;  // warp-uniform
            float v[2][NC];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int b = b0 + h;
                double acc[NC];
#pragma unroll
                for (int c = 0; c < NC; ++c) acc[c] = 0.0;
                if (b < B) {
                    const double2* a = reinterpret_cast<const double2*>(ac + (long long)row * K + b * 16);
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj) {
                        const double2 av = __ldg(a + jj);
#pragma unroll
                        for (int c = 0; c < NC; ++c) {
                            acc[c] = fma(wd_elem<BF>(&wv[c][h * WB], 2 * jj), av.x, acc[c]);
                            acc[c] = fma(wd_elem<BF>(&wv[c][h * WB], 2 * jj + 1), av.y, acc[c]);
                        }
                    }
                    const double s = __ldg(p2 + (long long)row * B + b);
#pragma unroll
                    for (int c = 0; c < NC; ++c) v[h][c] = ieee_d2f(__dmul_rn(__dmul_rn(acc[c], unscale), s));
                } else {
#pragma unroll
                    for (int c = 0; c < NC; ++c) v[h][c] = -0.0f;
                }
            }
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const float t = warp_tree_ieee(ieee_add(v[0][c], v[1][c]));
                if (lane == 0) sroot[(c * R + r) * 64 + ch] = t;
            }
        }
    }
    __syncwarp();
    store_chunk_roots<R, NC>(sroot, C, lane, r0, m, n0, N, scale, out, ldo);
}

#define FP8_BF16_GEMV(NAME, BF, R, NC)                                                                 \
    extern "C" __global__ void __launch_bounds__(128) NAME##_r##R(                                  \
        const uint4* __restrict__ w, const float* __restrict__ scale, int N, int K,                \
        const double* __restrict__ ac, const double* __restrict__ p2, int m, u16* __restrict__ out, \
        long long ldo) {                                                                           \
        __shared__ float sroot[4][NC * R * 64];                                                    \
        const int warp = threadIdx.x >> 5;                                                         \
        const int n0 = (blockIdx.x * 4 + warp) * NC;                                               \
        fp8_bf16_gemv_warp<R, NC, BF>(w, scale, N, K, ac, p2, blockIdx.y * R, m, n0, out, ldo, sroot[warp]); \
    }

// @instances FP8_BF16_GEMV   (lines generated from metrale/cuda/configs.py)

// ---- The generic kernels on the block-value chain: {fp8,bf16}_chain_r{1,2,4} ----
//
// docs/chain-revision.md (chain.project_chain's bits; tile.CHAIN routes them where the FP8 chain
// tile does not take the rows, and BF16 at every row count): the block values of the GEMV above
// (the exact float64 block dot of the uploaded weight values with fp8_bf16_a16_prep's codes, one
// rounding to f32) from FP8 weights rounded to 11-bit block codes (chain.fp8_effective, so the
// value is f32(S_b 2^(E_b + F_b - 24)) of the revision's codes) or BF16's 24-bit ones, added
// into a chain per part, c = c + v_b from -0.0, then the tree over parts:
//   * a run is one (column, part), one thread's, its blocks in K order; a CTA round is the runs
//     of C = CHAIN_GENERIC_THREADS / Q whole columns, part-major (thread t: part t / C of column t % C,
//     threads from C Q on idle: a warp's lanes read the same codes); rounds persistent over
//     grid.x, groups of R rows over grid.y;
//   * FP8 weights as the chain tile's bytes (fp8_bf16.py tile_fp8_bytes: the rounded e4m3,
//     row-major), BF16 row-major bf16 bits;
//   * the tree over parts in shared memory as q2_0_gemv.cu's q2_0_chain_r*; y = bf16(root
//     scale[n]) (FP8, one fp32 multiply) or bf16(root) (BF16).
// Block CHAIN_GENERIC_THREADS, grid (rounds, row groups), no dynamic shared memory.
template <int R, bool BF>
__device__ __forceinline__ void wide_chain_body(const unsigned char* __restrict__ w, const float* __restrict__ scale,
                                                int N, int K, const double* __restrict__ ac,
                                                const double* __restrict__ p2, int m, u16* __restrict__ out,
                                                long long ldo) {
    const int B = K >> 4;
    const ChainRuns runs(B, CHAIN_GENERIC_THREADS);
    const int lq = runs.part, nb = runs.blocks;
    const long long wrow = (long long)K * (BF ? 2 : 1);  // weight bytes per row
    const double unscale = BF ? 0x1p896 : 0x1p1016;
    chain_generic_rounds<R, CHAIN_GENERIC_THREADS>(
        runs, m, N,
        [&](int row0, int n, float (&c)[R]) {
            const int nrun = n < N ? nb : 0;
            const unsigned char* const wr = w + (long long)(n < N ? n : 0) * wrow;
            for (int j = 0; j < nrun; ++j) {
                const int b = 64 * lq + j;
                double wd[16];
                if (BF) {
                    const uint4* blk = (const uint4*)(wr + (long long)b * 32);
                    const uint4 v0 = __ldg(blk), v1 = __ldg(blk + 1);
                    const u32 wv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
                    for (int e = 0; e < 16; ++e) wd[e] = wd_raw_bf16((e & 1) ? (wv[e >> 1] >> 16) : (wv[e >> 1] & 0xFFFFu));
                } else {
                    const uint4 v = __ldg((const uint4*)(wr + (long long)b * 16));
                    const u32 wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (int e = 0; e < 16; ++e) wd[e] = wd_raw_e4m3((wv[e >> 2] >> (8 * (e & 3))) & 0xFFu);
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int row = row0 + r < m ? row0 + r : row0;
                    const double2* a = reinterpret_cast<const double2*>(ac + (long long)row * K + b * 16);
                    double acc = 0.0;
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj) {
                        const double2 av = __ldg(a + jj);
                        acc = fma(wd[2 * jj], av.x, acc);
                        acc = fma(wd[2 * jj + 1], av.y, acc);
                    }
                    const double sc = __ldg(p2 + (long long)row * B + b);
                    c[r] = ieee_add(c[r], ieee_d2f(__dmul_rn(__dmul_rn(acc, unscale), sc)));
                }
            }
        },
        [&](int row, int col, float root) {
            out[(long long)row * ldo + col] = f32_to_bf16(BF ? root : ieee_mul(root, scale[col]));
        });
}

#define WIDE_CHAIN(R)                                                                                 \
    extern "C" __global__ void __launch_bounds__(CHAIN_GENERIC_THREADS) fp8_chain_r##R(                        \
        const unsigned char* __restrict__ w, const float* __restrict__ scale, int N, int K,           \
        const double* __restrict__ ac, const double* __restrict__ p2, int m, u16* __restrict__ out,    \
        long long ldo) {                                                                              \
        wide_chain_body<R, false>(w, scale, N, K, ac, p2, m, out, ldo);                               \
    }                                                                                                 \
    extern "C" __global__ void __launch_bounds__(CHAIN_GENERIC_THREADS) bf16_chain_r##R(                       \
        const unsigned char* __restrict__ w, const float* __restrict__ scale, int N, int K,           \
        const double* __restrict__ ac, const double* __restrict__ p2, int m, u16* __restrict__ out,    \
        long long ldo) {                                                                              \
        wide_chain_body<R, true>(w, scale, N, K, ac, p2, m, out, ldo);                                \
    }

// @instances WIDE_CHAIN

// ---- Decode kernels (m <= 3 rows in one pass): {fp8,bf16}_dec_r{R}_c{NC}_w{W}_p{P}_{h,i} ----
//
// Same arithmetic as the GEMV above (raw weight doubles, exact DFMA block dot, one rounding per
// block value), reorganised for streaming: a 32-block (512-element) chunk per warp step, lane l
// owning block 32 ch + l, so every weight load of a warp is one contiguous 512-byte (FP8) or
// 1 KiB (BF16) run; the CTA's W warps split the chunks (ch = warp, warp + W, ...), so a CTA
// owns NC columns x R rows over all of K and N / NC CTAs fill the GPU even at N = 4096;
// with P = 1 the next chunk's weights are loaded before the current chunk is summed. The
// activation codes come from fp8_bf16_dec_prep in a lane-interleaved layout (each warp load
// 512 contiguous bytes, reused by the NC columns): act 'h' = the high 32-bit word of the
// double c (|c| < 2^15 leaves its low word zero, so the double is rebuilt without a
// conversion), act 'i' = int16 c (half the bytes, one I2F.F64 per element and row per warp).
// The 32 block values of a chunk follow the contract's tree over lanes (xor 1, 2, ..., 16) as
// a butterfly that halves the values each lane carries at every step while their number is
// even (each add is the same pair sum: fp32 add is commutative); chunk roots go to shared
// memory and the padded tree over C <= 128 chunk roots finishes (roots_tree128).
//
//   fp8_bf16_dec_prep(x, ldx, K, m, C, mode, act, pe)
//       grid ceil(32 C m / 256), block 256; one thread per (row r, block b < 32 C):
//       mode 0: act u32 [m][C][4][32 lanes][4] (element 4q + e of block 32 ch + l at
//       ((r C + ch) 4 + q) 32 + l, component e), the high word of double(c);
//       mode 1: act u16 [m][C][2][32][8] (element 8q + e), int16 c;
//       pe int [m][C][32]: high word of 2^(E-14), NaN for a non-finite block, 0 for padding.
//   {fp8,bf16}_dec_r{R}_c{NC}_w{W}_p{P}_{h,i}(w, scale, N, K, act, pe, m, out, ldo)
//       grid (ceil(N / NC), ceil(m / R)), block 32 W; shared NC R 128 floats of chunk roots.
//   {fp8,bf16}c_dec_r{R}_c{NC}_w{W}_p{P}_{h,i} (the same arguments): on the block-value chain
//       (docs/chain-revision.md; tile.CHAIN routes BF16's at m <= 3, FP8's where
//       configs.FP8_CHAIN_DEC): the same block values (FP8 from the chain tile's bytes,
//       tile_fp8_bytes, loaded as the tree's) stored in dynamic shared memory, NC R rows of
//       S Q floats, S = DEC_PART_FLOATS (part p's block i at S p + i); after a barrier thread
//       v Q + p (v < NC R, p < Q) reads part p's values as float4 (the 8 threads of a quarter
//       warp, parts S = 68 floats apart, on distinct banks) and adds them in K order from -0.0
//       (c = c + v_b), its root to the shared roots, and roots_tree128 is the padded tree over
//       the Q parts. Dynamic shared memory: 4 NC R S Q bytes.
//   Both are PDL-capable (metrale/cuda/pdl.py): pdl_trigger, then pdl_wait, before any memory
//   access (with DEC_W_EARLY: but each warp's first weight load).

__device__ __forceinline__ u32 u4_word(const uint4& v, int i) {
    return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// The A16 codes c of block b of row r and the high word of 2^(E - 14) as a double (NaN for a
// block holding Inf/NaN); zero codes and 0 where !valid (padding).
__device__ __forceinline__ int a16_block_hi(const u16* __restrict__ x, long long ldx, int r, int b, bool valid,
                                            int (&c)[16]) {
    if (!valid) {
#pragma unroll
        for (int j = 0; j < 16; ++j) c[j] = 0;
        return 0;
    }
    int E;
    bool finite;
    a16_block_int(x + (long long)r * ldx + b * 16, c, E, finite);
    return finite ? (E - 14 + 1023) << 20 : 0x7FF80000;
}

extern "C" __global__ void __launch_bounds__(256) fp8_bf16_dec_prep(
    const u16* __restrict__ x, long long ldx, int K, int m, int C, int mode, u32* __restrict__ act,
    int* __restrict__ pe) {
    pdl_trigger();  // launched programmatically (metrale/cuda/pdl.py): no access before pdl_wait
    pdl_wait();
    const int B = K >> 4, BP = C * 32;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)m * BP) return;
    const int r = (int)(t / BP), b = (int)(t % BP), ch = b >> 5, l = b & 31;
    int c[16];
    const int p = a16_block_hi(x, ldx, r, b, b < B, c);
    pe[t] = p;
    uint4* o = reinterpret_cast<uint4*>(act);
    if (mode == 0) {
#pragma unroll
        for (int q = 0; q < 4; ++q)
            o[(((long long)r * C + ch) * 4 + q) * 32 + l] =
                make_uint4(__double2hiint((double)c[4 * q]), __double2hiint((double)c[4 * q + 1]),
                           __double2hiint((double)c[4 * q + 2]), __double2hiint((double)c[4 * q + 3]));
    } else {
        u32 h[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) h[e] = ((u32)c[2 * e] & 0xFFFFu) | ((u32)c[2 * e + 1] << 16);
#pragma unroll
        for (int q = 0; q < 2; ++q)
            o[(((long long)r * C + ch) * 2 + q) * 32 + l] = make_uint4(h[4 * q], h[4 * q + 1], h[4 * q + 2], h[4 * q + 3]);
    }
}

// The activation code of element j (as a double) from a block's act words.
template <int ACT>
__device__ __forceinline__ double dec_act(const uint4 (&a)[4], int j) {
    if (ACT == 0) return __hiloint2double((int)u4_word(a[j >> 2], j & 3), 0);
    const u32 wv = u4_word(a[j >> 3], (j >> 1) & 3);
    return __int2double_rn((j & 1) ? ((int)wv >> 16) : (int)(short)(wv & 0xFFFFu));
}

// The tree over C <= 128 chunk roots sr[0 .. C) padded with -0.0: lane l sums leaves 4l .. 4l+3
// (levels 1, 2), then warp_tree_ieee (levels 3-7); every subtree of padding is -0.0, so this is
// the padded tree over C leaves. Every lane returns the root.
__device__ __forceinline__ float roots_tree128(const float* sr, int C, int lane) {
    float a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = 4 * lane + i < C ? sr[4 * lane + i] : -0.0f;
    return warp_tree_ieee(ieee_add(ieee_add(a[0], a[1]), ieee_add(a[2], a[3])));
}

// The contract's 32-leaf tree (leaf = lane) of V values per lane at once. At step d = 1, 2, ...,
// 16 lanes l and l ^ d hold adjacent subtrees; while the count is even a lane keeps half of
// its values (the lower half when bit d of l is clear) and adds its partner's sums of them.
// On return x[0 .. cnt) hold the roots of values off + i; lanes with (l & dup) != 0 hold
// copies.
template <int V>
__device__ __forceinline__ void tree_butterfly(float (&x)[V], int lane, int& off, int& cnt, int& dup) {
    cnt = V;
    off = 0;
    dup = 0;
#pragma unroll
    for (int s = 0; s < 5; ++s) {
        const int d = 1 << s;
        const bool up = (lane & d) != 0;
        if (cnt >= 2 && (cnt & 1) == 0) {
            const int h = cnt >> 1;
#pragma unroll
            for (int i = 0; i < V / 2; ++i) {
                if (i < h) {
                    const float send = up ? x[i] : x[i + h];
                    const float keep = up ? x[i + h] : x[i];
                    x[i] = ieee_add(keep, __shfl_xor_sync(0xffffffffu, send, d));
                }
            }
            if (up) off += h;
            cnt = h;
        } else {
#pragma unroll
            for (int i = 0; i < V; ++i)
                if (i < cnt) x[i] = ieee_add(x[i], __shfl_xor_sync(0xffffffffu, x[i], d));
            dup |= d;
        }
    }
}

// The weight words of block b of columns n0 .. n0 + NC - 1 (zeros past N or B); FP8 on the chain
// reads the chain tile's bytes, the same 16 bytes per block.
template <int NC, bool BF>
__device__ __forceinline__ void dec_load_w(uint4 (&wv)[NC][BF ? 2 : 1], const uint4* __restrict__ w, int N, int B,
                                           int n0, int b) {
    constexpr int WB = BF ? 2 : 1;
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int u = 0; u < WB; ++u) {
            const uint4* p = w + ((long long)(n0 + c) * B + b) * WB + u;
            // BF16: a lane's two loads share its 32-byte sector, so they go through L1.
            wv[c][u] = (n0 + c < N && b < B) ? (BF ? __ldg(p) : ld_stream16(p)) : make_uint4(0u, 0u, 0u, 0u);
        }
}

// @defines FP8_BF16_DEC (DEC_PART_FLOATS, the chain form's floats per part; DEC_W_EARLY, the first weight load before the PDL wait; from metrale/cuda/configs.py)

template <int R, int NC, int W, bool P, bool BF, int ACT, bool CH>
__device__ __forceinline__ void dec_body(const uint4* __restrict__ w, const float* __restrict__ scale, int N, int K,
                                         const uint4* __restrict__ act, const int* __restrict__ pe, int m,
                                         u16* __restrict__ out, long long ldo, float* sroot, float* sval) {
    constexpr int WB = BF ? 2 : 1;
    constexpr int AQ = ACT == 0 ? 4 : 2;  // uint4 of activation codes per block
    constexpr int V = NC * R;
    pdl_trigger();  // launched programmatically (metrale/cuda/pdl.py): no access before pdl_wait
    if (!DEC_W_EARLY) pdl_wait();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int B = K >> 4, C = (B + 31) >> 5, Q = (B + 63) >> 6;
    const int n0 = blockIdx.x * NC, r0 = blockIdx.y * R;
    const double unscale = BF ? 0x1p896 : 0x1p1016;
    uint4 wc[NC][WB], wn[NC][WB];
    if (warp < C) dec_load_w<NC, BF>(wc, w, N, B, n0, warp * 32 + lane);
    // DEC_W_EARLY: that first weight load before the PDL wait (no launch of the FFN writes
    // weights), the activations after it
    if (DEC_W_EARLY) pdl_wait();
    for (int ch = warp; ch < C; ch += W) {
        const int b = ch * 32 + lane;
        if (!P && ch != warp) dec_load_w<NC, BF>(wc, w, N, B, n0, b);
        if (P && ch + W < C) dec_load_w<NC, BF>(wn, w, N, B, n0, b + 32 * W);
        uint4 a[R][4];
        double s[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const bool live = r0 + r < m;  // warp-uniform
            const long long base = (long long)(r0 + r) * C + ch;
#pragma unroll
            for (int q = 0; q < 4; ++q)
                a[r][q] = (live && q < AQ) ? __ldg(act + (base * AQ + q) * 32 + lane) : make_uint4(0u, 0u, 0u, 0u);
            s[r] = __hiloint2double(live ? __ldg(pe + base * 32 + lane) : 0, 0);
        }
        // element-major: R activation doubles live at a time, NC R accumulators
        double acc[NC][R];
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
            for (int r = 0; r < R; ++r) acc[c][r] = 0.0;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            double ad[R];
#pragma unroll
            for (int r = 0; r < R; ++r) ad[r] = dec_act<ACT>(a[r], j);
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const double wd = wd_elem<BF>(wc[c], j);
#pragma unroll
                for (int r = 0; r < R; ++r) acc[c][r] = fma(wd, ad[r], acc[c][r]);
            }
        }
        float x[V];
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
            for (int r = 0; r < R; ++r)
                x[c * R + r] = b < B ? ieee_d2f(__dmul_rn(__dmul_rn(acc[c][r], unscale), s[r])) : -0.0f;
        if constexpr (CH) {
            if (b < B) {
#pragma unroll
                for (int v = 0; v < V; ++v) sval[v * DEC_PART_FLOATS * Q + DEC_PART_FLOATS * (b >> 6) + (b & 63)] = x[v];
            }
        } else {
            int off, cnt, dup;
            tree_butterfly<V>(x, lane, off, cnt, dup);
            if ((lane & dup) == 0) {
#pragma unroll
                for (int i = 0; i < V; ++i)
                    if (i < cnt) sroot[(off + i) * 128 + ch] = x[i];
            }
        }
        if (P && ch + W < C) {
#pragma unroll
            for (int c = 0; c < NC; ++c)
#pragma unroll
                for (int u = 0; u < WB; ++u) wc[c][u] = wn[c][u];
        }
    }
    __syncthreads();
    if constexpr (CH) {  // the chains: thread v Q + p runs part p of (column, row) v
        for (int i = threadIdx.x; i < V * Q; i += 32 * W) {
            const int v = i / Q, p = i - v * Q, nb = min(64, B - 64 * p);
            const float4* sv = reinterpret_cast<const float4*>(sval + (v * Q + p) * DEC_PART_FLOATS);
            float c = -0.0f;
            int j = 0;
            for (; j + 4 <= nb; j += 4) {  // K order
                const float4 q = sv[j >> 2];
                c = ieee_add(ieee_add(ieee_add(ieee_add(c, q.x), q.y), q.z), q.w);
            }
            for (; j < nb; ++j) c = ieee_add(c, reinterpret_cast<const float*>(sv)[j]);  // a last part's rest
            sroot[v * 128 + p] = c;
        }
        __syncthreads();
    }
    for (int v = warp; v < V; v += W) {
        const int c = v / R, r = v % R, row = r0 + r, n = n0 + c;
        if (row >= m || n >= N) continue;  // warp-uniform
        const float t = roots_tree128(sroot + v * 128, CH ? Q : C, lane);
        if (lane == 0) out[(long long)row * ldo + n] = f32_to_bf16(scale ? ieee_mul(t, __ldg(scale + n)) : t);
    }
}

#define FP8_BF16_DEC(NAME, BF, R, NC, W, P, ACT, A, CH)                                                   \
    extern "C" __global__ void __launch_bounds__(32 * W) NAME##_dec_r##R##_c##NC##_w##W##_p##P##_##A(     \
        const uint4* __restrict__ w, const float* __restrict__ scale, int N, int K,                       \
        const uint4* __restrict__ act, const int* __restrict__ pe, int m, u16* __restrict__ out,          \
        long long ldo) {                                                                                  \
        __shared__ float sroot[NC * R * 128];                                                             \
        extern __shared__ __align__(16) float sval[];                                                     \
        dec_body<R, NC, W, P, BF, ACT, CH>(w, scale, N, K, act, pe, m, out, ldo, sroot, sval);            \
    }

// @instances FP8_BF16_DEC

// ---- Integer tensor-core GEMM (w8a16_gemm / dense_gemm for m >= MMA_MIN_M below the prefill
// GEMM of fp8_bf16_mma.cu, which reads the same weight layout) ----
//
// Exactness (docs/arithmetic.md, FP8 and BF16 weights). The 24-bit weight code c_w = 2^16 w2 +
// 2^8 w1 + w0 (w0, w1 u8, w2 s8: |c_w| < 2^23) and the A16 code c_a = 2^8 a1 + a0 (a0 u8, a1 s8:
// |c_a| <= 32640) are split into 8-bit limbs that metrale/cuda/fp8_bf16.py (weights, at upload) and
// fp8_bf16_mma_prep (activations) store in mma.sync fragment order. mma.sync.m16n8k16 has k = 16 =
// one block, so every accumulator is a limb-pair block dot P_ij = sum_j w_i a_j (|P| < 2^21).
// With Q_L = sum_{i+j=L} P_ij, H = 2^8 Q_3 + Q_2 and L = 2^8 Q_1 + Q_0 are int32-exact (the
// shift is applied to the accumulator between MMAs: |H| < 2^27, |L| < 2^30), and
// S_b = 2^16 H + L (|S_b| < 2^43) is formed exactly in float64 (each int32 to double by the
// magic-number 2^52 + 2^31 subtraction, then one exact fma). v_b = f32((S_b 2^(F-22)) 2^(E-14)):
// two exact float64 power-of-two multiplies (no double underflow or overflow: |exponents| < 300)
// and ONE rounding to f32 by cvt.rn (ieee_d2f: f32 subnormals and overflow to Inf exact), the
// reference's ldexp + astype. The powers of two travel as the high words of doubles; a
// non-finite activation block has the high word of NaN (v_b = NaN), a padding row that of +0.
//
// Tree: a step is 8 aligned blocks summed in registers as the contract's 8-leaf subtree; a run is
// 8 aligned steps (64 blocks) whose step roots go through a binary counter (one slot per level);
// the counter's slots, combined from the lowest level upward (each slot the left operand), are
// the padded subtree's root because every padded subtree is -0.0 and x + (-0.0) = x. Warps take
// runs round-robin (split K) and park run roots in shared memory; warp 0 combines them the same
// way. Blocks B..Bp-1 (padding to a multiple of 8) are -0.0 leaves. On the block-value chain
// (bf16c_mma_nt*, docs/chain-revision.md) a run is one chain part: its block values are added in
// K order from -0.0 (c <- c + v_b) instead of the counter, and the run roots' counter is the
// padded tree over parts.
//
// Kernels:
//   fp8_bf16_mma_prep(x, ldx, K, m, MT, Bp, act, pa)
//       grid ceil(8 MT * Bp / 256), block 256; one thread per (row r < 8 MT, block b < Bp):
//       act u32 [MT][Bp][32 lanes][2] (lane 4g+t: words lo, hi of elements 4t..4t+3 of row
//       8 tile + g), pa int [Bp][8 MT] = high word of the double 2^(E-14) (NaN: non-finite
//       block; 0: padding).
//   {fp8,bf16}_mma_nt{1,2,4}(wf, pw, scale, act, pa, N, B, Bp, m, out, ldo)
//       wf u32 [N16][Bp][32][6] (words limb0 rows g, g+8; limb1; limb2), pw int [N16][Bp][16]
//       = high word of the double 2^(F-22). grid (ceil(N / 16), ceil(m / (8 NT))), block
//       32 FP8_BF16_MMA_WARPS; the CTA computes 16 columns x 8 NT rows, its warps split K by runs.
//       Dynamic shared memory: runs * NT * 4 * 32 floats.
//   bf16c_mma_nt{1,2,4}(the same arguments)
//       BF16 on the block-value chain (tile.CHAIN routes it; the chain's form of the run above).

// @defines FP8_BF16_MMA (FP8_BF16_MMA_WARPS from metrale/cuda/configs.py)
#define FP8_BF16_MMA_LEVELS 8

extern "C" __global__ void __launch_bounds__(256) fp8_bf16_mma_prep(
    const u16* __restrict__ x, long long ldx, int K, int m, int MT, int Bp, u32* __restrict__ act,
    int* __restrict__ pa) {
    const int B = K >> 4;
    const long long it = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= (long long)MT * 8 * Bp) return;
    const int r = (int)(it / Bp), b = (int)(it % Bp);
    int c[16];
    const int p = a16_block_hi(x, ldx, r, b, r < m && b < B, c);
    const int tile = r >> 3, g = r & 7;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        u32 lo = 0u, hi = 0u;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            lo |= (u32)(c[4 * t + q] & 0xFF) << (8 * q);
            hi |= (u32)((c[4 * t + q] >> 8) & 0xFF) << (8 * q);
        }
        const long long base = (((long long)tile * Bp + b) * 32 + 4 * g + t) * 2;
        act[base] = lo;
        act[base + 1] = hi;
    }
    pa[(long long)b * MT * 8 + r] = p;
}

// mma.sync.m16n8k16 s32 += A (16 x 16, row) * B (16 x 8, col), 8-bit operands: SA / SB say
// whether A / B are signed (s8) or unsigned (u8).
#define FP8_BF16_MMA_ASM(TA, TB)                                                                   \
    asm("mma.sync.aligned.m16n8k16.row.col.s32." TA "." TB ".s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "     \
        "{%0,%1,%2,%3};"                                                                           \
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                           \
        : "r"(a0), "r"(a1), "r"(b))
template <bool SA, bool SB>
__device__ __forceinline__ void mma_i8(int (&d)[4], u32 a0, u32 a1, u32 b) {
    if constexpr (SA && SB) {
        FP8_BF16_MMA_ASM("s8", "s8");
    } else if constexpr (SA) {
        FP8_BF16_MMA_ASM("s8", "u8");
    } else if constexpr (SB) {
        FP8_BF16_MMA_ASM("u8", "s8");
    } else {
        FP8_BF16_MMA_ASM("u8", "u8");
    }
}

// int32 -> double exactly: 2^52 + 2^31 + x read back, minus 2^52 + 2^31.
__device__ __forceinline__ double i32_to_f64(int x) {
    return __dsub_rn(__hiloint2double(0x43300000, x ^ (int)0x80000000), 4503601774854144.0);
}

// Push a subtree root x (level `base` of a binary counter holding cnt roots) into lv.
template <int NT>
__device__ __forceinline__ void counter_push(float (&lv)[FP8_BF16_MMA_LEVELS][NT][4], int cnt, float (&x)[NT][4]) {
    int c = cnt, l = 0;
    while (c & 1) {
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int q = 0; q < 4; ++q) x[i][q] = ieee_add(lv[l][i][q], x[i][q]);
        c >>= 1;
        ++l;
    }
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) lv[l][i][q] = x[i][q];
}

// The padded tree's root from a counter holding cnt >= 1 roots.
template <int NT>
__device__ __forceinline__ void counter_root(const float (&lv)[FP8_BF16_MMA_LEVELS][NT][4], int cnt, float (&res)[NT][4]) {
    bool have = false;
    for (int l = 0; l < FP8_BF16_MMA_LEVELS; ++l) {
        if (!((cnt >> l) & 1)) continue;
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int q = 0; q < 4; ++q) res[i][q] = have ? ieee_add(lv[l][i][q], res[i][q]) : lv[l][i][q];
        have = true;
    }
}

template <int NT, bool FP8, bool CH = false>
__device__ __forceinline__ void wide_mma_body(const uint2* __restrict__ wf, const int* __restrict__ pw,
                                              const float* __restrict__ scale, const uint2* __restrict__ act,
                                              const int* __restrict__ pa, int N, int B, int Bp, int m,
                                              u16* __restrict__ out, long long ldo) {
    extern __shared__ float red[];  // [runs][NT][4][32 lanes]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n16 = blockIdx.x;
    const int tile0 = blockIdx.y * NT;
    const int ntv = min(NT, (m - tile0 * 8 + 7) >> 3);
    const int rows8 = ((m + 7) >> 3) * 8;
    const int steps = Bp >> 3, runs = (steps + 7) >> 3;
    float lv[FP8_BF16_MMA_LEVELS][NT][4];
    for (int run = warp; run < runs; run += FP8_BF16_MMA_WARPS) {
        const int s_end = min(steps, run * 8 + 8);
        int cnt = 0;
        float ch[NT][4];  // CH: the run's chains (a run is one 64-block part)
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int q = 0; q < 4; ++q) ch[i][q] = -0.0f;
        for (int s = run * 8; s < s_end; ++s, ++cnt) {
            float p0[NT][4], p1[NT][4], p2[NT][4];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int b = s * 8 + j;
                const uint2* wp = wf + ((long long)(n16 * Bp + b) * 32 + lane) * 3;
                const uint2 w0 = __ldg(wp), w1 = __ldg(wp + 1), w2 = __ldg(wp + 2);
                const int* pwb = pw + (long long)(n16 * Bp + b) * 16;
                const double pwg = __hiloint2double(__ldg(pwb + g), 0), pwg8 = __hiloint2double(__ldg(pwb + g + 8), 0);
                float v[NT][4];
#pragma unroll
                for (int i = 0; i < NT; ++i) {
#pragma unroll
                    for (int q = 0; q < 4; ++q) v[i][q] = -0.0f;
                    if (i < ntv && b < B) {
                        const uint2 a = __ldg(act + ((long long)(tile0 + i) * Bp + b) * 32 + lane);
                        int H[4] = {0, 0, 0, 0}, L[4] = {0, 0, 0, 0};
                        mma_i8<true, true>(H, w2.x, w2.y, a.y);
                        mma_i8<false, false>(L, w1.x, w1.y, a.x);
#pragma unroll
                        for (int q = 0; q < 4; ++q) H[q] <<= 8;
                        mma_i8<false, true>(L, w0.x, w0.y, a.y);
                        mma_i8<true, false>(H, w2.x, w2.y, a.x);
#pragma unroll
                        for (int q = 0; q < 4; ++q) L[q] <<= 8;
                        mma_i8<false, true>(H, w1.x, w1.y, a.y);
                        mma_i8<false, false>(L, w0.x, w0.y, a.x);
                        const int2 ph = __ldg(reinterpret_cast<const int2*>(pa + (long long)b * rows8 + (tile0 + i) * 8 + 2 * t));
                        const double pa0 = __hiloint2double(ph.x, 0), pa1 = __hiloint2double(ph.y, 0);
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            const double sb = __fma_rn(i32_to_f64(H[q]), 65536.0, i32_to_f64(L[q]));
                            v[i][q] = ieee_d2f(__dmul_rn(__dmul_rn(sb, (q & 2) ? pwg8 : pwg), (q & 1) ? pa1 : pa0));
                        }
                    }
                }
#pragma unroll
                for (int i = 0; i < NT; ++i)
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const float x = v[i][q];
                        if (CH) {
                            ch[i][q] = ieee_add(ch[i][q], x);
                        } else if (j == 0 || j == 2 || j == 4 || j == 6) {
                            p0[i][q] = x;
                        } else if (j == 1 || j == 5) {
                            p1[i][q] = ieee_add(p0[i][q], x);
                        } else if (j == 3) {
                            p2[i][q] = ieee_add(p1[i][q], ieee_add(p0[i][q], x));
                        } else {
                            p2[i][q] = ieee_add(p2[i][q], ieee_add(p1[i][q], ieee_add(p0[i][q], x)));
                        }
                    }
            }
            if (!CH) counter_push<NT>(lv, cnt, p2);
        }
        float root[NT][4];
        if (CH) {
#pragma unroll
            for (int i = 0; i < NT; ++i)
#pragma unroll
                for (int q = 0; q < 4; ++q) root[i][q] = ch[i][q];
        } else {
            counter_root<NT>(lv, cnt, root);
        }
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int q = 0; q < 4; ++q) red[((run * NT + i) * 4 + q) * 32 + lane] = root[i][q];
    }
    __syncthreads();
    if (warp != 0) return;
    for (int run = 0; run < runs; ++run) {
        float x[NT][4];
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int q = 0; q < 4; ++q) x[i][q] = red[((run * NT + i) * 4 + q) * 32 + lane];
        counter_push<NT>(lv, run, x);
    }
    float res[NT][4];
    counter_root<NT>(lv, runs, res);
#pragma unroll
    for (int i = 0; i < NT; ++i) {
        if (i >= ntv) continue;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int row = (tile0 + i) * 8 + 2 * t + (q & 1);
            const int n = n16 * 16 + g + 8 * (q >> 1);
            if (row < m && n < N)
                out[(long long)row * ldo + n] = f32_to_bf16(FP8 ? ieee_mul(res[i][q], __ldg(scale + n)) : res[i][q]);
        }
    }
}

#define FP8_BF16_MMA(NAME, FP8, NT, CH)                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * FP8_BF16_MMA_WARPS) NAME##_nt##NT(                  \
        const uint2* __restrict__ wf, const int* __restrict__ pw, const float* __restrict__ scale,    \
        const uint2* __restrict__ act, const int* __restrict__ pa, int N, int B, int Bp, int m,       \
        u16* __restrict__ out, long long ldo) {                                                      \
        wide_mma_body<NT, FP8, CH>(wf, pw, scale, act, pa, N, B, Bp, m, out, ldo);                   \
    }

// @instances FP8_BF16_MMA   (lines generated from metrale/cuda/configs.py)
