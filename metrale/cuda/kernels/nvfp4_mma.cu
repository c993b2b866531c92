// nvfp4_mma.cu -- NVFP4 weights x A16 or A4 activations on integer tensor cores: the small-m
// MMA kernels (K split across warps) and the prefill GEMM (arithmetic.md § a16, § a4,
// § projection; the CUDA-core kernels are in nvfp4_gemv.cu and nvfp4_a4.cu).
//
// Kernels (extern "C"):
//   w4a16_mma_prep(x, ldx, m, rows8, B, NB, act, fac)
//   w4a4_mma_prep(codes, ldc, afac, m, rows8, B, NB, act, fac)
//       grid ceil(rows8 * NB / 256), block 256; one thread per (row r < rows8, block b < NB),
//       rows8 a multiple of 8, NB a multiple of 8 (64 for the MMA kernels). A16: the block's
//       codes (common.cuh a16_block_int) split into limbs c = 256 hi + lo (lo u8, hi s8);
//       A4: lo = w4a4_quantize's 2 e2m1 codes (s8), hi = 0. Stored in mma B-fragment order:
//         act u32 [rows8/8][NB/2][32 lanes][4]: lane 4g+t, words (lo, hi) of block b (b even:
//             .x .y, odd: .z .w) hold elements 4t..4t+3 of row 8 nt + g;
//         fac f32 [rows8/8][NB/8][4 t][8 blocks][2 h] of row 8 nt + 2t + h: A16 2^(E-15), A4
//             f32(ascale) / 4 (NaN for a non-finite block; -0.0 for rows >= m and blocks >= B).
//   w4a16h_mma_prep(x, ldx, m, rows8, B, NB, act, fac)
//   w4a4h_mma_prep(codes, ldc, afac, m, rows8, B, NB, act, fac)
//       w4a16_mma_prep's / w4a4_mma_prep's grid, layout and factors; the words (lo, hi) hold the
//       codes as f16 pairs (elements 4t, 4t+1 and 4t+2, 4t+3) for the f16 mode (MODE 3).
//   {w4a16,w4a4,w4a16h,w4a4h}_mma_nt{1,2,3,4}_{a,u}(act, fac, m, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1,
//                                    ldo1, N, B, NB)
//       NT = ceil(m / 8) tiles of 8 rows; _a: B % 8 == 0 (16-byte weight, 8-byte scale loads),
//       _u: any B (8-byte weight loads, byte scale loads). grid (ceil(N / 16), 1, gz), block
//       32 MMA_WARPS; gz = 2 takes weight set 1 on blockIdx.z = 1 (gate and up). K is split
//       across the warps in runs of 64 blocks. Dynamic shared memory 16 * 8 NT * (NB / 64) floats.
//   {w4a16,w4a4,w4a16h,w4a4h}_gemm_nt{NT}_d{D}_b{MINB}_{a,u}(same arguments), the prefill GEMM: grid
//       (ceil(N / (16 GEMM_WARPS)), ceil(m / (8 NT)), gz), block 32 GEMM_WARPS; every warp one
//       tile of 16 columns x 8 NT rows over all of K (NB = 8 ceil(B / 8), S8 = NB / 8 <= 2^D).
//       No shared memory.
//
// Exactness. mma.sync.m16n8k16 s8 x s8 / s8 x u8 -> s32: k = 16 is exactly one quant block, so
// each accumulator is one block dot; weights are the A operand (16 output columns), activation
// rows the B operand (8 rows). A16: S_b = 256 S_hi + S_lo: the hi MMA runs first, its
// accumulator is shifted left by 8 and fed as C of the lo MMA (|S_b| < 2^23: exact in int32);
// v_b = (f32(S_b) * f32(wscale_b)) * fac. A4: one MMA (|S_b| <= 2304);
// v_b = ((f32(S_b) * f32(wscale_b)) * f32(ascale_b)) * 0.25, computed as (f32(S_b) * f32(wscale_b))
// * (ascale_b / 4) with ascale_b / 4 formed by the prep: every one of these products is exact
// (|S_b| <= 2304 has 12 significant bits, each e4m3 scale 4, so 20 bits at most, and the
// smallest nonzero product 2^-9 2^-9 2^-2 is a normal f32), so the order does not change a bit
// (arithmetic.md § kernel-notes). A16: every product one IEEE fp32 multiply (subnormals kept). Tree: a step is 8 aligned blocks (an 8-leaf subtree in
// registers). MMA kernels: a run is 8 steps = an aligned 64-block subtree (binary counter of
// depth 3); warps take runs round-robin and park the run roots in shared memory; the tree over
// the run roots (padded with -0.0) gives the root. GEMM: a binary counter over all steps (see
// nvfp4_gemm_body). Blocks past B have zero weights, zero scale and fac = -0.0:
// v = (0 * 0) * -0.0 = -0.0, the contract's padding leaf. y = f32_to_bf16(root * rowscale)
// (A4: rowscale = f32(input_scale * weight_scale_2)).
//
// The f16 mode (w4a16h, w4a4h: MODE 3) forms the same S_b with one mma.sync.m16n8k16.f32.f16.f16.f32:
// the weight codes 2 e2m1 and the A16 or A4 codes as f16 (all exact), every product an integer
// below 2^19 and every partial sum below 2^23, exact in the f32 accumulator whatever its order
// (arithmetic.md § kernel-notes; tests/gpu/test_f16_mma_block_dot.py checks the device); then the
// same v_b (the prep's factor: 2^(E-15) or ascale / 4), tree and output: the same bits as w4a16 /
// w4a4.
//
// Weight loads. Lane (g, t) loads 16 bytes of weight rows n0 + g and n0 + g + 8 at byte 16 t of
// each 64-byte step (blocks 2t, 2t+1); a 4 x 4 transpose of 16-bit pieces across the 4 lanes
// of a group (two shfl_xor stages) gives lane t the elements 4t..4t+3 of each of the 8 blocks,
// which nib8 decode turns into the A fragments. Any k order inside a block is exact.
#include "mma_gemm.cuh"

// ---- prologues ----
extern "C" __global__ void __launch_bounds__(256) w4a16_mma_prep(const unsigned short* __restrict__ x,
                                                                 long long ldx, int m, int rows8, int B,
                                                                 int NB, unsigned int* __restrict__ act,
                                                                 float* __restrict__ fac) {
    a16_mma_prep_body<false>(x, ldx, m, rows8, B, NB, 15, act, fac);
}

// The f16 mode's prologue: the same layout and factors, the words holding f16 code pairs.
extern "C" __global__ void __launch_bounds__(256) w4a16h_mma_prep(const unsigned short* __restrict__ x,
                                                                  long long ldx, int m, int rows8, int B,
                                                                  int NB, unsigned int* __restrict__ act,
                                                                  float* __restrict__ fac) {
    a16_mma_prep_body<false, false, true>(x, ldx, m, rows8, B, NB, 15, act, fac);
}

// ---- prologue of the A4 path: w4a4_quantize's codes and factors in the same fragment order ----
// codes int8 [m, K] (row stride ldc bytes), afac f32 [m, B] (f32(ascale), NaN: non-finite block);
// the low-limb words hold the codes, the high-limb words zeros (F16: the words hold the codes as
// f16 pairs, the f16 mode's); fac = afac / 4 (-0.0 for padding).
template <bool F16>
__device__ __forceinline__ void a4_mma_prep_body(const unsigned int* __restrict__ codes, long long ldc,
                                                 const float* __restrict__ afac, int m, int rows8, int B, int NB,
                                                 unsigned int* __restrict__ act, float* __restrict__ fac) {
    const int it = blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= NB * rows8) return;
    const int r = it / NB, b = it - r * NB;
    uint4 c = make_uint4(0u, 0u, 0u, 0u);
    float f = METRALE_NEG_ZERO;
    if (r < m && b < B) {
        c = *(const uint4*)((const unsigned char*)codes + (size_t)r * ldc + (size_t)b * 16);
        f = ieee_mul(afac[(size_t)r * B + b], 0.25f);  // exact: ascale / 4 (see Exactness)
    }
    const unsigned int w[4] = {c.x, c.y, c.z, c.w};
    const int nt = r >> 3, g = r & 7;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const size_t base = (((size_t)nt * (NB >> 1) + (b >> 1)) * 32 + (4 * g + t)) * 4 + 2 * (b & 1);
        if (F16) {  // the four codes (elements 4t .. 4t + 3) as f16 pairs, biased by 128 first
            biased_codes_f16(w[t] ^ 0x80808080u, act[base], act[base + 1]);
        } else {
            act[base] = w[t];
            act[base + 1] = 0u;
        }
    }
    const int tt = (r & 7) >> 1, h = r & 1;
    fac[((((size_t)nt * (NB >> 3) + (b >> 3)) * 4 + tt) * 8 + (b & 7)) * 2 + h] = f;
}

extern "C" __global__ void __launch_bounds__(256) w4a4_mma_prep(const unsigned int* __restrict__ codes,
                                                                long long ldc, const float* __restrict__ afac,
                                                                int m, int rows8, int B, int NB,
                                                                unsigned int* __restrict__ act,
                                                                float* __restrict__ fac) {
    a4_mma_prep_body<false>(codes, ldc, afac, m, rows8, B, NB, act, fac);
}
extern "C" __global__ void __launch_bounds__(256) w4a4h_mma_prep(const unsigned int* __restrict__ codes,
                                                                 long long ldc, const float* __restrict__ afac,
                                                                 int m, int rows8, int B, int NB,
                                                                 unsigned int* __restrict__ act,
                                                                 float* __restrict__ fac) {
    a4_mma_prep_body<true>(codes, ldc, afac, m, rows8, B, NB, act, fac);
}

// ---- the NVFP4 weight policy ----
// Lane (g, t) holds blocks 2t, 2t+1 of a step in (x, y), (z, w). Return u[s] = piece t of blocks
// 2s (low half) and 2s+1 (high half): piece t = elements 4t..4t+3 = bits 16 (t & 1) of word t >> 1.
__device__ __forceinline__ void step_pieces(uint4 v, int t, unsigned int (&u)[4]) {
    // units U[t'] of this lane (source s = t): piece t' of blocks 2s, 2s+1
    const unsigned int U0 = prmt(v.x, v.z, 0x5410u), U1 = prmt(v.x, v.z, 0x7632u);
    const unsigned int U2 = prmt(v.y, v.w, 0x5410u), U3 = prmt(v.y, v.w, 0x7632u);
    const bool odd = (t & 1) != 0, b1 = (t & 2) != 0;
    // stage 1 (xor 1): keep units with t' & 1 == t & 1, receive the partner's
    const unsigned int k0 = odd ? U1 : U0, k1 = odd ? U3 : U2;
    const unsigned int r0 = __shfl_xor_sync(0xffffffffu, odd ? U0 : U1, 1);  // U[s^1][t&1]
    const unsigned int r1 = __shfl_xor_sync(0xffffffffu, odd ? U2 : U3, 1);  // U[s^1][(t&1)+2]
    // stage 2 (xor 2): keep units with t' == t
    const unsigned int q0 = __shfl_xor_sync(0xffffffffu, b1 ? k0 : k1, 2);  // U[s^2][t]
    const unsigned int q1 = __shfl_xor_sync(0xffffffffu, b1 ? r0 : r1, 2);  // U[s^3][t]
    const unsigned int mine = b1 ? k1 : k0, from1 = b1 ? r1 : r0;          // U[s][t], U[s^1][t]
    // position x holds source t ^ x: reorder to source index
    unsigned int p0 = mine, p1 = from1, p2 = q0, p3 = q1;
    if (odd) {  // swap (0,1), (2,3)
        const unsigned int a = p0, c = p2;
        p0 = p1; p1 = a; p2 = p3; p3 = c;
    }
    if (b1) {  // swap (0,2), (1,3)
        const unsigned int a = p0, c = p1;
        p0 = p2; p2 = a; p1 = p3; p3 = c;
    }
    u[0] = p0; u[1] = p1; u[2] = p2; u[3] = p3;
}

// The NVFP4 weight policy of mma_gemm.cuh. Load: one step (8 aligned blocks) of 16 weight
// columns as loaded: lane (g, t) holds 16 bytes of rows n0 + g (wv[0]) and n0 + g + 8 (wv[1]) at
// byte 16 t of the step, and the step's 8 scale bytes of both rows (sc[h][0]: blocks 0-3,
// sc[h][1]: blocks 4-7). Blocks past B load as zeros.
struct Nvfp4W {
    typedef NibConsts Consts;
    struct Load {
        uint4 wv[2];
        unsigned int sc[2][2];
    };
    static __device__ __forceinline__ Consts consts() { return nib_consts(); }
    typedef StepOps Ops;
    static __device__ __forceinline__ WeightRows rows(const WeightSet& set, int n0, int lane, int N, int B) {
        return weight_rows<Nvfp4W>(set, n0, lane >> 2, N, B);
    }
    static __device__ __forceinline__ long long wrow(int B) { return (long long)B * 8; }
    static __device__ __forceinline__ long long srow(int B) { return B; }
    template <bool AL>
    static __device__ __forceinline__ void load(Load& s, const unsigned char* wr0, const unsigned char* wr1,
                                                const unsigned char* sr0, const unsigned char* sr1, int blk0,
                                                int B, int t) {
        if (AL) {
            const bool ok = blk0 < B;  // B % 8 == 0: whole steps
            const long long wo = (long long)blk0 * 8 + 16 * t;
            s.wv[0] = ok ? __ldg((const uint4*)(wr0 + wo)) : make_uint4(0u, 0u, 0u, 0u);
            s.wv[1] = ok ? __ldg((const uint4*)(wr1 + wo)) : make_uint4(0u, 0u, 0u, 0u);
            const uint2 z2 = make_uint2(0u, 0u);
            const uint2 a = ok ? __ldg((const uint2*)(sr0 + blk0)) : z2;
            const uint2 c = ok ? __ldg((const uint2*)(sr1 + blk0)) : z2;
            s.sc[0][0] = a.x; s.sc[0][1] = a.y;
            s.sc[1][0] = c.x; s.sc[1][1] = c.y;
        } else {
            const int be = blk0 + 2 * t, bo = be + 1;
            uint2 e0 = make_uint2(0u, 0u), o0 = e0, e1 = e0, o1 = e0;
            if (be < B) {
                e0 = __ldg((const uint2*)(wr0 + (long long)be * 8));
                e1 = __ldg((const uint2*)(wr1 + (long long)be * 8));
            }
            if (bo < B) {
                o0 = __ldg((const uint2*)(wr0 + (long long)bo * 8));
                o1 = __ldg((const uint2*)(wr1 + (long long)bo * 8));
            }
            s.wv[0] = make_uint4(e0.x, e0.y, o0.x, o0.y);
            s.wv[1] = make_uint4(e1.x, e1.y, o1.x, o1.y);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const unsigned char* sr = h ? sr1 : sr0;
                unsigned int s0 = 0u, s1 = 0u;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (blk0 + j < B) s0 |= (unsigned int)__ldg(sr + blk0 + j) << (8 * j);
                    if (blk0 + 4 + j < B) s1 |= (unsigned int)__ldg(sr + blk0 + 4 + j) << (8 * j);
                }
                s.sc[h][0] = s0;
                s.sc[h][1] = s1;
            }
        }
    }
    static __device__ __forceinline__ void decode(const Load& s, int t, const Consts& kc, StepOps& o) {
        unsigned int u[4];
        step_pieces(s.wv[0], t, u);
#pragma unroll
        for (int q = 0; q < 4; ++q) nib8_codes_k(u[q], kc, o.a0[2 * q], o.a0[2 * q + 1]);
        step_pieces(s.wv[1], t, u);
#pragma unroll
        for (int q = 0; q < 4; ++q) nib8_codes_k(u[q], kc, o.a1[2 * q], o.a1[2 * q + 1]);
        scales(s, o.ws0, o.ws1);
    }
    // The step's 8 e4m3 block scales of rows g (ws0) and g + 8 (ws1) as f32 (exact).
    static __device__ __forceinline__ void scales(const Load& s, float (&ws0)[8], float (&ws1)[8]) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            e4m3x2_to_f32(s.sc[0][q] & 0xffffu, ws0[4 * q], ws0[4 * q + 1]);
            e4m3x2_to_f32(s.sc[0][q] >> 16, ws0[4 * q + 2], ws0[4 * q + 3]);
            e4m3x2_to_f32(s.sc[1][q] & 0xffffu, ws1[4 * q], ws1[4 * q + 1]);
            e4m3x2_to_f32(s.sc[1][q] >> 16, ws1[4 * q + 2], ws1[4 * q + 3]);
        }
    }
};

// The f16 mode's policy (MODE 3, mma_gemm.cuh HalfOps): Nvfp4W's loads, the codes decoded
// biased (nib_consts<true>) and turned into f16 pairs once per step, for every row tile.
struct Nvfp4HW : Nvfp4W {
    typedef HalfOps Ops;
    static __device__ __forceinline__ Consts consts() { return nib_consts<true>(); }
    static __device__ __forceinline__ void decode(const Load& s, int t, const Consts& kc, HalfOps& o) {
        unsigned int u[4], c0, c1;
        step_pieces(s.wv[0], t, u);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            nib8_codes_k(u[q], kc, c0, c1);
            biased_codes_f16(c0, o.h0[2 * q][0], o.h0[2 * q][1]);
            biased_codes_f16(c1, o.h0[2 * q + 1][0], o.h0[2 * q + 1][1]);
        }
        step_pieces(s.wv[1], t, u);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            nib8_codes_k(u[q], kc, c0, c1);
            biased_codes_f16(c0, o.h1[2 * q][0], o.h1[2 * q][1]);
            biased_codes_f16(c1, o.h1[2 * q + 1][0], o.h1[2 * q + 1][1]);
        }
        scales(s, o.ws0, o.ws1);
    }
};

// The weight policy of an activation mode: MODE 3 (f16) decodes to f16 pairs, the others to s8.
template <int MODE>
struct Nvfp4Policy {
    typedef Nvfp4W type;
};
template <>
struct Nvfp4Policy<3> {
    typedef Nvfp4HW type;
};

#define NVFP4_MMA(PREFIX, MODE, NT, AL, SUFFIX) MMA_KERNEL(Nvfp4Policy<MODE>::type, PREFIX, MODE, NT, AL, SUFFIX)
// @instances NVFP4_MMA   (lines generated from metrale/cuda/configs.py)

#define NVFP4_GEMM(PREFIX, MODE, NT, D, MINB, AL, SUFFIX) \
    GEMM_KERNEL(Nvfp4Policy<MODE>::type, PREFIX, MODE, NT, D, MINB, AL, SUFFIX)
// @instances NVFP4_GEMM   (lines generated from metrale/cuda/configs.py)
