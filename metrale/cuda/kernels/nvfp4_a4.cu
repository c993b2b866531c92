// nvfp4_a4.cu -- NVFP4 weights x A4 (NVFP4) activations (arithmetic.md § a4, § projection; nvfp4.cuh).
//
// Kernels (extern "C"):
//   w4a4_quantize(x, ldx, m, K, g, inv_g, c16, codes, scales, finite, afac)
//     one thread per (row, 16-block); grid ceil(m*B/64) x 64 threads (small m: many CTAs);
//     PDL-capable (metrale/cuda/pdl.py: pdl_trigger, pdl_wait before any access). The reference's
//     quantize_a4 order in fp32: g = 1/input_scale and inv_g = 1/g, c16 = f32(1/6) (host);
//     s = g*(amax*c16); scale = e4m3(min(s, 448)); d = f32(scale)*inv_g; os = d==0 ? 0 : 1/d;
//     code = 2*e2m1_rne(clamp(x*os, +-6)). A block holding Inf/NaN is treated as zeros and
//     flagged non-finite. Writes codes int8 [m, K], scales e4m3 bits [m, B], finite u8 [m, B],
//     afac f32 [m, B] = finite ? f32(scale) : NaN (what the projection multiplies by).
//   nvfp4_a4_r{1,4}_{e,o}(codes, ldc, afac, m, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1, N, K)
//     as nvfp4_a16_* (nvfp4_gemv.cu) with activation codes from w4a4_quantize; rs =
//     f32(input_scale * weight_scale_2). Dynamic shared memory R * 40 * P bytes.
//   nvfp4_a4f_r{1,2,3,4}(same arguments), the fast path for B % 64 == 0 (codes rows on 16-byte
//     boundaries, as for nvfp4_a4_*; nvfp4.cuh nvfp4_fast_body, MODE 1): rows 0..m-1 in one
//     pass (m <= R), PDL-capable. Block FAST_THREADS = 512 threads (16 warps, one column at a
//     time each), grid (min(ceil(N/16), SMs), 1, 1): one CTA per SM. Dynamic shared memory
//     R * items * 4 * 2304 + 16 * D * 2304 bytes, items = ceil(B / 256): the activation records
//     (codes and afac copied by cp.async), then each warp's ring of D work-item slots (D from
//     metrale/cuda/configs.py NVFP4_A4F_DEPTH). Same bits as nvfp4_a4_* and the MMA kernels.
#include "nvfp4.cuh"

// 2*e2m1_rne(v) for v in [-6, 6] (ties to even; -0 and values rounding to 0 give 0).
__device__ __forceinline__ int e2m1_code2(float v) {
    const float a = fabsf(v);
    int c;
    if (a <= 0.25f) c = 0;
    else if (a < 0.75f) c = 1;
    else if (a <= 1.25f) c = 2;
    else if (a < 1.75f) c = 3;
    else if (a <= 2.5f) c = 4;
    else if (a < 3.5f) c = 6;
    else if (a <= 5.0f) c = 8;
    else c = 12;
    return (__float_as_uint(v) >> 31) ? -c : c;
}

extern "C" __global__ void w4a4_quantize(const unsigned short* x, long long ldx, int m, int K, float g,
                                         float inv_g, float c16, signed char* codes, unsigned char* scales,
                                         unsigned char* finite, float* afac) {
    pdl_trigger();
    pdl_wait();
    const int B = K >> 4;
    const long long it = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= (long long)m * B) return;
    const int r = (int)(it / B), b = (int)(it - (long long)r * B);
    const unsigned short* xb = x + (size_t)r * ldx + (size_t)b * 16;
    float xf[16];
    bool fin = true;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        xf[j] = bf16_to_f32(xb[j]);
        fin = fin && (((xb[j] >> 7) & 0xff) != 0xff);
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        if (!fin) xf[j] = 0.0f;
        const float a = fabsf(xf[j]);
        amax = a > amax ? a : amax;
    }
    float s = g * (amax * c16);
    s = s > 448.0f ? 448.0f : s;
    const unsigned int sb = f32_to_e4m3_sat(s);
    const float d = e4m3_to_f32(sb) * inv_g;
    const float os = d == 0.0f ? 0.0f : 1.0f / d;
    unsigned int w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        unsigned int word = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float v = xf[4 * q + i] * os;
            v = v < -6.0f ? -6.0f : (v > 6.0f ? 6.0f : v);
            word |= ((unsigned int)e2m1_code2(v) & 0xffu) << (8 * i);
        }
        w[q] = word;
    }
    *(uint4*)(codes + (size_t)r * K + (size_t)b * 16) = make_uint4(w[0], w[1], w[2], w[3]);
    scales[it] = (unsigned char)sb;
    finite[it] = fin ? 1 : 0;
    afac[it] = fin ? e4m3_to_f32(sb) : __uint_as_float(0x7fc00000u);
}

#define NVFP4_A4(R, EV, SUFFIX)                                                                        \
    extern "C" __global__ void __launch_bounds__(NVFP4_THREADS) nvfp4_a4_r##R##_##SUFFIX(             \
        const signed char* codes, long long ldc, const float* afac, int m, const unsigned char* w0,     \
        const unsigned char* s0, float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, \
        const unsigned char* s1, float rs1, unsigned short* out1, long long ldo1, int N, int K) {       \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);             \
        nvfp4_body<1, R, EV>(codes, ldc, afac, m, set, N, K);                                          \
    }

// @instances NVFP4_A4   (lines generated from metrale/cuda/configs.py)

// nvfp4_a4c_r{1,4}(same arguments): the generic kernels on the block-value chain (nvfp4.cuh
// nvfp4_chain_body, as nvfp4_gemv.cu's nvfp4_a16c_r*); dynamic shared memory R * 20 * 64 Q + R *
// NVFP4_THREADS * 4 bytes.
#define NVFP4_A4C(R)                                                                                   \
    extern "C" __global__ void __launch_bounds__(NVFP4_THREADS) nvfp4_a4c_r##R(                       \
        const signed char* codes, long long ldc, const float* afac, int m, const unsigned char* w0,     \
        const unsigned char* s0, float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, \
        const unsigned char* s1, float rs1, unsigned short* out1, long long ldo1, int N, int K) {       \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);             \
        nvfp4_chain_body<1, R>(codes, ldc, afac, m, set, N, K);                                        \
    }

// @instances NVFP4_A4C

// nvfp4_a4fc_r{1,2,3,4}: the same on the block-value chain (nvfp4.cuh nvfp4_run_body, as
// nvfp4_gemv.cu's nvfp4_a16fc_r*).
#define NVFP4_A4F(R, D, C, SUFFIX)                                                                     \
    extern "C" __global__ void __launch_bounds__(C ? RUN_THREADS : FAST_THREADS, C ? RUN_CTAS : 1) nvfp4_a4##SUFFIX##_r##R(             \
        const signed char* codes, long long ldc, const float* afac, int m, const unsigned char* w0,     \
        const unsigned char* s0, float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, \
        const unsigned char* s1, float rs1, unsigned short* out1, long long ldo1, int N, int K) {       \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);             \
        if constexpr (C) nvfp4_run_body<1, R, D, false>(codes, ldc, afac, m, set, N, K);               \
        else nvfp4_fast_body<1, R, D, false>(codes, ldc, afac, m, set, N, K);                          \
    }

// @instances NVFP4_A4F   (lines generated from metrale/cuda/configs.py)

// nvfp4_a4f8_r{R}: the same on the chain with 8-block parts (nvfp4_gemv.cu nvfp4_a16f8_r*).
#define NVFP4_A4F8(R, D)                                                                               \
    extern "C" __global__ void __launch_bounds__(FAST_THREADS, 1) nvfp4_a4f8_r##R(                     \
        const signed char* codes, long long ldc, const float* afac, int m, const unsigned char* w0,     \
        const unsigned char* s0, float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, \
        const unsigned char* s1, float rs1, unsigned short* out1, long long ldo1, int N, int K) {       \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);             \
        nvfp4_fast_body<1, R, D, false, true>(codes, ldc, afac, m, set, N, K);                         \
    }

// @instances NVFP4_A4F8
