// metrale/cuda/kernels/w8a8.cuh -- the A8 row quantization and the SiLU step of the W8A8 arm, shared
// by w8a8.cu's kernels and w8a8_wgmma.cu's fused gate + up epilogue.
//
// Contract: arithmetic.md § a8 (vLLM dynamic per-token int8: amax over the row's bf16 values,
// s = amax / 127, inv = 127 / amax, q = sat_int8(rne(x * inv)); a row holding Inf/NaN: q = 0,
// s = NaN) and § act-mul (h = bf16(silu[gate] * f32(up)), the shipped SiLU table). Every fp32
// step is common.cuh's inline-PTX ieee_mul / ieee_div (subnormals kept whatever -ftz).

#pragma once
#include "common.cuh"

typedef unsigned short u16;
typedef unsigned int u32;

__device__ __forceinline__ float w8_bf16_f32(u32 b) { return bf16_to_f32((u16)b); }
#define w8_f32_bf16 f32_to_bf16

// ---- A8 row parameters (arithmetic.md § a8) ----
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

// One bf16 value h (bits) into a row's (amax bits, non-finite flag).
__device__ __forceinline__ void w8_scan1(u32 h, u32* amax, int* bad) {
    *amax = max(*amax, h & 0x7FFFu);
    *bad |= (h & 0x7F80u) == 0x7F80u;
}

__device__ __forceinline__ void w8_scan8(uint4 v, u32* amax, int* bad) {
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        w8_scan1(w[i] & 0xFFFFu, amax, bad);
        w8_scan1(w[i] >> 16, amax, bad);
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

