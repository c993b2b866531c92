// nvfp4.cuh -- the NVFP4 projection body shared by w4a16_gemv.cu (A16) and w4a4.cu (A4).
//
// CONTRACT §5 for NVFP4 weights (uint8 [N, K/2], e4m3 scales [N, B], B = K/16):
//   S_b  = sum_j wc_j * ac_j over the block's 16 elements, in int32 with dp4a (exact);
//          A16: ac = c (int16) split into limbs c = 256*hi + lo (lo unsigned byte, hi signed
//          byte): S = 256*dp4a_ss(wc, hi) + dp4a_su(wc, lo); A4: ac = 2*e2m1 (int8), one dp4a.
//   v_b  = A16: (f32(S_b) * f32(wscale_b)) * 2^(E_b - 15)
//          A4 : ((f32(S_b) * f32(wscale_b)) * f32(ascale_b)) * 0.25
//          (a non-finite activation block carries NaN in place of the power of two / ascale).
//   tree: one warp per output column; lane l holds blocks (2l, 2l+1) of each 64-block chunk
//         (its 16 weight bytes: one 16-byte load), adds the pair, and warp_sum_tree (shfl_xor
//         1..16) gives the chunk root (an aligned 64-leaf subtree; blocks past B are -0.0).
//         Lane (c mod 32) keeps chunk c's root; a second warp_sum_tree over the kept roots
//         gives the 2048-block slot roots, and root = slot0 + slot1 (K <= 65536).
//   y    = to_bf16(root * rowscale)  (A16: weight_scale_2; A4: f32(input_scale*weight_scale_2))
// Activation codes are prepared once per CTA and row group into shared memory, in the byte
// order the weight decode produces (element n of a block in byte n), and shared by all of
// the CTA's columns. CTAs are persistent over columns (grid.x), row groups of R rows run over
// grid.y, and grid.z picks one of two weight sets (gate and up in one launch).
#pragma once
#include "common.cuh"

#define NVFP4_WARPS 8
#define NVFP4_THREADS (NVFP4_WARPS * 32)
#define NVFP4_UNROLL 4

struct Nvfp4Set {
    const unsigned char* w;    // [N, K/2]
    const unsigned char* ws;   // [N, B] e4m3 bits
    float rowscale;
    unsigned short* out;       // bf16 bits, rows of stride ldo
    long long ldo;
};

// Shared-memory bytes per activation row: A16 72*P, A4 40*P (P = 32 * chunks).
template <int MODE> struct ActLayout { static constexpr int LIMB_WORDS = MODE == 0 ? 4 : 2; };

// MODE 0: A16 from bf16 rows x (act = x, lda in elements).
// MODE 1: A4 from codes int8 [m, K] (act, lda = K bytes) and afac f32 [m, B] (NaN: non-finite).
template <int MODE, int R, bool EVEN>
__device__ __forceinline__ void nvfp4_body(const void* act, long long lda, const float* afac, int m,
                                           Nvfp4Set set, int N, int K) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int B = K >> 4;
    const int C = (B + 63) >> 6;
    const int P = C * 32;
    constexpr int LW = ActLayout<MODE>::LIMB_WORDS;
    const int rowbytes = P * (16 * LW + 8);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int ngroups = (m + R - 1) / R;

    for (int g = blockIdx.y; g < ngroups; g += gridDim.y) {
        const int row0 = g * R;
        __syncthreads();
        // ---- prologue: activation codes of rows row0 .. row0+R-1 into shared memory ----
        for (int it = threadIdx.x; it < R * 2 * P; it += blockDim.x) {
            const int r = it / (2 * P), b = it - r * (2 * P);
            const int p = b >> 1, h = b & 1;
            uint4* limbs = (uint4*)(smem + (size_t)r * rowbytes);
            float* fac = (float*)(smem + (size_t)r * rowbytes + (size_t)P * 16 * LW);
            const int row = row0 + r;
            if (MODE == 0) {
                uint4 lo = make_uint4(0, 0, 0, 0), hi = make_uint4(0, 0, 0, 0);
                float f = METRALE_NEG_ZERO;
                if (b < B && row < m) {
                    const unsigned short* xb = (const unsigned short*)act + (size_t)row * lda + (size_t)b * 16;
                    unsigned short xs[16];
#pragma unroll
                    for (int j = 0; j < 16; ++j) xs[j] = xb[j];
                    int c[16];
                    int E;
                    bool fin;
                    a16_block(xs, c, E, fin);
                    unsigned int l[4], hh[4];
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        l[q] = (c[4 * q] & 0xff) | ((c[4 * q + 1] & 0xff) << 8) | ((c[4 * q + 2] & 0xff) << 16) |
                               ((unsigned int)(c[4 * q + 3] & 0xff) << 24);
                        hh[q] = ((c[4 * q] >> 8) & 0xff) | (((c[4 * q + 1] >> 8) & 0xff) << 8) |
                                (((c[4 * q + 2] >> 8) & 0xff) << 16) |
                                ((unsigned int)((c[4 * q + 3] >> 8) & 0xff) << 24);
                    }
                    lo = make_uint4(l[0], l[1], l[2], l[3]);
                    hi = make_uint4(hh[0], hh[1], hh[2], hh[3]);
                    f = fin ? pow2f(E - 15) : __uint_as_float(0x7fc00000u);
                }
                limbs[h * P + p] = lo;        // lo_even, lo_odd
                limbs[(2 + h) * P + p] = hi;  // hi_even, hi_odd
                fac[b] = f;
            } else {
                uint4 cw = make_uint4(0, 0, 0, 0);
                float f = METRALE_NEG_ZERO;
                if (b < B && row < m) {
                    cw = *(const uint4*)((const unsigned char*)act + (size_t)row * lda + (size_t)b * 16);
                    f = afac[(size_t)row * B + b];
                }
                limbs[h * P + p] = cw;
                fac[b] = f;
            }
        }
        __syncthreads();

        // ---- columns: one warp per column, persistent over the grid ----
        for (int n = blockIdx.x * NVFP4_WARPS + warp; n < N; n += gridDim.x * NVFP4_WARPS) {
            const unsigned char* wrow = set.w + (size_t)n * (size_t)(K >> 1);
            const unsigned char* srow = set.ws + (size_t)n * (size_t)B;
            float keep0[R], keep1[R];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                keep0[r] = METRALE_NEG_ZERO;
                keep1[r] = METRALE_NEG_ZERO;
            }
            for (int c0 = 0; c0 < C; c0 += NVFP4_UNROLL) {
                uint4 wv[NVFP4_UNROLL];
                unsigned int sc[NVFP4_UNROLL];
#pragma unroll
                for (int u = 0; u < NVFP4_UNROLL; ++u) {
                    const int c = c0 + u;
                    const int p = c * 32 + lane, b0 = 2 * p;
                    wv[u] = make_uint4(0, 0, 0, 0);
                    sc[u] = 0;
                    if (c < C && b0 < B) {
                        if (EVEN) {
                            wv[u] = __ldg((const uint4*)(wrow + (size_t)p * 16));
                            sc[u] = __ldg((const unsigned short*)(srow + (size_t)b0));
                        } else {
                            uint2 a = __ldg((const uint2*)(wrow + (size_t)b0 * 8));
                            wv[u].x = a.x;
                            wv[u].y = a.y;
                            sc[u] = __ldg(srow + b0);
                            if (b0 + 1 < B) {
                                uint2 bb = __ldg((const uint2*)(wrow + (size_t)(b0 + 1) * 8));
                                wv[u].z = bb.x;
                                wv[u].w = bb.y;
                                sc[u] |= (unsigned int)__ldg(srow + b0 + 1) << 8;
                            }
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < NVFP4_UNROLL; ++u) {
                    const int c = c0 + u;
                    if (c >= C) break;
                    const int p = c * 32 + lane, b0 = 2 * p;
                    const bool ve_ok = b0 < B, vo_ok = b0 + 1 < B;
                    unsigned int ce0, ce1, ce2, ce3, co0, co1, co2, co3;
                    nib8_codes(wv[u].x, ce0, ce1);
                    nib8_codes(wv[u].y, ce2, ce3);
                    nib8_codes(wv[u].z, co0, co1);
                    nib8_codes(wv[u].w, co2, co3);
                    const float wse = e4m3_to_f32(sc[u] & 0xffu);
                    const float wso = e4m3_to_f32(sc[u] >> 8);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const unsigned char* rb = smem + (size_t)r * rowbytes;
                        const uint4* limbs = (const uint4*)rb;
                        const float2 f = ((const float2*)(rb + (size_t)P * 16 * LW))[p];
                        float ve, vo;
                        if (MODE == 0) {
                            const uint4 le = limbs[p], lo = limbs[P + p];
                            const uint4 he = limbs[2 * P + p], ho = limbs[3 * P + p];
                            int sle = dp4a_su(ce0, le.x, 0);
                            sle = dp4a_su(ce1, le.y, sle);
                            sle = dp4a_su(ce2, le.z, sle);
                            sle = dp4a_su(ce3, le.w, sle);
                            int she = dp4a_ss(ce0, he.x, 0);
                            she = dp4a_ss(ce1, he.y, she);
                            she = dp4a_ss(ce2, he.z, she);
                            she = dp4a_ss(ce3, he.w, she);
                            int slo = dp4a_su(co0, lo.x, 0);
                            slo = dp4a_su(co1, lo.y, slo);
                            slo = dp4a_su(co2, lo.z, slo);
                            slo = dp4a_su(co3, lo.w, slo);
                            int sho = dp4a_ss(co0, ho.x, 0);
                            sho = dp4a_ss(co1, ho.y, sho);
                            sho = dp4a_ss(co2, ho.z, sho);
                            sho = dp4a_ss(co3, ho.w, sho);
                            const int se = she * 256 + sle, so = sho * 256 + slo;
                            ve = ((float)se * wse) * f.x;
                            vo = ((float)so * wso) * f.y;
                        } else {
                            const uint4 ae = limbs[p], ao = limbs[P + p];
                            int se = dp4a_ss(ce0, ae.x, 0);
                            se = dp4a_ss(ce1, ae.y, se);
                            se = dp4a_ss(ce2, ae.z, se);
                            se = dp4a_ss(ce3, ae.w, se);
                            int so = dp4a_ss(co0, ao.x, 0);
                            so = dp4a_ss(co1, ao.y, so);
                            so = dp4a_ss(co2, ao.z, so);
                            so = dp4a_ss(co3, ao.w, so);
                            ve = (((float)se * wse) * f.x) * 0.25f;
                            vo = (((float)so * wso) * f.y) * 0.25f;
                        }
                        const float pair = (ve_ok ? ve : METRALE_NEG_ZERO) + (vo_ok ? vo : METRALE_NEG_ZERO);
                        const float root = warp_sum_tree(pair);
                        if (lane == (c & 31)) {
                            if (c < 32) keep0[r] = root;
                            else keep1[r] = root;
                        }
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float root = warp_sum_tree(keep0[r]);
                if (C > 32) root = root + warp_sum_tree(keep1[r]);
                const int row = row0 + r;
                if (lane == r && row < m) set.out[(size_t)row * set.ldo + n] = f32_to_bf16(root * set.rowscale);
            }
        }
    }
}
