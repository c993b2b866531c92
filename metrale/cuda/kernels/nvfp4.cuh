// nvfp4.cuh -- the NVFP4 projection body shared by nvfp4_gemv.cu (A16) and nvfp4_a4.cu (A4).
//
// arithmetic.md § projection for NVFP4 weights (uint8 [N, K/2], e4m3 scales [N, B], B = K/16):
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

// @defines NVFP4 (NVFP4_WARPS from metrale/cuda/configs.py)
#define NVFP4_THREADS (NVFP4_WARPS * 32)
#define NVFP4_UNROLL 4

struct WeightSet {
    const unsigned char* w;    // codes (NVFP4: [N, K/2])
    const unsigned char* ws;   // scales (NVFP4: [N, B] e4m3 bits)
    float rowscale;
    unsigned short* out;       // bf16 bits, rows of stride ldo
    long long ldo;
};

// The weight set of this CTA: blockIdx.z == 0 takes set 0, 1 takes set 1 (gate and up in one
// launch). Every NVFP4 kernel takes the two sets as these ten arguments.
__device__ __forceinline__ WeightSet weight_set_at(int z, const unsigned char* w0, const unsigned char* s0,
                                                 float rs0, unsigned short* out0, long long ldo0,
                                                 const unsigned char* w1, const unsigned char* s1, float rs1,
                                                 unsigned short* out1, long long ldo1) {
    WeightSet set;
    if (z == 0) {
        set.w = w0; set.ws = s0; set.rowscale = rs0; set.out = out0; set.ldo = ldo0;
    } else {
        set.w = w1; set.ws = s1; set.rowscale = rs1; set.out = out1; set.ldo = ldo1;
    }
    return set;
}
__device__ __forceinline__ WeightSet weight_set(const unsigned char* w0, const unsigned char* s0, float rs0,
                                              unsigned short* out0, long long ldo0, const unsigned char* w1,
                                              const unsigned char* s1, float rs1, unsigned short* out1,
                                              long long ldo1) {
    return weight_set_at(blockIdx.z, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);
}

// A16 codes c[16] of one block as the two limb words c = 256*hi + lo: lo[q] holds the unsigned
// low bytes of elements 4q..4q+3 (byte n = element 4q+n), hi[q] their signed high bytes.
__device__ __forceinline__ void a16_limbs(const int c[16], unsigned int lo[4], unsigned int hi[4]) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        lo[q] = (c[4 * q] & 0xff) | ((c[4 * q + 1] & 0xff) << 8) | ((c[4 * q + 2] & 0xff) << 16) |
                ((unsigned int)(c[4 * q + 3] & 0xff) << 24);
        hi[q] = ((c[4 * q] >> 8) & 0xff) | (((c[4 * q + 1] >> 8) & 0xff) << 8) |
                (((c[4 * q + 2] >> 8) & 0xff) << 16) | ((unsigned int)((c[4 * q + 3] >> 8) & 0xff) << 24);
    }
}

// The A16 codes c[4q] .. c[4q + 3] as f16 pairs (c[4q], c[4q + 1]) in w0[q] and (c[4q + 2],
// c[4q + 3]) in w1[q] (low half first): exact, |c| < 2^15 with at most 8 significant bits.
__device__ __forceinline__ unsigned int f16x2_of(int a, int b) {
    unsigned short ha, hb;
    asm("cvt.rn.f16.s32 %0, %1;" : "=h"(ha) : "r"(a));
    asm("cvt.rn.f16.s32 %0, %1;" : "=h"(hb) : "r"(b));
    return (unsigned int)ha | ((unsigned int)hb << 16);
}
__device__ __forceinline__ void a16_f16_words(const int c[16], unsigned int w0[4], unsigned int w1[4]) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        w0[q] = f16x2_of(c[4 * q], c[4 * q + 1]);
        w1[q] = f16x2_of(c[4 * q + 2], c[4 * q + 3]);
    }
}

// a16_limbs for 8 codes by byte permutes (|c| < 2^15: byte 0 the low limb, byte 1 the high).
__device__ __forceinline__ void a16_limbs8_prmt(const int c[8], unsigned int lo[2], unsigned int hi[2]) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const unsigned int t0 = prmt((unsigned int)c[4 * q], (unsigned int)c[4 * q + 1], 0x5140u);
        const unsigned int t1 = prmt((unsigned int)c[4 * q + 2], (unsigned int)c[4 * q + 3], 0x5140u);
        lo[q] = prmt(t0, t1, 0x5410u);
        hi[q] = prmt(t0, t1, 0x7632u);
    }
}

// The block factor of NVFP4 x A16: 2^(E - 15), or NaN for a non-finite activation block.
__device__ __forceinline__ float a16_factor(int E, bool fin) {
    return fin ? pow2f(E - 15) : __uint_as_float(0x7fc00000u);
}

// The A16 record of one block of bf16 bits xb[0..15]: its codes' limb words lo / hi (a16_limbs)
// and f = a16_factor.
__device__ __forceinline__ void a16_record(const unsigned short* xb, uint4& lo, uint4& hi, float& f) {
    unsigned short xs[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) xs[j] = xb[j];
    int c[16], E;
    bool fin;
    a16_block(xs, c, E, fin);
    unsigned int l[4], h[4];
    a16_limbs(c, l, h);
    lo = make_uint4(l[0], l[1], l[2], l[3]);
    hi = make_uint4(h[0], h[1], h[2], h[3]);
    f = a16_factor(E, fin);
}

// S of an A4 block: its weight code words c0..c3 (elements 0-3, 4-7, 8-11, 12-15) against its
// activation code words a (element n in byte n), both signed 2*e2m1.
__device__ __forceinline__ int a4_dot(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3,
                                      uint4 a) {
    return dp4a_ss4(c0, c1, c2, c3, a);
}

// The A4 block value (arithmetic.md § a4): ((f32(S) * f32(wscale)) * afac) * 0.25, afac = f32(ascale)
// or NaN for a non-finite activation block.
__device__ __forceinline__ float a4_value(int S, float wscale, float afac) {
    return (((float)S * wscale) * afac) * 0.25f;
}

// Shared-memory bytes per activation row: A16 72*P, A4 40*P (P = 32 * chunks).
template <int MODE> struct ActLayout { static constexpr int LIMB_WORDS = MODE == 0 ? 4 : 2; };

// MODE 0: A16 from bf16 rows x (act = x, lda in elements).
// MODE 1: A4 from codes int8 [m, K] (act, lda = K bytes) and afac f32 [m, B] (NaN: non-finite).
template <int MODE, int R, bool EVEN>
__device__ __forceinline__ void nvfp4_body(const void* act, long long lda, const float* afac, int m,
                                           WeightSet set, int N, int K) {
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
                if (b < B && row < m)
                    a16_record((const unsigned short*)act + (size_t)row * lda + (size_t)b * 16, lo, hi, f);
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
                            const int sle = dp4a_su4(ce0, ce1, ce2, ce3, le), she = dp4a_ss4(ce0, ce1, ce2, ce3, he);
                            const int slo = dp4a_su4(co0, co1, co2, co3, lo), sho = dp4a_ss4(co0, co1, co2, co3, ho);
                            const int se = she * 256 + sle, so = sho * 256 + slo;
                            ve = ((float)se * wse) * f.x;
                            vo = ((float)so * wso) * f.y;
                        } else {
                            const uint4 ae = limbs[p], ao = limbs[P + p];
                            ve = a4_value(a4_dot(ce0, ce1, ce2, ce3, ae), wse, f.x);
                            vo = a4_value(a4_dot(co0, co1, co2, co3, ao), wso, f.y);
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

// ---------------------------------------------------------------------------------------------
// Fast path (B % 64 == 0; MODE 0: A16, MODE 1: A4): the same block values and the same tree as
// nvfp4_body, with
//   * one CTA of FAST_THREADS per SM (persistent over columns), so each SM prepares the
//     activation records once (A16 by exact f32 steps: common.cuh's a16_block_f32; A4 by copying
//     the codes and factors of w4a4_quantize, fast_prologue_a4); the first weight items are
//     requested right after this thread's activation requests;
//   * work items of 256 blocks (4 chunks of 64) of one column: 2048 weight bytes, then 256
//     scale bytes. Each warp streams its items through its own ring of DEPTH shared-memory slots
//     with cp.async (fast_issue: lane l copies the 4 x 16 weight bytes it decodes, lanes 0-15 the
//     scales), DEPTH - 1 items in flight, across column boundaries; cp.async.wait_group + one
//     __syncwarp before an item is read (the ring replaced register prefetch: no spills, more
//     bytes in flight);
//   * lane l adds its pair v_2l + v_2l+1 of each chunk; the 4 chunks' 32-leaf trees run
//     "transposed": at xor 1 even lanes keep chunks 0 and 2 and odd lanes chunks 1 and 3 (each
//     lane sends the pair values it does not keep), at xor 2 lane l keeps chunk
//     (l & 1) + 2 ((l >> 1) & 1); xor 4, 8, 16 finish every chunk's aligned 64-block subtree,
//     then xor 1 and xor 2 give the item root (r0 + r1) + (r2 + r3) in every lane. Chunks past B
//     are -0.0 leaves (zero weights and scales, activation factor -0.0: (0 * 0) * -0.0 = -0.0).
//     Lane (item mod 32) keeps the item roots; their padded 32-leaf tree is the column root
//     (K <= 65536: at most 16 items) -- the contract's padded tree, cut at aligned nodes.
//   * block value A16: v = (f32(S) * f32(wscale)) * 2^(E - 15); A4: a4_value, as nvfp4_body; the
//     scales decoded by cvt.rn.f16x2.e4m3x2 (exact) and widened to f32.
//   * PDL-capable (metrale/cuda/pdl.py): pdl_trigger, then pdl_wait, before any memory access
//     (the (MODE, R) in FAST_RING_EARLY, bit 4 MODE + R, and the chain form below with
//     RUN_RING_EARLY: the rings' first weight items / slices before the wait).
// Shared memory: per chunk c and row r a 2304-byte record at (c * R + r) * 2304: A16 limbs lo even,
// lo odd, hi even, hi odd (4 x 512 B, slot = pair lane), A4 codes even, odd (2 x 512 B, the hi
// half unused), then the factors (float2 [32]); every warp load is one contiguous run and every
// offset inside an item is an immediate.
// R * 72 * P bytes of records, P = 128 * items, then the 16 rings (16 * DEPTH * 2304 bytes).
// ---------------------------------------------------------------------------------------------
// @defines NVFP4_FAST (FAST_THREADS, RUN_THREADS, RUN_SCALE_SLICES, FAST_RING_EARLY, RUN_RING_EARLY from metrale/cuda/configs.py)
#define FAST_WARPS (FAST_THREADS / 32)
#define FAST_REC 2304
#define FAST_PRE 3  // prologue units (half or whole blocks) per thread whose x is requested first

// Two e4m3 scales (low byte, high byte of v) -> f32, exactly (e4m3 is a subset of f16).
// f16 bits as f32, exact; the two f16 of h2 (low half first).
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ void f16x2_to_f32(unsigned int h2, float& lo, float& hi) {
    asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
        : "=f"(lo), "=f"(hi)
        : "r"(h2));
}
__device__ __forceinline__ void e4m3x2_to_f32(unsigned int v, float& lo, float& hi) {
    unsigned int h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)v));
    f16x2_to_f32(h2, lo, hi);
}

// The nibble decode of common.cuh's nib8_codes with its constants held in registers (k: the
// 4 tables and the selector base 0x32103210), so each step is one LOP3, SHF or PRMT.
struct NibConsts {
    unsigned int p0, p1, n0, n1, base;
};
__device__ __forceinline__ void nib8_codes_k(unsigned int w, const NibConsts& k, unsigned int& c0,
                                             unsigned int& c1) {
    const unsigned int mag = w & 0x77777777u;
    unsigned int sel;
    asm("lop3.b32 %0, %1, 0x44444444, %2, 0xEA;" : "=r"(sel) : "r"(w >> 1), "r"(k.base));  // (a & b) | c
    const unsigned int mag1 = mag >> 16, sel1 = sel >> 16;
    c0 = prmt(prmt(k.p0, k.p1, mag), prmt(k.n0, k.n1, mag), sel);
    c1 = prmt(prmt(k.p0, k.p1, mag1), prmt(k.n0, k.n1, mag1), sel1);
}

// The constants of nib8_codes_k in registers (mov, so the compiler keeps them live). BIASED: the
// tables of the codes + 128 (each byte XOR 0x80), the f16 mode's input.
// NIB_TABLES: p0, p1, n0, n1 (the codes of the nibbles 0-7 and of their negatives), base.
#define NIB_TABLES 0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu, 0x32103210u
template <bool BIASED = false>
__device__ __forceinline__ NibConsts nib_consts() {
    constexpr unsigned int X = BIASED ? 0x80808080u : 0u;
    constexpr unsigned int T[5] = {NIB_TABLES};
    NibConsts kc;
    asm volatile("mov.b32 %0, %1;" : "=r"(kc.p0) : "n"(T[0] ^ X));
    asm volatile("mov.b32 %0, %1;" : "=r"(kc.p1) : "n"(T[1] ^ X));
    asm volatile("mov.b32 %0, %1;" : "=r"(kc.n0) : "n"(T[2] ^ X));
    asm volatile("mov.b32 %0, %1;" : "=r"(kc.n1) : "n"(T[3] ^ X));
    asm volatile("mov.b32 %0, %1;" : "=r"(kc.base) : "n"(T[4]));
    return kc;
}
// The same (unbiased) tables read from global memory once (ptxas rematerialises a constant from
// a uniform register before every PRMT that takes it, however it was formed; a loaded value stays
// in its register): the chain decode kernels, 7 moves per block fewer.
__device__ unsigned int nib_tables[5] = {NIB_TABLES};
__device__ __forceinline__ NibConsts nib_consts_loaded() {
    const volatile unsigned int* t = nib_tables;
    return {t[0], t[1], t[2], t[3], t[4]};
}

// cp.async (LDGSTS, 16 bytes, L2 only) with a source size: 0 fills the 16 bytes with zeros and
// reads nothing (chunks past B, columns past N).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
// The same for 8 bytes (L1 allocating: cp.async.ca), source size 0 or 8.
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
// cp.async of 16 / 16 / 8 bytes where live, else nothing (the destination keeps what it held: the
// chain decode kernels' copies past the last column, whose runs are never stored). The first asks
// the L2 for the whole aligned 128 bytes around the source (those kernels read a run's weights in
// 64-byte slices at 8 times; 0-7 % faster on the H100 than sector requests at m = 1..4, 256 bytes
// no better: docs/performance-log.md).
#define CP_ASYNC_IF(NAME, COPY)                                                                           \
    __device__ __forceinline__ void NAME(void* dst, const void* src, bool live) {                         \
        const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);                               \
        asm volatile("{.reg .pred p; setp.ne.b32 p, %2, 0; @p " COPY ";}" ::"r"(d), "l"(src), "r"((int)live) \
                     : "memory");                                                                         \
    }
CP_ASYNC_IF(cp_async16_l2_128_if, "cp.async.cg.shared.global.L2::128B [%0], [%1], 16")
CP_ASYNC_IF(cp_async16_if, "cp.async.cg.shared.global [%0], [%1], 16")
CP_ASYNC_IF(cp_async8_if, "cp.async.ca.shared.global [%0], [%1], 8")
#undef CP_ASYNC_IF
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// cp.async of 4 bytes (LDGSTS through L1).
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
// The same with a source size of 0 (zeros, nothing read) or 4.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}

// One work item (256 blocks of one column: 2048 weight bytes, then 256 scale bytes) into a
// FAST_SLOT-byte ring slot of this warp: lane l copies its own weight bytes (l*16 + j*512 of
// chunk j, the bytes it decodes) and, for l < 16, scale bytes l*16..l*16+15. nvalid: chunks of
// 64 blocks present (4 = a full item; 0 = past the last column: zeros, no reads). One
// cp.async group per call.
// @defines NVFP4_FAST_SLOT (FAST_SLOT from metrale/cuda/configs.py)
// wi, si: the item's first weight / scale byte.
// CH8 (8-block chain parts): lane l's copy j (item bytes 512 j + 16 l: block pair p = l & 3 of
// lane o = 8 j + (l >> 2)'s part) goes where that lane reads it, p * 512 + (o ^ 2 p) * 16: the
// eight lanes of a copy phase write distinct 16-byte bank groups, as a read phase reads.
template <bool CH8 = false>
__device__ __forceinline__ void fast_issue(unsigned char* slot, const unsigned char* wi, const unsigned char* si,
                                           int lane, int nvalid) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const bool ok = j < nvalid;
        const int dst = CH8 ? (lane & 3) * 512 + ((8 * j + (lane >> 2)) ^ (2 * (lane & 3))) * 16 : j * 512 + lane * 16;
        cp_async16(slot + dst, ok ? wi + j * 512 + lane * 16 : wi, ok ? 16 : 0);
    }
    if (lane < 16) {
        const bool ok = (lane >> 2) < nvalid;
        cp_async16(slot + 2048 + lane * 16, ok ? si + lane * 16 : si, ok ? 16 : 0);
    }
    cp_async_commit();
}

// S of one block from its code words c0..c3 (elements 0-3, 4-7, 8-11, 12-15) and its limbs.
__device__ __forceinline__ int block_dot_codes(unsigned int c0, unsigned int c1, unsigned int c2,
                                               unsigned int c3, uint4 lo, uint4 hi) {
    const int sl = dp4a_su4(c0, c1, c2, c3, lo);
    return dp4a_ss4(c0, c1, c2, c3, hi) * 256 + sl;
}

// P/Q block dot: the same S as block_dot_codes from the raw weight words w0 (elements 0-7) and
// w1 (8-15). P = the codes of the positive weights, Q = the magnitudes of the negative ones, both
// by PRMT with the raw nibble as selector (its sign bit makes PRMT return the sign of a table
// byte, 0: the table holds |2 e2m1| < 128), Q from the nibbles with the sign flipped;
// S = (hi.P - hi.Q) * 256 + (lo.P - lo.Q), exact in int32. Fewer ALU-pipe instructions than
// nib8_codes_k (4 PRMT + 3 other per 8 codes against 6 + 5), twice the dp4a: on the H200 the
// one- and two-row kernels gain ~3 % with it, the three- and four-row kernels lose ~3 %.
__device__ __forceinline__ int block_dot_pq(unsigned int w0, unsigned int w1, uint4 lo, uint4 hi) {
    const unsigned int T0 = 0x03020100u, T1 = 0x0C080604u;  // |2 e2m1|: 0 1 2 3 | 4 6 8 12
    const unsigned int x0 = w0 ^ 0x88888888u, x1 = w1 ^ 0x88888888u;
    const unsigned int p0 = prmt(T0, T1, w0), p1 = prmt(T0, T1, w0 >> 16);
    const unsigned int p2 = prmt(T0, T1, w1), p3 = prmt(T0, T1, w1 >> 16);
    const unsigned int q0 = prmt(T0, T1, x0), q1 = prmt(T0, T1, x0 >> 16);
    const unsigned int q2 = prmt(T0, T1, x1), q3 = prmt(T0, T1, x1 >> 16);
    const int lp = dp4a_su4(p0, p1, p2, p3, lo), lq = dp4a_su4(q0, q1, q2, q3, lo);
    const int hp = dp4a_ss4(p0, p1, p2, p3, hi), hq = dp4a_ss4(q0, q1, q2, q3, hi);
    return (hp - hq) * 256 + (lp - lq);
}

// One A16 block's record from its 16 bf16 values w (two groups of 8, pair words): the limbs of
// its codes (a16_codes8_f32, a16_limbs8_prmt) as 16 bytes at lo (low limbs) and hi (high limbs),
// its factor a16_factor at fac; an invalid block (row past m) zeros and factor -0.0.
__device__ __forceinline__ void a16_block_record(const unsigned int (&w)[2][4], bool valid, unsigned char* lo,
                                                 unsigned char* hi, float* fac) {
    const unsigned int mx = max(a16_mag_max4(w[0]), a16_mag_max4(w[1]));
    int E = 0;
    bool fin = true;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        int c[8];
        a16_codes8_f32(w[e], mx, c, E, fin);
        unsigned int l[2], hh[2];
        a16_limbs8_prmt(c, l, hh);
        *(uint2*)(lo + e * 8) = valid ? make_uint2(l[0], l[1]) : make_uint2(0u, 0u);
        *(uint2*)(hi + e * 8) = valid ? make_uint2(hh[0], hh[1]) : make_uint2(0u, 0u);
    }
    *fac = valid ? a16_factor(E, fin) : METRALE_NEG_ZERO;
}

// Whole-block prologue units of the fast A16 kernels: unit it is block it % nblk of row row0 +
// it / nblk (blocks from B on and rows from m on are padding). The x bytes of this thread's first
// FAST_PRE units (it = tid + u * threads) as two 16-byte loads each, requested before the weight
// ring; zeros for padding and for rows not on 16-byte boundaries.
__device__ __forceinline__ void a16_x_prefetch(uint4 (&xv)[FAST_PRE][2], const unsigned short* x, long long ldx,
                                               int m, int row0, int B, int nblk, int nunits, int tid,
                                               int threads) {
#pragma unroll
    for (int u = 0; u < FAST_PRE; ++u) {
        const int it = tid + u * threads;
        xv[u][0] = xv[u][1] = make_uint4(0, 0, 0, 0);
        if (it < nunits) {
            const int r = it / nblk, b = it - r * nblk;
            const unsigned short* src = x + (size_t)(row0 + r) * ldx + (size_t)b * 16;
            if (row0 + r < m && b < B && (((size_t)src) & 15) == 0) {
                xv[u][0] = *(const uint4*)src;
                xv[u][1] = *(const uint4*)(src + 8);
            }
        }
    }
}
// The 16 bf16 values at src of this thread's prologue unit u as pair words w[2][4]: from
// a16_x_prefetch's xv for u < FAST_PRE on a 16-byte boundary, else two 16-byte loads, or 16
// two-byte loads off it; zeros where !valid.
__device__ __forceinline__ void a16_x_block(unsigned int (&w)[2][4], const uint4 (&xv)[FAST_PRE][2], int u,
                                            const unsigned short* src, bool valid) {
#pragma unroll
    for (int e = 0; e < 2; ++e) w[e][0] = w[e][1] = w[e][2] = w[e][3] = 0u;
    if (!valid) return;
    if ((((size_t)src) & 15) == 0) {
        static_assert(FAST_PRE == 3, "the selects below name xv[0..2]");
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const uint4 v = u == 0   ? xv[0][e]
                            : u == 1 ? xv[1][e]
                            : u == 2 ? xv[2][e]
                                     : *(const uint4*)(src + e * 8);
            w[e][0] = v.x, w[e][1] = v.y, w[e][2] = v.z, w[e][3] = v.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) w[j >> 2][j & 3] = (unsigned int)src[2 * j] | ((unsigned int)src[2 * j + 1] << 16);
    }
}

// The record (per row; record index x R + row) and pair slot q of block b of a column's
// activation records: the tree's chunk b >> 6, slot (b & 63) >> 1; CH8 (8-block chain parts,
// lane q the part of blocks 8 q .. 8 q + 7 of each 256-block item): record 4 (b >> 8) + pair
// (b >> 1) & 3 of the part, slot (b >> 3) & 31. Parity b & 1 picks the even / odd half either way.
template <bool CH8>
__device__ __forceinline__ int fast_rec(int b, int& q) {
    if constexpr (CH8) {
        q = (b >> 3) & 31;
        return ((b >> 8) << 2) + ((b >> 1) & 3);
    } else {
        q = (b & 63) >> 1;
        return b >> 6;
    }
}

// The prologue of nvfp4_fast_body for rows row0 .. row0+R-1 into the activation records at smem,
// with issue_ring() (the weight ring's first items) called after this thread's x requests. One row
// (R = 1): half-blocks over all FAST_THREADS threads (the two halves of a block in adjacent lanes,
// their maxima joined by a shuffle); more rows: whole blocks. Both give the same records (the
// half-block form was faster at R = 1 on the H200, the whole-block one at R = 2, 3).
template <int R, bool CH8, class IssueRing>
__device__ __forceinline__ void fast_prologue(unsigned char* smem, const unsigned short* x, long long ldx, int m,
                                              int row0, int B, int nblk, IssueRing&& issue_ring) {
    if constexpr (R == 1) {
        // the x bytes of this thread's first FAST_PRE prologue half-blocks, requested before the
        // weight ring (behind ~100 KB of weight requests per SM they arrived ~2 us late on the H200).
        // Half-block it: block bi = it >> 1 of the R rows (row r = bi / nblk, block bi % nblk),
        // elements 8 (it & 1) .. 8 (it & 1) + 7; the two halves of a block in adjacent lanes.
        const int nhalf = R * nblk * 2;  // a multiple of FAST_THREADS: every thread, every round
        uint4 xv[FAST_PRE];
        #pragma unroll
        for (int u = 0; u < FAST_PRE; ++u) {
            const int it = threadIdx.x + u * FAST_THREADS, bi = it >> 1;
            xv[u] = make_uint4(0, 0, 0, 0);
            if (it < nhalf) {
                const int r = bi / nblk, b = bi - r * nblk;
                const unsigned short* src = x + (size_t)(row0 + r) * ldx + (size_t)b * 16 + (it & 1) * 8;
                if (row0 + r < m && b < B && (((size_t)src) & 15) == 0) xv[u] = *(const uint4*)src;
            }
        }
        issue_ring();

        // ---- prologue: A16 codes of rows row0 .. row0+R-1; block b of row r: chunk c = b >> 6,
        //      slot q = (b & 63) >> 1, parity h = b & 1 in record (c * R + r); the half-block
        //      it & 1 writes limb bytes 8 (it & 1) .. 8 (it & 1) + 7 of its slot, half 0 the factor ----
        for (int it = threadIdx.x, u = 0; it < nhalf; it += FAST_THREADS, ++u) {
            const int bi = it >> 1, half = it & 1;
            const int r = bi / nblk, b = bi - r * nblk;
            const int h = b & 1;
            int q;
            unsigned char* rec = smem + (size_t)(fast_rec<CH8>(b, q) * R + r) * FAST_REC;
            const int row = row0 + r;
            const bool valid = row < m && b < B;
            unsigned int w4[4] = {0u, 0u, 0u, 0u};
            if (valid) {
                const unsigned short* src = x + (size_t)row * ldx + (size_t)b * 16 + half * 8;
                if ((((size_t)src) & 15) == 0) {
                    static_assert(FAST_PRE == 3, "the selects below name xv[0..2]");
                    const uint4 v = u == 0 ? xv[0] : u == 1 ? xv[1] : u == 2 ? xv[2] : *(const uint4*)src;
                    w4[0] = v.x, w4[1] = v.y, w4[2] = v.z, w4[3] = v.w;
                } else {
        #pragma unroll
                    for (int j = 0; j < 4; ++j) w4[j] = (unsigned int)src[2 * j] | ((unsigned int)src[2 * j + 1] << 16);
                }
            }
            unsigned int mx = a16_mag_max4(w4);
            mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the block's two halves
            int c[8];
            int E;
            bool fin;
            a16_codes8_f32(w4, mx, c, E, fin);
            unsigned int l[2], hh[2];
            a16_limbs8_prmt(c, l, hh);
            const uint2 lo = valid ? make_uint2(l[0], l[1]) : make_uint2(0u, 0u);
            const uint2 hi = valid ? make_uint2(hh[0], hh[1]) : make_uint2(0u, 0u);
            *(uint2*)(rec + h * 512 + q * 16 + half * 8) = lo;
            *(uint2*)(rec + (2 + h) * 512 + q * 16 + half * 8) = hi;
            if (half == 0) *(float*)(rec + 2048 + q * 8 + h * 4) = valid ? a16_factor(E, fin) : METRALE_NEG_ZERO;
        }
    } else {
        // whole blocks: unit it is block it of the R rows (row r = it / nblk, block it % nblk), its
        // two groups of 8 values (4 pair words, one uint4 each); the x bytes of this thread's first
        // FAST_PRE blocks are requested before the weight ring.
        const int nunits = R * nblk;  // a multiple of FAST_THREADS: every thread, every round
        uint4 xv[FAST_PRE][2];
        a16_x_prefetch(xv, x, ldx, m, row0, B, nblk, nunits, threadIdx.x, FAST_THREADS);
        issue_ring();

        // ---- prologue: A16 codes of rows row0 .. row0+R-1; block b of row r: chunk c = b >> 6,
        //      slot q = (b & 63) >> 1, parity h = b & 1 in record (c * R + r); group e (8 values)
        //      of a block writes limb bytes 8 e .. 8 e + 7 of its slot ----
        for (int it = threadIdx.x, u = 0; it < nunits; it += FAST_THREADS, ++u) {
            const int r = it / nblk, b = it - r * nblk;
            const int h = b & 1;
            int q;
            unsigned char* rec = smem + (size_t)(fast_rec<CH8>(b, q) * R + r) * FAST_REC;
            const int row = row0 + r;
            const bool valid = row < m && b < B;
            unsigned int w[2][4];
            a16_x_block(w, xv, u, x + (size_t)row * ldx + (size_t)b * 16, valid);
            a16_block_record(w, valid, rec + h * 512 + q * 16, rec + (2 + h) * 512 + q * 16,
                             (float*)(rec + 2048 + q * 8 + h * 4));
        }
    }
}

// The A4 prologue of nvfp4_fast_body: rows row0 .. row0+R-1 of codes (int8 [m, K], row stride ldc
// bytes, 16-byte aligned) and afac (f32 [m, B]) into the records by cp.async (one group), then
// issue_ring(). Block b of row r: chunk c = b >> 6, slot q = (b & 63) >> 1, parity h = b & 1 in
// record (c * R + r): its 16 code bytes at h * 512 + q * 16 (element n in byte n, the order of
// nib8_codes_k), its factor at 2048 + q * 8 + h * 4. Blocks past B and rows past m: zero codes,
// factor -0.0 (the padded tree's -0.0 leaf: ((0 * w) * -0.0) * 0.25 = -0.0).
template <int R, bool CH8, class IssueRing>
__device__ __forceinline__ void fast_prologue_a4(unsigned char* smem, const unsigned char* codes, long long ldc,
                                                 const float* afac, int m, int row0, int B, int nblk,
                                                 IssueRing&& issue_ring) {
    for (int it = threadIdx.x; it < R * nblk; it += FAST_THREADS) {
        const int r = it / nblk, b = it - r * nblk;
        const int h = b & 1;
        int q;
        unsigned char* rec = smem + (size_t)(fast_rec<CH8>(b, q) * R + r) * FAST_REC;
        const int row = row0 + r;
        const bool valid = row < m && b < B;
        const unsigned char* src = valid ? codes + (size_t)row * ldc + (size_t)b * 16 : codes;
        cp_async16(rec + h * 512 + q * 16, src, valid ? 16 : 0);
        float* fac = (float*)(rec + 2048 + q * 8 + h * 4);
        if (valid) cp_async4(fac, afac + (size_t)row * B + b);
        else *fac = METRALE_NEG_ZERO;
    }
    cp_async_commit();
    issue_ring();
}

// MODE 0 (A16): act = bf16 rows x (lda in elements), afac unused; PQ: block_dot_pq instead of
// nib8_codes_k + block_dot_codes (same S). MODE 1 (A4): act = codes (lda = row stride in bytes, a
// multiple of 16) and afac of w4a4_quantize; PQ false.
// CH8: the chain with 8-block parts (docs/chain-revision.md, "The part size"; chain.project_chain
// with chain.PART_BLOCKS = 8), a probe of that choice: lane l chains the blocks 8 l .. 8 l + 7 of
// each item (c = fma(P_b, f_b, c) from -0.0, P_b and f_b as nvfp4_run_body's), the 32 part roots
// an aligned subtree of the tree over parts (xor 1 .. 16), the items as the tree's.
template <int MODE, int R, int DEPTH, bool PQ, bool CH8 = false>
__device__ __forceinline__ void nvfp4_fast_body(const void* act, long long lda, const float* afac, int m,
                                                WeightSet set, int N, int K) {
    static_assert(MODE == 0 || !PQ, "the P/Q block dot is A16's");
    extern __shared__ __align__(16) unsigned char smem[];
    const int B = K >> 4;
    const int C64 = B >> 6;            // chunks of 64 blocks; B % 64 == 0
    const int items = (C64 + 3) >> 2;  // work items (256 blocks) per column
    const int nblk = items << 8;       // blocks incl. the -0.0 padding of the last item
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int ngroups = (m + R - 1) / R;
    const int n_first = blockIdx.x * FAST_WARPS + warp, n_step = gridDim.x * FAST_WARPS;
    const long long wrow = (long long)(K >> 1);
    // this warp's ring of DEPTH slots, after the activation records (R * items * 4 records)
    unsigned char* const ring = smem + (size_t)R * items * 4 * FAST_REC + (size_t)warp * DEPTH * FAST_SLOT;
    const NibConsts kc = nib_consts();

    // PDL (common.cuh, metrale/cuda/pdl.py): the next launch may start now; nothing is read
    // before the previous grid has completed (an L2 prefetch of the first weight items here was
    // slower on the H200: the prologue's x requests queued behind it), but where FAST_RING_EARLY
    // holds this (MODE, R) the ring's first DEPTH - 1 items, copied into their slots before the wait.
    constexpr bool early = ((FAST_RING_EARLY >> (4 * MODE + R)) & 1) != 0;
    pdl_trigger();
    if constexpr (!early) pdl_wait();

    for (int g = blockIdx.y; g < ngroups; g += gridDim.y) {
        const int row0 = g * R;
        __syncthreads();
        // issue cursor: column n_i, item s_i
        int n_i = n_first, s_i = 0;
        auto issue = [&](int slot) {
            const bool live = n_i < N;
            const unsigned char* wi = live ? set.w + (long long)n_i * wrow + (long long)s_i * 2048 : set.w;
            const unsigned char* si = live ? set.ws + (long long)n_i * B + s_i * 256 : set.ws;
            fast_issue<CH8>(ring + slot * FAST_SLOT, wi, si, lane, live ? C64 - 4 * s_i : 0);
            if (++s_i == items) {
                s_i = 0;
                n_i += n_step;
            }
        };
        auto issue_ring = [&]() {
#pragma unroll
            for (int d = 0; d < DEPTH - 1; ++d) issue(d);
        };
        if constexpr (early) {
            issue_ring();
            pdl_wait();
        }
        auto prologue_ring = [&]() {  // where the prologue issues the ring (after its x requests)
            if constexpr (!early) issue_ring();
        };
        if constexpr (MODE == 0) {
            fast_prologue<R, CH8>(smem, (const unsigned short*)act, lda, m, row0, B, nblk, prologue_ring);
        } else {
            fast_prologue_a4<R, CH8>(smem, (const unsigned char*)act, lda, afac, m, row0, B, nblk, prologue_ring);
            // the records' group (the ring's DEPTH - 1 may still fly when issued after it)
            cp_async_wait<early ? 0 : DEPTH - 1>();
        }
        __syncthreads();

        const bool odd1 = (lane & 1) != 0, odd2 = (lane & 2) != 0;
        float keep[R], last[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            keep[r] = METRALE_NEG_ZERO;
            last[r] = METRALE_NEG_ZERO;
        }
        int n = n_first, s = 0;
        // this lane's limbs and factors in the current item's first record
        const unsigned char* const a0 = smem + lane * 16;
        const unsigned char* const f0 = smem + 2048 + lane * 8;
        const unsigned char* ap = a0;
        const unsigned char* fp = f0;
        while (n < N) {
#pragma unroll
            for (int d = 0; d < DEPTH; ++d) {
                if (n >= N) break;
                cp_async_wait<DEPTH - 2>();  // this lane's copies of the item in slot d landed
                __syncwarp();                // ... and every lane's (the scales); slot d-1 is free
                issue((d + DEPTH - 1) % DEPTH);
                const unsigned char* const cur = ring + d * FAST_SLOT;
                float pr[R][4];
                float ch[R];  // CH8: this lane's part chain
#pragma unroll
                for (int r = 0; r < R; ++r) ch[r] = METRALE_NEG_ZERO;
                uint2 sc8 = make_uint2(0u, 0u);  // CH8: this lane's 8 scale bytes, one load
                if constexpr (CH8) sc8 = *(const uint2*)(cur + 2048 + lane * 8);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint4 wv = *(const uint4*)(cur + j * 512 + (CH8 ? lane ^ (2 * j) : lane) * 16);
                    const unsigned int sc = CH8 ? (((j < 2 ? sc8.x : sc8.y) >> (16 * (j & 1))) & 0xFFFFu)
                                                : *(const unsigned short*)(cur + 2048 + j * 64 + lane * 2);
                    unsigned int e0 = 0, e1 = 0, e2 = 0, e3 = 0, o0 = 0, o1 = 0, o2 = 0, o3 = 0;
                    if (!PQ) {
                        nib8_codes_k(wv.x, kc, e0, e1);
                        nib8_codes_k(wv.y, kc, e2, e3);
                        nib8_codes_k(wv.z, kc, o0, o1);
                        nib8_codes_k(wv.w, kc, o2, o3);
                    }
                    float we, wo;
                    e4m3x2_to_f32(sc, we, wo);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const int off = (j * R + r) * FAST_REC;
                        const uint4 le = *(const uint4*)(ap + off);  // A4: the codes
                        const uint4 lo = *(const uint4*)(ap + off + 512);
                        uint4 hE, hO;  // A16 only
                        if constexpr (MODE == 0) {
                            hE = *(const uint4*)(ap + off + 1024);
                            hO = *(const uint4*)(ap + off + 1536);
                        }
                        const float2 f = *(const float2*)(fp + off);
                        if constexpr (MODE == 0) {
                            const int se = PQ ? block_dot_pq(wv.x, wv.y, le, hE)
                                              : block_dot_codes(e0, e1, e2, e3, le, hE);
                            const int so = PQ ? block_dot_pq(wv.z, wv.w, lo, hO)
                                              : block_dot_codes(o0, o1, o2, o3, lo, hO);
                            if constexpr (CH8) {
                                ch[r] = __fmaf_rn((float)se * f.x, we, ch[r]);
                                ch[r] = __fmaf_rn((float)so * f.y, wo, ch[r]);
                            } else {
                                const float ve = ((float)se * we) * f.x;
                                const float vo = ((float)so * wo) * f.y;
                                pr[r][j] = ve + vo;
                            }
                        } else if constexpr (CH8) {
                            ch[r] = __fmaf_rn(((float)a4_dot(e0, e1, e2, e3, le) * f.x) * 0.25f, we, ch[r]);
                            ch[r] = __fmaf_rn(((float)a4_dot(o0, o1, o2, o3, lo) * f.y) * 0.25f, wo, ch[r]);
                        } else {
                            pr[r][j] = a4_value(a4_dot(e0, e1, e2, e3, le), we, f.x) +
                                       a4_value(a4_dot(o0, o1, o2, o3, lo), wo, f.y);
                        }
                    }
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float k;
                    if constexpr (CH8) {  // the item's 32 part roots: an aligned subtree over parts
                        k = ch[r];
#pragma unroll
                        for (int o = 1; o < 32; o <<= 1) k = k + __shfl_xor_sync(0xffffffffu, k, o);
                    } else {
                        // xor 1: even lanes keep chunks 0, 2; odd lanes chunks 1, 3
                        float k0 = odd1 ? pr[r][1] : pr[r][0];
                        const float t0 = odd1 ? pr[r][0] : pr[r][1];
                        float k1 = odd1 ? pr[r][3] : pr[r][2];
                        const float t1 = odd1 ? pr[r][2] : pr[r][3];
                        k0 = k0 + __shfl_xor_sync(0xffffffffu, t0, 1);
                        k1 = k1 + __shfl_xor_sync(0xffffffffu, t1, 1);
                        // xor 2: keep chunk (l & 1) + 2 ((l >> 1) & 1)
                        k = odd2 ? k1 : k0;
                        const float t = odd2 ? k0 : k1;
                        k = k + __shfl_xor_sync(0xffffffffu, t, 2);
                        k = k + __shfl_xor_sync(0xffffffffu, k, 4);
                        k = k + __shfl_xor_sync(0xffffffffu, k, 8);
                        k = k + __shfl_xor_sync(0xffffffffu, k, 16);
                        // chunk roots r0 (lanes 4i), r1 (4i+1), r2 (4i+2), r3 (4i+3): (r0 + r1) + (r2 + r3)
                        k = k + __shfl_xor_sync(0xffffffffu, k, 1);
                        k = k + __shfl_xor_sync(0xffffffffu, k, 2);
                    }
                    keep[r] = lane == s ? k : keep[r];
                    last[r] = k;  // the item root, in every lane
                }
                ap += 4 * R * FAST_REC;
                fp += 4 * R * FAST_REC;
                if (++s == items) {  // column done: the tree over its item roots, then the output
                    float val = 0.0f;
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const float root = items == 1 ? last[r] : warp_sum_tree(keep[r]);
                        val = lane == r ? root : val;
                        keep[r] = METRALE_NEG_ZERO;
                    }
                    if (lane < R && row0 + lane < m) {
                        set.out[(size_t)(row0 + lane) * set.ldo + n] = f32_to_bf16(val * set.rowscale);
                    }
                    s = 0;
                    ap = a0;
                    fp = f0;
                    n += n_step;
                }
            }
        }
        cp_async_wait<0>();  // the zero-filled copies past the last column, before the ring is reused
    }
}

// ---------------------------------------------------------------------------------------------
// The fast path on the block-value chain (docs/chain-revision.md; metrale/reference/chain.py is
// the reference; tile.CHAIN routes it), B % 64 == 0 and Q = B / 64 <= RUN_THREADS chain parts
// per column:
//   * a run is one (column, part): its 64 blocks in K order, one thread's. A CTA round is the
//     runs of C = RUN_THREADS / Q whole columns, part-major: thread t takes part t / C of column
//     t % C of the round (threads from C Q on idle, reading part Q - 1), so that the lanes of a
//     warp read at most two parts' record slots at a time; rounds are persistent over the grid;
//   * a run streams in 8 slices of 8 blocks through its warp's ring (FAST_SLOT bytes per slice:
//     lane l's 64 weight bytes at 64 l, 16-byte chunk c at chunk c ^ ((l >> 1) & 3) so that the
//     lanes of one load phase hit distinct banks, then its 8 scale bytes at 2048 + 8 l), DEPTH -
//     1 slices in flight (cp.async, the weights copied by four lanes per run slice, the L2 asked
//     for 128 bytes per request), across rounds; with RUN_SCALE_SLICES = SG > 1 a run's scales of
//     SG slices come with the group's first slice (8 SG bytes: whole sectors) into a per-warp
//     ring of group buffers after the rings;
//   * per block and row: S_b as nvfp4_fast_body (A16 limbs, or A4 codes), the term pair
//     P_b = f32(S_b) * 2^(E_b - 15) (A16, one rounding as ldexpf's where subnormal) or
//     (f32(S_b) * f32(ascale_b)) * 0.25 (A4, exact), f_b = f32(wscale_b); the chain
//     c = fma(P_b, f_b, c) from -0.0. Thread t ends the round with its part's root for each row;
//   * the tree over parts: the roots go to shared memory (roots[r][t], after the scale
//     buffers), __syncthreads, and thread j < C sums column j's Q roots in place by the padded
//     tree (at stride h = 1, 2, 4, ..: part p += part p + h for p a multiple of 2h where p + h
//     < Q; a missing partner is a -0.0 leaf, x + -0.0 = x), writes y = to_bf16(root * rowscale);
//     a second __syncthreads before the next round's roots.
// CTAs of RUN_THREADS threads (RUN_WARPS warps), one per SM: a thread's work comes in whole runs,
// so the CTA takes about as many runs per round as the Qwen3-8B down projection has per SM at
// one row (49,152 runs: 384 threads, C = 32, 128 rounds for 132 SMs).
#define RUN_WARPS (RUN_THREADS / 32)
// Activation records (per row r, R * B * 36 bytes): the limbs of block b = 64 j + p at slot
// p Q + j of three arrays, LO (16 bytes) | HI (16 bytes, A4: unused) | FAC (f32).
template <int MODE, int R, int DEPTH, bool PQ>
__device__ __forceinline__ void nvfp4_run_body(const void* act, long long lda, const float* afac, int m,
                                               WeightSet set, int N, int K) {
    static_assert(MODE == 0 || !PQ, "the P/Q block dot is A16's");
    extern __shared__ __align__(16) unsigned char smem[];
    const int B = K >> 4;
    const ChainRuns runs(B, RUN_THREADS);             // B % 64 == 0: Q = B / 64 whole parts
    const int Q = runs.Q, C = runs.C, used = C * Q;  // parts per column, columns per round, threads in use
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int ngroups = (m + R - 1) / R;
    const int rounds = runs.rounds(N);
    const long long wrow = (long long)(K >> 1);
    const size_t rec = (size_t)B * 36;  // bytes of one row's records
    unsigned char* const ring = smem + (size_t)R * rec + (size_t)warp * DEPTH * FAST_SLOT;
    // scale bytes: SG slices' worth per run and copy (8 SG bytes); SG = 1 in the slice's slot,
    // else a ring of NBUF group buffers of 32 runs per warp after all the rings: the copies run
    // DEPTH - 1 slices ahead, so up to NBUF - 1 groups past the one being read are written
    constexpr int SG = RUN_SCALE_SLICES, SGB = 8 * SG, SCH = SGB >= 16 ? SGB / 16 : 1;
    constexpr int NBUF = (SG - 1 + DEPTH - 1) / SG + 1;
    static_assert(SG == 1 || (SGB % 16 == 0 && 8 % SG == 0), "whole 16-byte copies, whole groups per run");
    unsigned char* const sbase = smem + (size_t)R * rec + (size_t)RUN_WARPS * DEPTH * FAST_SLOT;
    unsigned char* const sbuf = sbase + (size_t)warp * NBUF * 32 * SGB;
    float* const roots = (float*)(sbase + (SG > 1 ? (size_t)RUN_WARPS * NBUF * 32 * SGB : 0));  // [R][RUN_THREADS]
    const int lq = runs.part, lcol = runs.col;  // this thread's part, column in the round
    const int swz = (lane >> 1) & 3;
    const NibConsts kc = nib_consts_loaded();

    pdl_trigger();
    if (!RUN_RING_EARLY) pdl_wait();

    for (int g = blockIdx.y; g < ngroups; g += gridDim.y) {
        const int row0 = g * R;
        __syncthreads();
        // issue cursor: round it_i, slice s_i (8 per round). The warp copies a slice's weights
        // together, lane L chunk L & 3 of its runs (L >> 2) + 8 k (each 64-byte run slice by four
        // neighbouring lanes: whole sectors per request), and the scales.
        int cpy_col[4], cpy_off[4];  // per k: the run's column in the round and its part's byte offset
        bool cpy_ok[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int run = warp * 32 + (lane >> 2) + 8 * k;
            cpy_col[k] = run % C;
            cpy_off[k] = (run / C) * 512 + (lane & 3) * 16;
            cpy_ok[k] = run < used;
        }
        int sc_col[SCH], sc_off[SCH];  // SG > 1: lane L's scale copies, chunk q % SCH of lane q / SCH's run
        bool sc_ok[SCH];
#pragma unroll
        for (int i = 0; i < SCH; ++i) {
            const int q = lane + 32 * i, run = warp * 32 + q / SCH;
            sc_col[i] = run % C;
            sc_off[i] = (run / C) * 64 + (q % SCH) * 16;
            sc_ok[i] = run < used;
        }
        int it_i = blockIdx.x, s_i = 0, g_i = 0;  // g_i: scale groups issued (SG > 1)
        // lane L's 16-byte chunk L & 3 of run L >> 2 in a slot (the consumer's swizzle, chunk c of
        // run r at c ^ ((r >> 1) & 3))
        const int cpy_dst = (lane >> 2) * 64 + (((lane & 3) ^ ((lane >> 3) & 3)) << 4);
        // the copy sources of round it_i and whether they are live (bit k: wsrc[k], bit 4 + i:
        // ssrc[i]; a dead copy is skipped: its run is past the last column, never stored), formed
        // once per round; the sources advance with each slice
        const unsigned char* wsrc[4];
        const unsigned char* ssrc[SG == 1 ? 1 : SCH];
        unsigned int lv = 0;
        auto round_sources = [&]() {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int n = it_i * C + cpy_col[k];
                const bool live = it_i < rounds && cpy_ok[k] && n < N;
                wsrc[k] = set.w + (long long)n * wrow + cpy_off[k];
                lv = live ? lv | 1u << k : lv & ~(1u << k);
            }
            if constexpr (SG == 1) {
                const int n = it_i * C + lcol;
                const bool live = it_i < rounds && t < used && n < N;
                ssrc[0] = set.ws + (long long)n * B + 64 * lq;
                lv = live ? lv | 16u : lv & ~16u;
            } else {
#pragma unroll
                for (int i = 0; i < SCH; ++i) {
                    const int n = it_i * C + sc_col[i];
                    const bool live = it_i < rounds && sc_ok[i] && n < N;
                    ssrc[i] = set.ws + (long long)n * B + sc_off[i];
                    lv = live ? lv | 16u << i : lv & ~(16u << i);
                }
            }
        };
        round_sources();
        auto issue = [&](int slot) {
            unsigned char* dst = ring + slot * FAST_SLOT;
#pragma unroll
            for (int k = 0; k < 4; ++k) {  // run (lane >> 2) + 8 k: its chunk swizzle is k's too
                cp_async16_l2_128_if(dst + cpy_dst + 512 * k, wsrc[k], lv >> k & 1);
                wsrc[k] += 64;
            }
            if constexpr (SG == 1) {
                cp_async8_if(dst + 2048 + lane * 8, ssrc[0], lv >> 4 & 1);
                ssrc[0] += 8;
            } else if ((unsigned)s_i % SG == 0) {
                unsigned char* sdst = sbuf + ((unsigned)g_i++ % NBUF) * 32 * SGB;
#pragma unroll
                for (int i = 0; i < SCH; ++i) {
                    cp_async16_if(sdst + (lane + 32 * i) * 16, ssrc[i], lv >> (4 + i) & 1);
                    ssrc[i] += 8 * SG;
                }
            }
            cp_async_commit();
            if (++s_i == 8) {
                s_i = 0;
                it_i += gridDim.x;
                round_sources();
            }
        };
        // A16: the x bytes of this thread's first FAST_PRE blocks are requested before the ring;
        // with RUN_RING_EARLY the ring's first DEPTH - 1 slices (weights and their scales, which
        // no launch of the FFN writes: metrale/cuda/pdl.py) go first, before the PDL wait, and
        // the activations after it
        auto issue_ring = [&]() {
#pragma unroll
            for (int d = 0; d < DEPTH - 1; ++d) issue(d);
        };
        uint4 xv[FAST_PRE][2];
        if constexpr (RUN_RING_EARLY) {
            issue_ring();
            pdl_wait();
        }
        if constexpr (MODE == 0) a16_x_prefetch(xv, (const unsigned short*)act, lda, m, row0, B, B, R * B, t, RUN_THREADS);
        if constexpr (!RUN_RING_EARLY) issue_ring();

        // ---- prologue: the records of rows row0 .. row0 + R - 1 (block b = 64 j + p at slot p Q + j) ----
        for (int it = t, u = 0; it < R * B; it += RUN_THREADS, ++u) {
            const int r = it / B, b = it - r * B;
            const int row = row0 + r;
            const bool valid = row < m;
            unsigned char* lo = smem + (size_t)r * rec + (size_t)((b & 63) * Q + (b >> 6)) * 16;
            unsigned char* hi = lo + (size_t)B * 16;
            float* fac = (float*)(smem + (size_t)r * rec + (size_t)B * 32) + (b & 63) * Q + (b >> 6);
            if constexpr (MODE == 0) {
                unsigned int w[2][4];
                a16_x_block(w, xv, u, (const unsigned short*)act + (size_t)row * lda + (size_t)b * 16, valid);
                a16_block_record(w, valid, lo, hi, fac);
            } else {
                const unsigned char* src = valid ? (const unsigned char*)act + (size_t)row * lda + (size_t)b * 16
                                                 : (const unsigned char*)act;
                cp_async16(lo, src, valid ? 16 : 0);
                if (valid) cp_async4(fac, afac + (size_t)row * B + b);
                else *fac = METRALE_NEG_ZERO;
            }
        }
        if constexpr (MODE == 1) {
            cp_async_commit();
            cp_async_wait<0>();  // the records (and the ring's first slices)
        }
        __syncthreads();

        const unsigned char* const alo = smem + (size_t)lq * 16;  // slot p Q + lq: + p Q 16
        const float* const afc = (const float*)(smem + (size_t)B * 32) + lq;
        float c[R];
#pragma unroll
        for (int r = 0; r < R; ++r) c[r] = -0.0f;
        int it = blockIdx.x, s = 0, g_c = 0;  // g_c: the scale group being read (SG > 1)
        while (it < rounds) {
#pragma unroll
            for (int d = 0; d < DEPTH; ++d) {
                if (it >= rounds) break;
                cp_async_wait<DEPTH - 2>();  // this lane's copies into slot d landed
                __syncwarp();                // ... and every lane's; every lane is past slot d - 1
                issue((d + DEPTH - 1) % DEPTH);
                const unsigned char* const cur = ring + d * FAST_SLOT;
                const uint2 scw = SG == 1 ? *(const uint2*)(cur + 2048 + lane * 8)
                                          : *(const uint2*)(sbuf + ((unsigned)g_c % NBUF) * 32 * SGB + lane * SGB + ((unsigned)s % SG) * 8);
                if ((unsigned)s % SG == SG - 1) ++g_c;
                float ws[8];
                e4m3x2_to_f32(scw.x, ws[0], ws[1]);
                e4m3x2_to_f32(scw.x >> 16, ws[2], ws[3]);
                e4m3x2_to_f32(scw.y, ws[4], ws[5]);
                e4m3x2_to_f32(scw.y >> 16, ws[6], ws[7]);
#pragma unroll
                for (int h = 0; h < 4; ++h) {  // blocks 2h, 2h + 1 of the slice: chunk h
                    const uint4 wv = *(const uint4*)(cur + lane * 64 + ((h ^ swz) << 4));
                    unsigned int e0 = 0, e1 = 0, e2 = 0, e3 = 0, o0 = 0, o1 = 0, o2 = 0, o3 = 0;
                    if (!PQ) {
                        nib8_codes_k(wv.x, kc, e0, e1);
                        nib8_codes_k(wv.y, kc, e2, e3);
                        nib8_codes_k(wv.z, kc, o0, o1);
                        nib8_codes_k(wv.w, kc, o2, o3);
                    }
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        const int p = 8 * s + 2 * h + u;  // block of the part
#pragma unroll
                        for (int r = 0; r < R; ++r) {
                            const unsigned char* lo = alo + (size_t)r * rec + (size_t)p * Q * 16;
                            const uint4 L = *(const uint4*)lo;
                            const float f = afc[(size_t)r * (rec / 4) + p * Q];
                            float P;
                            if constexpr (MODE == 0) {
                                const uint4 H = *(const uint4*)(lo + (size_t)B * 16);
                                const int S = PQ ? block_dot_pq(u ? wv.z : wv.x, u ? wv.w : wv.y, L, H)
                                                 : (u ? block_dot_codes(o0, o1, o2, o3, L, H)
                                                      : block_dot_codes(e0, e1, e2, e3, L, H));
                                P = ieee_mul((float)S, f);
                            } else {
                                const int S = u ? a4_dot(o0, o1, o2, o3, L) : a4_dot(e0, e1, e2, e3, L);
                                P = ieee_mul((float)S, f) * 0.25f;
                            }
                            c[r] = ieee_fma(P, ws[2 * h + u], c[r]);
                        }
                    }
                }
                if (++s == 8) {  // the round's runs are done: the tree over each column's parts
                    const int n = it * C + t;
                    chain_round_tree<R, RUN_THREADS>(roots, c, Q, C, [&](int r, float root) {
                        if (n < N && row0 + r < m)
                            set.out[(size_t)(row0 + r) * set.ldo + n] = f32_to_bf16(ieee_mul(root, set.rowscale));
                    });
#pragma unroll
                    for (int r = 0; r < R; ++r) c[r] = -0.0f;
                    s = 0;
                    it += gridDim.x;
                }
            }
        }
        cp_async_wait<0>();  // the zero-filled copies past the last round, before the ring is reused
    }
}

// ---------------------------------------------------------------------------------------------
// The generic kernels on the block-value chain (nvfp4_a16c_r{R} / nvfp4_a4c_r{R}; chain.py's
// project_chain is the reference): any B, Q = ceil(B / 64) <= NVFP4_THREADS chain parts per
// column, the last holding B - 64 (Q - 1) blocks. The fast kernels' runs (nvfp4_run_body) without
// their rings:
//   * a run is one (column, part), one thread's, its blocks in K order; a CTA round is the runs
//     of C = NVFP4_THREADS / Q whole columns, part-major (thread t: part t / C of column t % C,
//     threads from C Q on idle); rounds persistent over grid.x, groups of R rows over grid.y;
//   * the records of the R rows in shared memory (block b = 64 j + p at slot p Q + j: the lanes of
//     a warp read neighbouring slots), as nvfp4_body's prologue forms them: A16 the codes' limbs
//     (lo | hi, 16 bytes each) and 2^(E_b - 15) (NaN: non-finite), A4 the codes and f32(ascale)
//     (NaN: non-finite);
//   * per block its 8 weight bytes and scale byte by __ldg, NVFP4_UNROLL blocks requested ahead;
//     S_b by dp4a, the term pair P_b = f32(S_b) * 2^(E_b - 15) (A16, one rounding as ldexpf's
//     where subnormal) or (f32(S_b) * f32(ascale_b)) * 0.25 (A4, exact), f_b = f32(wscale_b), the
//     chain c = fma(P_b, f_b, c) from -0.0;
//   * the tree over parts and the output as nvfp4_run_body's (roots [R][NVFP4_THREADS] after the
//     records).
// Dynamic shared memory R * 36 * 64 Q (A16; A4 R * 20 * 64 Q) + R * NVFP4_THREADS * 4 bytes.
template <int MODE, int R>
__device__ __forceinline__ void nvfp4_chain_body(const void* act, long long lda, const float* afac, int m,
                                                 WeightSet set, int N, int K) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int LIMBS = MODE == 0 ? 2 : 1;
    const int B = K >> 4, t = threadIdx.x;
    const ChainRuns runs(B, NVFP4_THREADS);
    const int Q = runs.Q, C = runs.C, S = 64 * Q;  // record slots per row
    const int lq = runs.part, lcol = runs.col, nb = runs.blocks;
    const int ngroups = (m + R - 1) / R, rounds = runs.rounds(N);
    const size_t rec = (size_t)S * (16 * LIMBS + 4);  // bytes of one row's records
    float* const roots = (float*)(smem + (size_t)R * rec);  // [R][NVFP4_THREADS]
    const long long wrow = (long long)(K >> 1);

    pdl_trigger();
    pdl_wait();

    for (int g = blockIdx.y; g < ngroups; g += gridDim.y) {
        const int row0 = g * R;
        __syncthreads();
        // ---- the records of rows row0 .. row0 + R - 1 ----
        for (int it = t; it < R * B; it += NVFP4_THREADS) {
            const int r = it / B, b = it - r * B, row = row0 + r;
            const int slot = (b & 63) * Q + (b >> 6);
            uint4* limbs = (uint4*)(smem + (size_t)r * rec) + slot;
            float* fac = (float*)(smem + (size_t)r * rec + (size_t)S * 16 * LIMBS) + slot;
            uint4 lo = make_uint4(0, 0, 0, 0), hi = make_uint4(0, 0, 0, 0);
            float f = METRALE_NEG_ZERO;
            if (row < m) {
                if (MODE == 0) {
                    a16_record((const unsigned short*)act + (size_t)row * lda + (size_t)b * 16, lo, hi, f);
                } else {
                    lo = *(const uint4*)((const unsigned char*)act + (size_t)row * lda + (size_t)b * 16);
                    f = afac[(size_t)row * B + b];
                }
            }
            limbs[0] = lo;
            if (MODE == 0) limbs[S] = hi;
            *fac = f;
        }
        __syncthreads();

        const uint4* const alo = (const uint4*)smem + lq;  // slot p Q + lq of row 0
        const float* const afc = (const float*)(smem + (size_t)S * 16 * LIMBS) + lq;
        for (int it = blockIdx.x; it < rounds; it += gridDim.x) {
            const int n = it * C + lcol;
            const bool live = n < N;
            const unsigned char* const wr = set.w + (long long)(live ? n : 0) * wrow + (long long)lq * 512;
            const unsigned char* const sr = set.ws + (long long)(live ? n : 0) * B + 64 * lq;
            const int nrun = live ? nb : 0;
            float c[R];
#pragma unroll
            for (int r = 0; r < R; ++r) c[r] = -0.0f;
            for (int p0 = 0; p0 < nrun; p0 += NVFP4_UNROLL) {
                uint2 wv[NVFP4_UNROLL];
                unsigned int sv[NVFP4_UNROLL];
#pragma unroll
                for (int u = 0; u < NVFP4_UNROLL; ++u) {
                    const int p = p0 + u < nrun ? p0 + u : 0;
                    wv[u] = __ldg((const uint2*)(wr + 8 * p));
                    sv[u] = __ldg(sr + p);
                }
#pragma unroll
                for (int u = 0; u < NVFP4_UNROLL; ++u) {
                    const int p = p0 + u;
                    if (p >= nrun) break;
                    unsigned int c0, c1, c2, c3;
                    nib8_codes(wv[u].x, c0, c1);
                    nib8_codes(wv[u].y, c2, c3);
                    const float ws = e4m3_to_f32(sv[u]);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const uint4* const lr = (const uint4*)((const unsigned char*)alo + (size_t)r * rec) + p * Q;
                        const float f = afc[(size_t)r * (rec / 4) + p * Q];
                        float P;
                        if constexpr (MODE == 0) {
                            const int s = dp4a_ss4(c0, c1, c2, c3, lr[S]) * 256 + dp4a_su4(c0, c1, c2, c3, lr[0]);
                            P = ieee_mul((float)s, f);
                        } else {
                            P = ieee_mul((float)a4_dot(c0, c1, c2, c3, lr[0]), f) * 0.25f;
                        }
                        c[r] = ieee_fma(P, ws, c[r]);
                    }
                }
            }
            const int nj = it * C + t;  // the round's runs are done: the tree over each column's parts
            chain_round_tree<R, NVFP4_THREADS>(roots, c, Q, C, [&](int r, float root) {
                if (nj < N && row0 + r < m)
                    set.out[(size_t)(row0 + r) * set.ldo + nj] = f32_to_bf16(ieee_mul(root, set.rowscale));
            });
        }
    }
}
