// metrale/cuda/kernels/w8a8.cu -- the W8A8 arm (int8 weights x per-row int8 activations).
//
// Contract: CONTRACT.md §4 (A8: vLLM dynamic per-token int8) and §5.5 (W8A8: S over all of K
// in int32, y = bf16((f32(S) * s_a) * s_w[n]), no tree); §6 (act_mul: the shipped SiLU table).
//
// Kernels (every pointer to bf16 is uint16 bits; strides in elements):
//   w8a8_quantize(x, ldx, K, q, scale)
//       grid (m), block 256. Row r: amax = max|x|, s = amax/127, inv = 127/amax (0 when
//       amax == 0), q = sat_int8(rne(x * inv)); a row holding Inf/NaN: q = 0, s = NaN.
//   w8a8_gemv_r{1,2,4,8,16,32}(w, sw, N, K, q, ldq, sa, m, out, ldo)
//       grid (ceil(N / (4 * NC)), ceil(m / R)), block 128 (4 warps). Warp = NC output columns x
//       R rows; lane l streams 16 weight bytes at k = 16 l + 512 i of each column (coalesced
//       512-byte rows), dp4a into int32 (exact), warp shfl_xor reduction (exact).
//   w8a8_silu_quant_gemv(gate, ldg, up, ldu, table, w, sw, N, K, m, out, ldo, G)
//       grid (ceil(N / 32)), block 256 (8 warps x NC = 4 columns), dynamic smem G * K + 64 B.
//       The fused launch of dense_ffn_w8a8.rs: for each group of G <= 8 rows every CTA
//       computes h = bf16(silu[gate] * f32(up)) twice (pass 1: row amax; pass 2: int8 codes
//       into shared memory), then runs the GEMV above on its columns reading the codes from
//       shared memory. Identical arithmetic to w8a8_quantize + w8a8_gemv.
//
// Build: --fmad=false; every fp32 step is an inline-PTX ieee_mul/ieee_div (common.cuh): exact
// IEEE with subnormals whatever -ftz the compiler was given; zero tests are on the bits.

#include "common.cuh"

typedef unsigned short u16;
typedef unsigned int u32;

__device__ __forceinline__ float w8_bf16_f32(u32 b) { return bf16_to_f32((u16)b); }
#define w8_f32_bf16 f32_to_bf16

// ---- A8 row parameters (CONTRACT §4) ----
// amax_bits: max of (bits & 0x7FFF) over the row's bf16 values; bad: the row holds Inf/NaN.
__device__ __forceinline__ void w8_row_params(u32 amax_bits, int bad, float* s, float* inv) {
    float amax = w8_bf16_f32(amax_bits);
    if (bad) {
        *s = __uint_as_float(0x7FC00000u);
        *inv = 0.0f;
        return;
    }
    *s = ieee_div(amax, 127.0f);
    *inv = (amax_bits == 0u) ? 0.0f : ieee_div(127.0f, amax);
}

// q = saturate_int8(rne(x * inv)); NaN (0 * Inf for a subnormal amax) -> 0 as numpy's cast.
__device__ __forceinline__ u32 w8_q(u32 xbits, float inv) {
    float p = ieee_mul(w8_bf16_f32(xbits), inv);
    int q = __float2int_rn(p);  // NaN -> 0, +-Inf -> INT_MAX/INT_MIN
    q = max(-128, min(127, q));
    return (u32)(q & 0xFF);
}

// block-wide max / or over blockDim.x threads (multiple of 32); red: >= 64 u32 of smem.
__device__ __forceinline__ void w8_block_reduce(u32* amax, int* bad, u32* red) {
    u32 a = *amax;
    int b = *bad;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a = max(a, __shfl_xor_sync(0xffffffffu, a, o));
        b |= __shfl_xor_sync(0xffffffffu, b, o);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
        red[warp] = a;
        red[32 + warp] = (u32)b;
    }
    __syncthreads();
    a = 0;
    b = 0;
    for (int i = 0; i < nw; ++i) {
        a = max(a, red[i]);
        b |= (int)red[32 + i];
    }
    *amax = a;
    *bad = b;
}

__device__ __forceinline__ void w8_scan8(uint4 v, u32* amax, int* bad) {
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        u32 lo = w[i] & 0xFFFFu, hi = w[i] >> 16;
        *amax = max(*amax, max(lo & 0x7FFFu, hi & 0x7FFFu));
        *bad |= ((lo & 0x7F80u) == 0x7F80u) | ((hi & 0x7F80u) == 0x7F80u);
    }
}

__device__ __forceinline__ uint2 w8_quant8(uint4 v, float inv) {
    u32 w[4] = {v.x, v.y, v.z, v.w};
    u32 o[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        u32 q0 = w8_q(w[i] & 0xFFFFu, inv), q1 = w8_q(w[i] >> 16, inv);
        o[i >> 1] |= (q0 | (q1 << 8)) << (16 * (i & 1));
    }
    return make_uint2(o[0], o[1]);
}

extern "C" __global__ void __launch_bounds__(256) w8a8_quantize(
    const u16* __restrict__ x, long long ldx, int K, signed char* __restrict__ q,
    float* __restrict__ scale) {
    __shared__ u32 red[64];
    __shared__ float sinv;
    const int r = blockIdx.x;
    const u16* xr = x + (long long)r * ldx;
    u32 amax = 0;
    int bad = 0;
    for (int k = threadIdx.x * 8; k < K; k += blockDim.x * 8)
        w8_scan8(*reinterpret_cast<const uint4*>(xr + k), &amax, &bad);
    w8_block_reduce(&amax, &bad, red);
    if (threadIdx.x == 0) {
        float s, inv;
        w8_row_params(amax, bad, &s, &inv);
        scale[r] = s;
        sinv = inv;
    }
    __syncthreads();
    const float inv = sinv;
    signed char* qr = q + (long long)r * K;
    for (int k = threadIdx.x * 8; k < K; k += blockDim.x * 8)
        *reinterpret_cast<uint2*>(qr + k) = w8_quant8(*reinterpret_cast<const uint4*>(xr + k), inv);
}

// ---- the GEMV body: warp = NC columns [n0, n0 + NC) x R rows [r0, r0 + R) ∩ [0, m) ----
template <int R, int NC>
__device__ __forceinline__ void w8_gemv_warp(const signed char* __restrict__ w, const float* __restrict__ sw,
                                             int N, int K, const signed char* qa, long long ldq,
                                             const float* sa, int r0, int m, int n0, u16* out,
                                             long long ldo) {
    const int lane = threadIdx.x & 31;
    int acc[NC][R];
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0;
    for (int k = lane * 16; k < K; k += 512) {
        uint4 wv[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const int n = n0 + c;
            wv[c] = n < N ? __ldg(reinterpret_cast<const uint4*>(w + (long long)n * K + k))
                          : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r0 + r < m) {
                const uint4 av = *reinterpret_cast<const uint4*>(qa + (long long)(r0 + r) * ldq + k);
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    int a = acc[c][r];
                    a = __dp4a((int)wv[c].x, (int)av.x, a);
                    a = __dp4a((int)wv[c].y, (int)av.y, a);
                    a = __dp4a((int)wv[c].z, (int)av.z, a);
                    a = __dp4a((int)wv[c].w, (int)av.w, a);
                    acc[c][r] = a;
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            int a = acc[c][r];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
            acc[c][r] = a;
        }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = r0 + r;
            if (row >= m) continue;
            const float s_a = sa[row];
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const int n = n0 + c;
                if (n < N)
                    out[(long long)row * ldo + n] =
                        w8_f32_bf16(ieee_mul(ieee_mul(__int2float_rn(acc[c][r]), s_a), sw[n]));
            }
        }
    }
}

#define W8A8_GEMV(R, NC)                                                                          \
    extern "C" __global__ void __launch_bounds__(128) w8a8_gemv_r##R(                              \
        const signed char* __restrict__ w, const float* __restrict__ sw, int N, int K,            \
        const signed char* __restrict__ q, long long ldq, const float* __restrict__ sa, int m,    \
        u16* __restrict__ out, long long ldo) {                                                   \
        const int n0 = (blockIdx.x * 4 + (threadIdx.x >> 5)) * NC;                               \
        w8_gemv_warp<R, NC>(w, sw, N, K, q, ldq, sa, blockIdx.y * R, m, n0, out, ldo);            \
    }

W8A8_GEMV(1, 4)
W8A8_GEMV(2, 4)
W8A8_GEMV(4, 4)
W8A8_GEMV(8, 4)
W8A8_GEMV(16, 2)
W8A8_GEMV(32, 1)

// ---- the fused silu -> quantize -> down launch ----
// h = bf16(table[gate] * f32(up)) for 8 packed elements (one uint4 of gate and of up).
__device__ __forceinline__ uint4 w8_silu8(uint4 g, uint4 u, const float* __restrict__ table) {
    u32 gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w}, hw[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u16 h0 = w8_f32_bf16(ieee_mul(__ldg(table + (gw[i] & 0xFFFFu)), w8_bf16_f32(uw[i] & 0xFFFFu)));
        const u16 h1 = w8_f32_bf16(ieee_mul(__ldg(table + (gw[i] >> 16)), w8_bf16_f32(uw[i] >> 16)));
        hw[i] = (u32)h0 | ((u32)h1 << 16);
    }
    return make_uint4(hw[0], hw[1], hw[2], hw[3]);
}

extern "C" __global__ void __launch_bounds__(256) w8a8_silu_quant_gemv(
    const u16* __restrict__ gate, long long ldg_, const u16* __restrict__ up, long long ldu,
    const float* __restrict__ table, const signed char* __restrict__ w, const float* __restrict__ sw,
    int N, int K, int m, u16* __restrict__ out, long long ldo, int G) {
    extern __shared__ __align__(16) unsigned char smem[];
    signed char* sq = reinterpret_cast<signed char*>(smem);  // [G][K] int8 codes
    float* ss = reinterpret_cast<float*>(smem + (long long)G * K);  // [8] row scales
    __shared__ u32 red[64];
    __shared__ float sinv[8];
    constexpr int NC = 4;
    const int n0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * NC;
    for (int g0 = 0; g0 < m; g0 += G) {
        const int gn = min(G, m - g0);
        // pass 1: amax and non-finite flag of each row of h
        for (int r = 0; r < gn; ++r) {
            const u16* gr = gate + (long long)(g0 + r) * ldg_;
            const u16* ur = up + (long long)(g0 + r) * ldu;
            u32 amax = 0;
            int bad = 0;
            for (int k = threadIdx.x * 8; k < K; k += blockDim.x * 8)
                w8_scan8(w8_silu8(*reinterpret_cast<const uint4*>(gr + k),
                                  *reinterpret_cast<const uint4*>(ur + k), table),
                         &amax, &bad);
            w8_block_reduce(&amax, &bad, red);
            if (threadIdx.x == 0) {
                float s, inv;
                w8_row_params(amax, bad, &s, &inv);
                ss[r] = s;
                sinv[r] = inv;
            }
        }
        __syncthreads();
        // pass 2: int8 codes of h into shared memory
        for (int r = 0; r < gn; ++r) {
            const u16* gr = gate + (long long)(g0 + r) * ldg_;
            const u16* ur = up + (long long)(g0 + r) * ldu;
            const float inv = sinv[r];
            for (int k = threadIdx.x * 8; k < K; k += blockDim.x * 8)
                *reinterpret_cast<uint2*>(sq + (long long)r * K + k) =
                    w8_quant8(w8_silu8(*reinterpret_cast<const uint4*>(gr + k),
                                       *reinterpret_cast<const uint4*>(ur + k), table),
                              inv);
        }
        __syncthreads();
        w8_gemv_warp<8, NC>(w, sw, N, K, sq, K, ss, 0, gn, n0, out + (long long)g0 * ldo, ldo);
        __syncthreads();
    }
}
