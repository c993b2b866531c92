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
//       w8a16_gemv / dense_gemv (R = 1) and w8a16_gemm / dense_gemm (grid.y row groups).
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
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int row = r0 + r;
        if (row >= m) continue;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const float* sr = sroot + (c * R + r) * 64;
            const float t = chunk_roots_tree(sr, C, lane);
            const int n = n0 + c;
            if (lane == 0 && n < N)
                out[(long long)row * ldo + n] = f32_to_bf16(scale ? ieee_mul(t, scale[n]) : t);
        }
    }
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
