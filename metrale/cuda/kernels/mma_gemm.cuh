// mma_gemm.cuh -- the integer tensor-core engine of the block-scaled weight x A16 / A4 kernels
// (nvfp4_mma.cu, q2_0_mma.cu, fp8_bf16_mma.cu; their headers state the kernels and the
// contract): the MMA operands of one step (8 aligned blocks of 16 columns), the step's 8-leaf
// subtree roots, the A16 prologue in fragment order, the K-split MMA body and the prefill GEMM
// body.
//
// A weight policy WP supplies: struct Consts and consts() (registers the decode keeps); struct
// Load (one step of rows n0 + g and n0 + g + 8 as loaded); struct Ops (the step's MMA operands:
// StepOps for the narrow policies, whose weight codes are one 8-bit limb and whose block scale
// is an f32, WideOps for the wide one, three limbs and a float64 power of two); rows(set, n0,
// lane, N, B), the lane's WeightRows (narrow: weight_rows<WP>, from wrow(B) and srow(B), the
// bytes per weight row of codes and of scales); load<AL>(Load&, wr.w0, wr.w1, wr.s0, wr.s1,
// blk0, B, t) (AL: every step whole, B % 8 == 0; blocks past B may load anything finite: their
// activation codes are zero and their factor -0.0); decode(Load, t, Consts, Ops&). The step
// roots come from the step_roots overload of Ops: MODE 0 (A16) and 1 (A4) for StepOps, MODE 2
// (A16 x 24-bit weight codes, arithmetic.md § codes24) for WideOps, MODE 3 (A16 on the f16
// MMA) for HalfOps.
#pragma once
#include "nvfp4.cuh"

// @defines MMA_GEMM (MMA_WARPS, MMA_RUN, GEMM_WARPS from metrale/cuda/configs.py)

// The weight rows n0 + g and n0 + g + 8 of this lane (clamped to N - 1): codes and scales.
struct WeightRows {
    const unsigned char *w0, *w1, *s0, *s1;
};

template <class WP>
__device__ __forceinline__ WeightRows weight_rows(const WeightSet& set, int n0, int g, int N, int B) {
    const long long wrow = WP::wrow(B), srow = WP::srow(B);
    const long long r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
    return WeightRows{set.w + r0 * wrow, set.w + r1 * wrow, set.ws + r0 * srow, set.ws + r1 * srow};
}

// ---- A16 prologue: limbs and factors in fragment order (layout in nvfp4_mma.cu's header) ----
// PERM: lane t's word holds elements t, t+4, t+8, t+12 of the block (byte j: element t + 4j),
// else 4t .. 4t+3; the factor is 2^(E - eoff) (NaN for a non-finite block) as an f32, or with
// HIWORD the high word of that double (NaN: 0x7FF80000; padding: 0x80000000, the high word of
// -0.0, the same bits as the f32 -0.0) stored in the f32 slot.
// F16: the words hold lane t's four codes as f16 pairs (a16_f16_words: the first two in the first
// word, the last two in the second) for the f16 mode (MODE 3), instead of the limbs.
template <bool PERM, bool HIWORD = false, bool F16 = false>
__device__ __forceinline__ void a16_mma_prep_body(const unsigned short* __restrict__ x, long long ldx, int m,
                                                  int rows8, int B, int NB, int eoff,
                                                  unsigned int* __restrict__ act, float* __restrict__ fac) {
    const int it = blockIdx.x * blockDim.x + threadIdx.x;
    pdl_wait();
    pdl_trigger();
    if (it >= NB * rows8) return;
    const int r = it / NB, b = it - r * NB;
    unsigned int lo[4] = {0u, 0u, 0u, 0u}, hi[4] = {0u, 0u, 0u, 0u};
    float f = METRALE_NEG_ZERO;
    if (r < m && b < B) {
        const unsigned short* src = x + (size_t)r * ldx + (size_t)b * 16;
        unsigned short xs[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) xs[j] = src[j];
        int c[16];
        int E;
        bool fin;
        a16_block_int(xs, c, E, fin);
        int cp[16];
#pragma unroll
        for (int t = 0; t < 4; ++t)
#pragma unroll
            for (int j = 0; j < 4; ++j) cp[4 * t + j] = PERM ? c[t + 4 * j] : c[4 * t + j];
        if (F16) a16_f16_words(cp, lo, hi);
        else a16_limbs(cp, lo, hi);
        if (HIWORD) f = __int_as_float(fin ? (E - eoff + 1023) << 20 : 0x7FF80000);
        else f = fin ? pow2f(E - eoff) : __uint_as_float(0x7fc00000u);
    }
    const int nt = r >> 3, g = r & 7;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const size_t base = (((size_t)nt * (NB >> 1) + (b >> 1)) * 32 + (4 * g + t)) * 4 + 2 * (b & 1);
        act[base] = lo[t];
        act[base + 1] = hi[t];
    }
    const int tt = (r & 7) >> 1, h = r & 1;
    fac[((((size_t)nt * (NB >> 3) + (b >> 3)) * 4 + tt) * 8 + (b & 7)) * 2 + h] = f;
}

__device__ __forceinline__ void mma_s8s8(int (&d)[4], unsigned int a0, unsigned int a1, unsigned int b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b));
}
__device__ __forceinline__ void mma_s8u8(int (&d)[4], unsigned int a0, unsigned int a1, unsigned int b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b));
}

// The same MMA for every signedness: SA / SB say whether A / B are s8 (else u8).
template <bool SA, bool SB>
__device__ __forceinline__ void mma_8bit(int (&d)[4], unsigned int a0, unsigned int a1, unsigned int b) {
    if constexpr (SA && SB) {
        mma_s8s8(d, a0, a1, b);
    } else if constexpr (SA) {
        mma_s8u8(d, a0, a1, b);
    } else if constexpr (SB) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
            : "r"(a0), "r"(a1), "r"(b));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
            : "r"(a0), "r"(a1), "r"(b));
    }
}

// A step's MMA operands: A fragments (codes of rows g: a0, g + 8: a1) and the f32 weight scales
// of columns g (ws0), g + 8 (ws1), for the 8 blocks.
struct StepOps {
    unsigned int a0[8], a1[8];
    float ws0[8], ws1[8];
};

// The contract's 8-leaf subtree over the step's block values v[block][j].
__device__ __forceinline__ void step_tree(const float (&v)[8][4], float (&sr)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float s01 = ieee_add(v[0][j], v[1][j]), s23 = ieee_add(v[2][j], v[3][j]);
        const float s45 = ieee_add(v[4][j], v[5][j]), s67 = ieee_add(v[6][j], v[7][j]);
        sr[j] = ieee_add(ieee_add(s01, s23), ieee_add(s45, s67));
    }
}

// A block's 4 values of this lane (accumulators c0..c3, see below) from its dots s (f32, exact):
// v = (s * wscale of the column) * factor of the activation row, each an IEEE multiply.
__device__ __forceinline__ void block_values(float (&v)[4], const float (&s)[4], float ws0, float ws1, float f0,
                                             float f1) {
    v[0] = ieee_mul(ieee_mul(s[0], ws0), f0);
    v[1] = ieee_mul(ieee_mul(s[1], ws0), f1);
    v[2] = ieee_mul(ieee_mul(s[2], ws1), f0);
    v[3] = ieee_mul(ieee_mul(s[3], ws1), f1);
}

// The 8-block step's subtree roots sr[j] of this lane's 4 accumulator values (c0: column g,
// row 2t; c1: g, 2t+1; c2: g+8, 2t; c3: g+8, 2t+1). ap, fp: this lane's limbs and factors of
// the tile's step (prep layout).
template <int MODE>
__device__ __forceinline__ void step_roots(const StepOps& o, const uint4* __restrict__ ap,
                                           const float4* __restrict__ fp, float (&sr)[4]) {
    float v[8][4];
#pragma unroll
    for (int pr = 0; pr < 4; ++pr) {
        const uint4 bv = __ldg(ap + pr * 32);  // blocks 2 pr (x lo, y hi), 2 pr + 1
        const float4 ff = __ldg(fp + pr);      // blocks 2 pr, 2 pr + 1: (h0, h1) each
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int bb = 2 * pr + e;
            int d[4] = {0, 0, 0, 0};
            const float f0 = e ? ff.z : ff.x, f1 = e ? ff.w : ff.y;
            if (MODE == 0) {  // A16: S = 256 S_hi + S_lo
                mma_s8s8(d, o.a0[bb], o.a1[bb], e ? bv.w : bv.y);
#pragma unroll
                for (int j = 0; j < 4; ++j) d[j] = d[j] << 8;
                mma_s8u8(d, o.a0[bb], o.a1[bb], e ? bv.z : bv.x);
            } else {  // A4: the 2 e2m1 codes in the low-limb slot, one MMA; f = ascale / 4 from
                      // the prep, every product exact (nvfp4_mma.cu, Exactness)
                mma_s8s8(d, o.a0[bb], o.a1[bb], e ? bv.z : bv.x);
            }
            const float sf[4] = {(float)d[0], (float)d[1], (float)d[2], (float)d[3]};
            block_values(v[bb], sf, o.ws0[bb], o.ws1[bb], f0, f1);
        }
    }
    step_tree(v, sr);
}

// ---- the f16 mode (MODE 3): NVFP4 weight codes x A16 codes on the f16 MMA ----
// A step's operands: per block the weight codes 2 e2m1 as f16 pairs (h0: row g, h1: row g + 8;
// [0]: elements 4t, 4t + 1, [1]: 4t + 2, 4t + 3, the k slots 2t, 2t + 1 and 2t + 8, 2t + 9 of
// the f16 A fragment) and the f32 weight scales. Every code and product is an exact f16 / f32
// integer and every partial sum an integer below 2^23, so the f32 accumulator is f32(S_b)
// exactly, as the s8 MMAs' int32 (arithmetic.md § kernel-notes; tests/gpu/test_f16_mma_block_dot.py
// checks the device).
struct HalfOps {
    unsigned int h0[8][2], h1[8][2];
    float ws0[8], ws1[8];
};

// d += A B on 16-bit operands with an f32 accumulator: f16 (BF16 false) or bf16 (nvfp4_tile.cu).
template <bool BF16 = false>
__device__ __forceinline__ void mma_f16(float (&d)[4], unsigned int a0, unsigned int a1, unsigned int a2,
                                        unsigned int a3, unsigned int b0, unsigned int b1) {
    if constexpr (BF16)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four biased codes (bytes c + 128, |c| <= 12) as the f16 pairs (c0, c1) and (c2, c3): each byte
// under the f16 exponent of 1024 is 1024 + 128 + c, and 1152 subtracted leaves c (exact).
__device__ __forceinline__ void biased_codes_f16(unsigned int u, unsigned int& lo, unsigned int& hi) {
    const unsigned int l = prmt(u, 0x64646464u, 0x5140u), h = prmt(u, 0x64646464u, 0x7362u);
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(l), "r"(0x64806480u));
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(h), "r"(0x64806480u));
}

template <int MODE>
__device__ __forceinline__ void step_roots(const HalfOps& o, const uint4* __restrict__ ap,
                                           const float4* __restrict__ fp, float (&sr)[4]) {
    static_assert(MODE == 3, "HalfOps serve the f16 mode only");
    float v[8][4];
#pragma unroll
    for (int pr = 0; pr < 4; ++pr) {
        const uint4 bv = __ldg(ap + pr * 32);  // blocks 2 pr (x, y), 2 pr + 1 (z, w): f16 pairs
        const float4 ff = __ldg(fp + pr);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int bb = 2 * pr + e;
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_f16(d, o.h0[bb][0], o.h1[bb][0], o.h0[bb][1], o.h1[bb][1], e ? bv.z : bv.x, e ? bv.w : bv.y);
            block_values(v[bb], d, o.ws0[bb], o.ws1[bb], e ? ff.z : ff.x, e ? ff.w : ff.y);
        }
    }
    step_tree(v, sr);
}

// ---- the wide mode (MODE 2): 24-bit weight codes x A16 codes (arithmetic.md § codes24) ----
// A step's operands of the wide policy: per block, the limbs of the weight codes c_w = 2^16 w2
// + 2^8 w1 + w0 as A fragments (w[b][2l]: limb l of row g, w[b][2l+1]: of row g + 8; w0, w1
// u8, w2 s8) and 2^(F-22) of rows g (pw0) and g + 8 (pw1) as the high words of doubles.
struct WideOps {
    unsigned int w[8][6];
    int pw0[8], pw1[8];
};

// int32 -> double exactly and without the conversion pipe: 2^52 + 2^31 + x read back, minus
// 2^52 + 2^31.
__device__ __forceinline__ double mma_i32_to_f64(int x) {
    return __dsub_rn(__hiloint2double(0x43300000, x ^ (int)0x80000000), 4503601774854144.0);
}

// Wide block values v[block][j] of a step. Per block, six limb MMAs (k = 16 = one block, so each accumulator is one
// limb-pair block dot P_ij, |P| < 2^21): H = 2^8 Q3 + Q2 and L = 2^8 Q1 + Q0 (Q_L = sum over
// i + j = L of P_ij), the shift applied to the accumulator between MMAs (int32-exact: |H| <
// 2^27, |L| < 2^30); S_b = 2^16 H + L (|S_b| < 2^43) by one exact float64 fma; v_b =
// f32((S_b 2^(F-22)) f) with f = 2^(E-14) from the prologue's HIWORD factor (the high word of
// the double; NaN for a non-finite block, -0.0 for padding; no conversion): two exact
// power-of-two multiplies (|exponents| < 300) and ONE rounding to f32 by cvt.rn (ieee_d2f:
// subnormals and overflow to Inf exact).
__device__ __forceinline__ void wide_values(const WideOps& o, const uint4* __restrict__ ap,
                                            const float4* __restrict__ fp, float (&v)[8][4]) {
#pragma unroll
    for (int pr = 0; pr < 4; ++pr) {
        const uint4 bv = __ldg(ap + pr * 32);  // blocks 2 pr (x lo, y hi), 2 pr + 1 (z lo, w hi)
        const float4 ff = __ldg(fp + pr);      // blocks 2 pr, 2 pr + 1: (h0, h1) each
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int bb = 2 * pr + e;
            const unsigned int a0 = e ? bv.z : bv.x, a1 = e ? bv.w : bv.y;
            const unsigned int* w = o.w[bb];
            int H[4] = {0, 0, 0, 0}, L[4] = {0, 0, 0, 0};
            mma_8bit<true, true>(H, w[4], w[5], a1);    // Q3
            mma_8bit<false, false>(L, w[2], w[3], a0);  // Q1
#pragma unroll
            for (int q = 0; q < 4; ++q) H[q] <<= 8;
            mma_8bit<false, true>(L, w[0], w[1], a1);   // Q1
            mma_8bit<true, false>(H, w[4], w[5], a0);   // Q2
#pragma unroll
            for (int q = 0; q < 4; ++q) L[q] <<= 8;
            mma_8bit<false, true>(H, w[2], w[3], a1);   // Q2
            mma_8bit<false, false>(L, w[0], w[1], a0);  // Q0
            const double pg = __hiloint2double(o.pw0[bb], 0), pg8 = __hiloint2double(o.pw1[bb], 0);
            const double f0 = __hiloint2double(__float_as_int(e ? ff.z : ff.x), 0);
            const double f1 = __hiloint2double(__float_as_int(e ? ff.w : ff.y), 0);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const double sb = __fma_rn(mma_i32_to_f64(H[q]), 65536.0, mma_i32_to_f64(L[q]));
                v[bb][q] = ieee_d2f(__dmul_rn(__dmul_rn(sb, (q & 2) ? pg8 : pg), (q & 1) ? f1 : f0));
            }
        }
    }
}

// The wide step roots: the step's 8-leaf subtrees of its block values.
template <int MODE>
__device__ __forceinline__ void step_roots(const WideOps& o, const uint4* __restrict__ ap,
                                           const float4* __restrict__ fp, float (&sr)[4]) {
    static_assert(MODE == 2, "WideOps serve the wide mode only");
    float v[8][4];
    wide_values(o, ap, fp, v);
    step_tree(v, sr);
}

// The wide step on the block-value chain (docs/chain-revision.md, BF16: c <- c + v_b in K order):
// the step's 8 block values added into the lane's 4 chains c.
template <int MODE>
__device__ __forceinline__ void step_chain(const WideOps& o, const uint4* __restrict__ ap,
                                           const float4* __restrict__ fp, float (&c)[4]) {
    static_assert(MODE == 2, "the chain form serves the wide mode only");
    float v[8][4];
    wide_values(o, ap, fp, v);
#pragma unroll
    for (int b = 0; b < 8; ++b)
#pragma unroll
        for (int j = 0; j < 4; ++j) c[j] = ieee_add(c[j], v[b][j]);
}

template <class WP, int MODE, int NT, bool AL>
__device__ __forceinline__ void mma_body(const uint4* __restrict__ act, const float4* __restrict__ fac,
                                               int m, WeightSet set, int N, int B, int NB) {
    extern __shared__ __align__(16) float red[];  // [16 columns][8 NT rows][runs]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16;
    const int runs = NB / MMA_RUN;
    const int S8 = NB >> 3;
    const typename WP::Consts kc = WP::consts();
    const WeightRows wr = WP::rows(set, n0, lane, N, B);

    // pdl.py: the weights too are read after the wait (a wait after the first run's weight loads
    // took ptxas up to 51 more registers per thread in these kernels)
    pdl_wait();
    pdl_trigger();
    for (int run = warp; run < runs; run += MMA_WARPS) {
        float p1[NT][4], p2[NT][4], p0[NT][4], root[NT][4];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            typename WP::Load ld[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                WP::template load<AL>(ld[i], wr.w0, wr.w1, wr.s0, wr.s1, run * MMA_RUN + (half * 4 + i) * 8, B, t);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int step = half * 4 + i;
                const int s8 = run * (MMA_RUN / 8) + step;
                typename WP::Ops o;
                WP::decode(ld[i], t, kc, o);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    float sr[4];
                    step_roots<MODE>(o, act + ((size_t)nt * (NB >> 1) + (size_t)s8 * 4) * 32 + lane,
                               fac + (((size_t)nt * S8 + s8) * 4 + t) * 4, sr);
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        // binary counter over the 8 steps of the run (levels p0, p1, p2)
                        if ((step & 1) == 0) {
                            p0[nt][j] = sr[j];
                        } else {
                            const float l1 = ieee_add(p0[nt][j], sr[j]);
                            if ((step & 2) == 0) {
                                p1[nt][j] = l1;
                            } else {
                                const float l2 = ieee_add(p1[nt][j], l1);
                                if ((step & 4) == 0) {
                                    p2[nt][j] = l2;
                                } else {
                                    root[nt][j] = ieee_add(p2[nt][j], l2);
                                }
                            }
                        }
                    }
                }
            }
        }
        // park the run roots: value j of tile nt is column g + 8 (j >> 1), row 8 nt + 2t + (j & 1)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = g + 8 * (j >> 1), rr = 8 * nt + 2 * t + (j & 1);
                red[(c * 8 * NT + rr) * runs + run] = root[nt][j];
            }
    }
    __syncthreads();
    // the tree over the run roots of each (column, row), padded with -0.0 (in place)
    for (int pidx = threadIdx.x; pidx < 16 * 8 * NT; pidx += blockDim.x) {
        const int c = pidx / (8 * NT), rr = pidx - c * (8 * NT);
        const int n = n0 + c;
        if (n >= N || rr >= m) continue;
        float* a = red + (size_t)pidx * runs;
        int len = runs;
        while (len > 1) {
            const int half = (len + 1) >> 1;
            for (int i = 0; i < half; ++i) a[i] = (2 * i + 1 < len) ? ieee_add(a[2 * i], a[2 * i + 1]) : a[2 * i];
            len = half;
        }
        set.out[(size_t)rr * set.ldo + n] = f32_to_bf16(ieee_mul(a[0], set.rowscale));
    }
}


// ---- the prefill GEMM: every warp one 16-column x 8 NT-row tile over all of K ----
// Steps s8 = 0 .. S8-1 (S8 = NB / 8, NB = 8 ceil(B / 8)) enter a binary counter p[0..D] of
// aligned subtrees (S8 <= 2^D): step s8 adds into levels 0, 1, ... while bit L of s8 is set
// (earlier subtree on the left) and parks the sum at the first clear bit. At the end the
// levels L of the set bits of S8 hold aligned subtrees, earlier ones at higher levels; the
// contract's tree padded with -0.0 leaves is their right-nested sum from the lowest level up
// (a subtree of padding leaves is -0.0, and x + -0.0 = x). The next step's weights are loaded
// while the current step computes.
// Push the step roots sr of tile nt: add into levels 0 .. lvl-1 (left operand the parked
// earlier subtree), park at level lvl (warp-uniform, so one branch per level).
template <int NT, int D>
__device__ __forceinline__ void counter_push(float (&p)[D + 1][NT][4], int nt, const float (&sr)[4], int lvl) {
#pragma unroll
    for (int L = 0; L <= D; ++L) {
        if (lvl == L) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float c = sr[j];
#pragma unroll
                for (int i = 0; i < L; ++i) c = ieee_add(p[i][nt][j], c);
                p[L][nt][j] = c;
            }
        }
    }
}

// The root of the padded tree over n leaves from a binary counter's levels (level(L): the
// aligned subtree parked at level L, L < LEVELS): the right-nested sum over the set bits of n
// from the lowest level up, the earlier (higher) subtree on the left.
template <int LEVELS, class Level>
__device__ __forceinline__ float counter_fold(int n, Level&& level) {
    float acc = 0.0f;
    bool have = false;
#pragma unroll
    for (int L = 0; L < LEVELS; ++L) {
        if ((n >> L) & 1) {
            acc = have ? ieee_add(level(L), acc) : level(L);
            have = true;
        }
    }
    return acc;
}

// Split K (parts > 1): blockIdx.z = part * gz + set; the part covers steps [part kp8, part kp8 +
// kp8) ∩ [0, S8), kp8 a power of two, an aligned subtree of the padded tree; its root goes to
// partial [parts][gz][m][N] (f32) and mma_finish sums the parts' tree. CH (the wide mode on the
// block-value chain, docs/chain-revision.md): each 8 steps (64 blocks, a chain part) chain their
// block values from -0.0 (step_chain) and the part roots, not the step roots, enter the counter,
// so it holds the padded tree over parts; kp8 is then a multiple of 8 (whole chain parts) or all
// of K. parts = 1: y directly,
// y = bf16(root * scale) with scale = cs[column] where cs is given (FP8's per-output-row weight
// scale), else the set's rowscale. Raster: rows_first = false: grid (column CTAs, row tiles),
// the CTAs running together share a row tile; true: grid (row tiles, column CTAs), they share
// the weight columns (the wide weights, 3.25 bytes per element, do not fit in L2: read once).
template <class WP, int MODE, int NT, int D, bool AL, bool CH = false>
__device__ __forceinline__ void gemm_body(const uint4* __restrict__ act, const float4* __restrict__ fac,
                                                int m, WeightSet set, int N, int B, int NB, int part_i, int kp8,
                                                float* __restrict__ partial, int zs, int gz,
                                                const float* __restrict__ cs, bool rows_first = false) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n0 = ((rows_first ? blockIdx.y : blockIdx.x) * GEMM_WARPS + warp) * 16;
    if (n0 >= N) return;
    const int tile0 = (rows_first ? blockIdx.x : blockIdx.y) * NT;
    const int S8 = NB >> 3;
    const int s_begin = part_i * kp8, Sl = min(S8 - s_begin, kp8);
    const typename WP::Consts kc = WP::consts();
    const WeightRows wr = WP::rows(set, n0, lane, N, B);
    float p[D + 1][NT][4];
    float ch[CH ? NT : 1][4];  // CH: the chains of the current part
    typename WP::Load cur, nxt;
    WP::template load<AL>(cur, wr.w0, wr.w1, wr.s0, wr.s1, s_begin * 8, B, t);
    pdl_wait();  // the first step's weights in flight (pdl.py)
    pdl_trigger();
    for (int ls = 0; ls < Sl; ++ls) {
        const int s8 = s_begin + ls;
        if (ls + 1 < Sl) WP::template load<AL>(nxt, wr.w0, wr.w1, wr.s0, wr.s1, (s8 + 1) * 8, B, t);
        typename WP::Ops o;
        WP::decode(cur, t, kc, o);
        // trailing ones of the leaf's index (the step's, or CH the part's): the level it parks at
        const int lvl = __ffs(~(CH ? ls >> 3 : ls)) - 1;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const size_t tile = (size_t)(tile0 + nt);
            const uint4* ap = act + (tile * (NB >> 1) + (size_t)s8 * 4) * 32 + lane;
            const float4* fp = fac + ((tile * S8 + s8) * 4 + t) * 4;
            if constexpr (CH) {
                if ((ls & 7) == 0)
#pragma unroll
                    for (int j = 0; j < 4; ++j) ch[nt][j] = METRALE_NEG_ZERO;
                step_chain<MODE>(o, ap, fp, ch[nt]);
                if ((ls & 7) == 7 || ls + 1 == Sl) counter_push<NT, D>(p, nt, ch[nt], lvl);
            } else {
                float sr[4];
                step_roots<MODE>(o, ap, fp, sr);
                counter_push<NT, D>(p, nt, sr, lvl);
            }
        }
        cur = nxt;
    }
    const int leaves = CH ? (Sl + 7) >> 3 : Sl;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float acc = counter_fold<D + 1>(leaves, [&](int L) { return p[L][nt][j]; });
            const int c = n0 + g + 8 * (j >> 1), rr = 8 * (tile0 + nt) + 2 * t + (j & 1);
            if (c >= N || rr >= m) continue;
            if (partial == nullptr)
                set.out[(size_t)rr * set.ldo + c] = f32_to_bf16(ieee_mul(acc, cs ? __ldg(cs + c) : set.rowscale));
            else
                partial[(((size_t)part_i * gz + zs) * m + rr) * N + c] = acc;
        }
}

// The tree over the split-K parts' roots (aligned subtrees in K order; the same counter and
// right-nested fold, so the padded tree), then y = bf16(root * scale), scale = cs[column] where
// the set's cs is given, else its rowscale. One thread per output of the gz sets: grid
// ceil(gz m N / 256), block 256; parts <= 64.
extern "C" __global__ void __launch_bounds__(256) mma_finish(const float* __restrict__ partial, int parts, int gz,
                                                             int m, int N, float rs0, unsigned short* out0,
                                                             long long ldo0, float rs1, unsigned short* out1,
                                                             long long ldo1, const float* __restrict__ cs0,
                                                             const float* __restrict__ cs1) {
    const long long it = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long mn = (long long)m * N;
    pdl_wait();
    pdl_trigger();
    if (it >= gz * mn) return;
    const int zs = (int)(it / mn), r = (int)((it - zs * mn) / N), c = (int)(it - zs * mn - (long long)r * N);
    float lv[7];
    for (int q = 0; q < parts; ++q) {
        float v = partial[(((size_t)q * gz + zs) * m + r) * N + c];
        int L = 0;
        while ((q >> L) & 1) {
            v = ieee_add(lv[L], v);
            ++L;
        }
        lv[L] = v;
    }
    const float acc = counter_fold<7>(parts, [&](int L) { return lv[L]; });
    const float* cs = zs == 0 ? cs0 : cs1;
    const float sc = cs ? __ldg(cs + c) : (zs == 0 ? rs0 : rs1);
    if (zs == 0) out0[(size_t)r * ldo0 + c] = f32_to_bf16(ieee_mul(acc, sc));
    else out1[(size_t)r * ldo1 + c] = f32_to_bf16(ieee_mul(acc, sc));
}

// The kernels of one weight policy, activation mode and shape (arguments as nvfp4_mma.cu states).
#define MMA_KERNEL(WP, PREFIX, MODE, NT, AL, SUFFIX)                                                     \
    extern "C" __global__ void __launch_bounds__(32 * MMA_WARPS) PREFIX##_mma_nt##NT##_##SUFFIX(         \
        const uint4* __restrict__ act, const float4* __restrict__ fac, int m, const unsigned char* w0,   \
        const unsigned char* s0, float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, \
        const unsigned char* s1, float rs1, unsigned short* out1, long long ldo1, int N, int B, int NB) { \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);           \
        mma_body<WP, MODE, NT, AL>(act, fac, m, set, N, B, NB);                                          \
    }

#define GEMM_KERNEL(WP, PREFIX, MODE, NT, D, MINB, AL, SUFFIX)                                           \
    extern "C" __global__ void __launch_bounds__(32 * GEMM_WARPS, MINB)                                   \
        PREFIX##_gemm_nt##NT##_d##D##_b##MINB##_##SUFFIX(                                                \
            const uint4* __restrict__ act, const float4* __restrict__ fac, int m, const unsigned char* w0, \
            const unsigned char* s0, float rs0, unsigned short* out0, long long ldo0,                    \
            const unsigned char* w1, const unsigned char* s1, float rs1, unsigned short* out1,           \
            long long ldo1, int N, int B, int NB, int gz, int kp8, float* __restrict__ partial) {       \
        const int zs = blockIdx.z % gz;                                                                  \
        const WeightSet set = weight_set_at(zs, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);    \
        gemm_body<WP, MODE, NT, D, AL>(act, fac, m, set, N, B, NB, blockIdx.z / gz, kp8, partial, zs, gz,  \
                                       nullptr);                                                         \
    }

// The wide GEMM (MODE 2) of one shape: the arguments of GEMM_KERNEL, then the sets' column
// scales cs0, cs1 (null: the set's rowscale) and the raster (rows_first: gemm_body); CH: on the
// block-value chain (gemm_body).
#define WIDE_GEMM_KERNEL(WP, PREFIX, NT, D, MINB, AL, SUFFIX, CH)                                        \
    extern "C" __global__ void __launch_bounds__(32 * GEMM_WARPS, MINB)                                   \
        PREFIX##_gemm_nt##NT##_d##D##_b##MINB##_##SUFFIX(                                                \
            const uint4* __restrict__ act, const float4* __restrict__ fac, int m, const unsigned char* w0, \
            const unsigned char* s0, float rs0, unsigned short* out0, long long ldo0,                    \
            const unsigned char* w1, const unsigned char* s1, float rs1, unsigned short* out1,           \
            long long ldo1, int N, int B, int NB, int gz, int kp8, float* __restrict__ partial,          \
            const float* __restrict__ cs0, const float* __restrict__ cs1, int rows_first) {              \
        const int zs = blockIdx.z % gz;                                                                  \
        const WeightSet set = weight_set_at(zs, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);    \
        gemm_body<WP, 2, NT, D, AL, CH>(act, fac, m, set, N, B, NB, blockIdx.z / gz, kp8, partial, zs, gz, \
                                        zs == 0 ? cs0 : cs1, rows_first != 0);                           \
    }
