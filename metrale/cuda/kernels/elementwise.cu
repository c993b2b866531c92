// elementwise.cu -- act_mul from the shipped tables (arithmetic.md § act-mul) and the LoRA deltas by the
// BF16-weight rule (arithmetic.md § lora, § codes24; metrale/reference/lora.py).
//
// Kernels (extern "C"):
//   act_mul(gate, ldg, up, ldu, out, ldo, m, N, table)
//     h = to_bf16(table[bits(gate)] * f32(up)); out may alias gate. grid (ceil(N/256), m), 256.
//     PDL-capable (metrale/cuda/pdl.py): triggers its dependents, then waits, before any access.
//   act_mul_st(gate, ldg, up, ldu, out, ldo, m, N, ctab, words)
//     the same h with the table's compact form in shared memory (4 words bytes, dynamic): grid
//     at most MINB CTAs per multiprocessor, persistent, block T, U 8-element groups per thread
//     and step (configs.py ACT_MUL_ST); N % 8 == 0 and 16-byte aligned rows.
//   lora_shrink(x, ldx, m, K, a, r, rpad, t, ldt)
//     t[i, j] = to_bf16(root(x_i . a_j)) for j < r, 0 for r <= j < rpad. One warp per (i, j):
//     grid (ceil(rpad/8), m), 256 threads.
//   lora_expand(t, ldt, m, rpad, b, N, scale, out, ldo)
//     out[i, n] = to_bf16(f32(out[i, n]) + scale * root(t_i . b_n)) in place. One warp per
//     (i, n): grid (ceil(N/8), m), 256 threads.
// root(x . w) (dense_root): A16 codes of the activation block (E, c), 24-bit codes of the
// bf16 weight block (F = max exponent field, zero as 1, - 127; cw = rne(w * 2^(22-F))),
// S = sum cw*c exact in double (|S| < 2^42), v = f32(S * 2^(E+F-36)) (one rounding),
// NaN for a non-finite activation block; the tree as in nvfp4.cuh (lane l: blocks 2l, 2l+1
// of each 64-block chunk, warp_sum_tree per chunk, chunk roots kept per lane, slot roots added).
#include "common.cuh"

extern "C" __global__ void act_mul(const unsigned short* gate, long long ldg, const unsigned short* up,
                                   long long ldu, unsigned short* out, long long ldo, int m, int N,
                                   const float* table) {
    pdl_trigger();  // launched programmatically (metrale/cuda/pdl.py): no access before pdl_wait
    pdl_wait();
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y;
    if (col >= N || row >= m) return;
    const unsigned short g = gate[(size_t)row * ldg + col];
    const float u = bf16_to_f32(up[(size_t)row * ldu + col]);
    out[(size_t)row * ldo + col] = f32_to_bf16(__ldg(table + g) * u);
}

// act_mul_st: the same h, 8 elements per group (16-byte loads; N % 8 == 0, rows 16-byte
// aligned), the table's compact form (metrale/cuda/weights.py compact_table) in shared memory,
// copied before the PDL wait (the uploader's, no earlier kernel's output). Persistent CTAs walk
// the m ceil(N / 8) groups row-major, U groups per thread and step loaded before any is formed.
template <int T, int U>
__device__ __forceinline__ void act_mul_st_body(const unsigned short* gate, long long ldg, const unsigned short* up,
                                                long long ldu, unsigned short* out, long long ldo, int m, int N,
                                                const float* __restrict__ ctab, int words) {
    extern __shared__ float4 st4[];
    const CompactAct act = compact_act_start(st4, ctab, words);
    const long long G = N >> 3, total = (long long)m * G, stride = (long long)gridDim.x * T * U;
    for (long long i0 = (long long)blockIdx.x * T * U + threadIdx.x; i0 < total; i0 += stride) {
        uint4 g[U], u[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = i0 + (long long)j * T;
            if (i < total) {
                const long long r = i / G, c = 8 * (i - r * G);
                g[j] = *reinterpret_cast<const uint4*>(gate + r * ldg + c);
                u[j] = *reinterpret_cast<const uint4*>(up + r * ldu + c);
            }
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = i0 + (long long)j * T;
            if (i < total) {
                const long long r = i / G, c = 8 * (i - r * G);
                *reinterpret_cast<uint4*>(out + r * ldo + c) = act_mul8(g[j], u[j], act);
            }
        }
    }
}

#define ACT_MUL_ST(T, U, MINB)                                                                              \
    extern "C" __global__ void __launch_bounds__(T, MINB) act_mul_st(                                     \
        const unsigned short* gate, long long ldg, const unsigned short* up, long long ldu,             \
        unsigned short* out, long long ldo, int m, int N, const float* __restrict__ ctab, int words) {  \
        act_mul_st_body<T, U>(gate, ldg, up, ldu, out, ldo, m, N, ctab, words);                        \
    }

// @instances ACT_MUL_ST

__device__ __forceinline__ float dense_block(const unsigned short* xb, const unsigned short* wb) {
    int c[16];
    int E;
    bool fin;
    a16_block(xb, c, E, fin);
    int fmax = 1;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        int f = (wb[j] >> 7) & 0xff;
        fmax = f > fmax ? f : fmax;
    }
    const int F = fmax - 127;
    const double wsc = __longlong_as_double((long long)(1023 + 22 - F) << 52);
    double S = 0.0;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const double cw = rint((double)bf16_to_f32(wb[j]) * wsc);
        S = S + cw * (double)c[j];  // every partial sum an integer below 2^42: exact
    }
    const double p2 = __longlong_as_double((long long)(1023 + E + F - 36) << 52);
    const float v = (float)(S * p2);
    return fin ? v : __uint_as_float(0x7fc00000u);
}

// Root of the block tree of x . w over K (K/16 blocks, K <= 65536); every lane returns it.
__device__ float dense_root(const unsigned short* x, const unsigned short* w, int K) {
    const int lane = threadIdx.x & 31;
    const int B = K >> 4, C = (B + 63) >> 6;
    float keep0 = METRALE_NEG_ZERO, keep1 = METRALE_NEG_ZERO;
    for (int c = 0; c < C; ++c) {
        const int b0 = 2 * (c * 32 + lane);
        float ve = METRALE_NEG_ZERO, vo = METRALE_NEG_ZERO;
        if (b0 < B) ve = dense_block(x + (size_t)b0 * 16, w + (size_t)b0 * 16);
        if (b0 + 1 < B) vo = dense_block(x + (size_t)(b0 + 1) * 16, w + (size_t)(b0 + 1) * 16);
        const float root = warp_sum_tree(ve + vo);
        if (lane == (c & 31)) {
            if (c < 32) keep0 = root;
            else keep1 = root;
        }
    }
    float root = warp_sum_tree(keep0);
    if (C > 32) root = root + warp_sum_tree(keep1);
    return root;
}

extern "C" __global__ void lora_shrink(const unsigned short* x, long long ldx, int m, int K,
                                       const unsigned short* a, int r, int rpad, unsigned short* t,
                                       long long ldt) {
    const int j = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int i = blockIdx.y;
    if (j >= rpad || i >= m) return;  // whole warps leave together
    unsigned short y = 0;
    if (j < r) y = f32_to_bf16(dense_root(x + (size_t)i * ldx, a + (size_t)j * K, K));
    if ((threadIdx.x & 31) == 0) t[(size_t)i * ldt + j] = y;
}

extern "C" __global__ void lora_expand(const unsigned short* t, long long ldt, int m, int rpad,
                                       const unsigned short* b, int N, float scale, unsigned short* out,
                                       long long ldo) {
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int i = blockIdx.y;
    if (n >= N || i >= m) return;
    const float p = dense_root(t + (size_t)i * ldt, b + (size_t)n * rpad, rpad);
    if ((threadIdx.x & 31) == 0) {
        unsigned short* o = out + (size_t)i * ldo + n;
        *o = f32_to_bf16(bf16_to_f32(*o) + scale * p);
    }
}
