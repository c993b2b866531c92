// q2_0_mma.cu -- Q2_0 (GGUF type 42) weights x A16 activations on integer tensor cores: the
// K-split MMA kernels and the prefill GEMM of mma_gemm.cuh with the Q2_0 weight policy
// (arithmetic.md § q2_0-format, § a16, § projection; the CUDA-core GEMV is q2_0_gemv.cu).
//
// Kernels (extern "C"):
//   q2_mma_prep(x, ldx, m, rows8, B, NB, act, fac)
//       as nvfp4_mma.cu's w4a16_mma_prep, with lane t's limb words holding elements t, t+4,
//       t+8, t+12 of the block (byte j: element t + 4j; the order of the 2-bit fields) and the
//       factor 2^(E - 14).
//   q2h_mma_prep(same arguments): the same layout and factors, the words holding the codes as
//       f16 pairs (lane t's elements t, t+4 in the first, t+8, t+12 in the second).
//   {q2,q2h}_mma_nt{1,2,3,4}_{a,u}(act, fac, m, qs0, d0, rs0, out0, ldo0, qs1, d1, rs1, out1, ldo1,
//                           N, B, NB)
//   {q2,q2h}_gemm_nt{NT}_d{D}_b{MINB}_{a,u}(same arguments)
//       launch shapes, tiles and tree as nvfp4_mma.cu states; weights qs uint8 [N, K/4] and
//       d uint16 [N, K/64] (f16 bits) as metrale/cuda/q2_0.py uploads them; rs = 1.0 (Q2_0 has
//       no row scale: root * 1.0 = root); _a: B % 8 == 0, _u: B % 8 == 4.
//
// Exactness. A 32-bit word of qs is one 16-element block, byte i holding elements 4i .. 4i+3
// at bit pairs 0, 2, 4, 6; lane t takes the bit pair t of every byte, ((X >> 2t) & 0x03030303),
// the codes q of elements t + 4j, and q - 1 in [-1, 2] as s8 bytes by (q + 0x7F) ^ 0x80 per
// byte (no carry between bytes). S_b = sum (q - 1) c: two MMAs (A16 limbs) exact in int32
// (|S_b| < 2^20); v_b = (f32(S_b) * f32(d)) * 2^(E_b - 14), f32(d) by cvt.f32.f16 (exact).
// q2h (the f16 mode, MODE 3): one mma.sync.m16n8k16.f32.f16.f16.f32 per block with q - 1 and the
// A16 codes as f16 (exact; integer products and partial sums below 2^20, exact in f32 in any
// order: nvfp4_mma.cu, the f16 mode), the same v_b: the same bits as q2.
// Blocks past B: their activation codes are zero and their factor -0.0, so v_b = -0.0 whatever
// the weight bytes.
#include "mma_gemm.cuh"

// The f16 mode's prologue: the same layout and factors, the words holding f16 code pairs.
extern "C" __global__ void __launch_bounds__(256) q2h_mma_prep(const unsigned short* __restrict__ x, long long ldx,
                                                               int m, int rows8, int B, int NB,
                                                               unsigned int* __restrict__ act,
                                                               float* __restrict__ fac) {
    a16_mma_prep_body<true, false, true>(x, ldx, m, rows8, B, NB, 14, act, fac);
}

extern "C" __global__ void __launch_bounds__(256) q2_mma_prep(const unsigned short* __restrict__ x, long long ldx,
                                                              int m, int rows8, int B, int NB,
                                                              unsigned int* __restrict__ act,
                                                              float* __restrict__ fac) {
    a16_mma_prep_body<true>(x, ldx, m, rows8, B, NB, 14, act, fac);
}

struct Q2W {
    struct Consts {};
    struct Load {
        uint4 q[2][2];     // rows g, g + 8: the step's 8 block words (blocks 0-3, 4-7)
        unsigned int d[2]; // rows g, g + 8: f16 d of blocks 0-3 (low half) and 4-7 (high half)
    };
    static __device__ __forceinline__ Consts consts() { return Consts(); }
    typedef StepOps Ops;
    static __device__ __forceinline__ WeightRows rows(const WeightSet& set, int n0, int lane, int N, int B) {
        return weight_rows<Q2W>(set, n0, lane >> 2, N, B);
    }
    static __device__ __forceinline__ long long wrow(int B) { return (long long)B * 4; }
    static __device__ __forceinline__ long long srow(int B) { return (long long)(B >> 2) * 2; }
    template <bool AL>
    static __device__ __forceinline__ void load(Load& s, const unsigned char* wr0, const unsigned char* wr1,
                                                const unsigned char* sr0, const unsigned char* sr1, int blk0,
                                                int B, int t) {
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
        const bool ok0 = blk0 < B, ok1 = blk0 + 4 < B;
        const long long o = (long long)blk0 * 4;
        s.q[0][0] = ok0 ? __ldg((const uint4*)(wr0 + o)) : z;
        s.q[0][1] = ok1 ? __ldg((const uint4*)(wr0 + o + 16)) : z;
        s.q[1][0] = ok0 ? __ldg((const uint4*)(wr1 + o)) : z;
        s.q[1][1] = ok1 ? __ldg((const uint4*)(wr1 + o + 16)) : z;
        const int so = blk0 >> 1;  // byte offset of the f16 d of blocks blk0 .. blk0 + 3
        if (AL) {
            s.d[0] = ok0 ? __ldg((const unsigned int*)(sr0 + so)) : 0u;
            s.d[1] = ok0 ? __ldg((const unsigned int*)(sr1 + so)) : 0u;
        } else {
            const unsigned short* h0 = (const unsigned short*)(sr0 + so);
            const unsigned short* h1 = (const unsigned short*)(sr1 + so);
            s.d[0] = (ok0 ? (unsigned int)__ldg(h0) : 0u) | ((ok1 ? (unsigned int)__ldg(h0 + 1) : 0u) << 16);
            s.d[1] = (ok0 ? (unsigned int)__ldg(h1) : 0u) | ((ok1 ? (unsigned int)__ldg(h1 + 1) : 0u) << 16);
        }
    }
    // Lane t's codes q of block k (0-7) of row g (h = 0) or g + 8: elements t + 4j in byte j.
    static __device__ __forceinline__ unsigned int codes(const Load& s, int h, int k, int t) {
        const uint4 v = s.q[h][k >> 2];
        const unsigned int X = (k & 3) == 0 ? v.x : (k & 3) == 1 ? v.y : (k & 3) == 2 ? v.z : v.w;
        return (X >> (2 * t)) & 0x03030303u;
    }
    static __device__ __forceinline__ void decode(const Load& s, int t, const Consts&, StepOps& o) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            o.a0[k] = (codes(s, 0, k, t) + 0x7F7F7F7Fu) ^ 0x80808080u;
            o.a1[k] = (codes(s, 1, k, t) + 0x7F7F7F7Fu) ^ 0x80808080u;
        }
        scales(s, o.ws0, o.ws1);
    }
    // The f32 d of the step's blocks (0-3: the first f16, 4-7: the second) of rows g and g + 8.
    static __device__ __forceinline__ void scales(const Load& s, float (&ws0)[8], float (&ws1)[8]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float lo, hi;
            f16x2_to_f32(s.d[h], lo, hi);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                if (h == 0) ws0[k] = k < 4 ? lo : hi; else ws1[k] = k < 4 ? lo : hi;
            }
        }
    }
};

// The f16 mode's policy (MODE 3, mma_gemm.cuh HalfOps): Q2W's loads; q - 1 biased by 128 is
// q + 127 per byte, turned into f16 pairs once per step.
struct Q2HW : Q2W {
    typedef HalfOps Ops;
    static __device__ __forceinline__ void decode(const Load& s, int t, const Consts&, HalfOps& o) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            biased_codes_f16(codes(s, 0, k, t) + 0x7F7F7F7Fu, o.h0[k][0], o.h0[k][1]);
            biased_codes_f16(codes(s, 1, k, t) + 0x7F7F7F7Fu, o.h1[k][0], o.h1[k][1]);
        }
        scales(s, o.ws0, o.ws1);
    }
};

#define Q2_MMA(NT, AL, SUFFIX) \
    MMA_KERNEL(Q2W, q2, 0, NT, AL, SUFFIX)   \
    MMA_KERNEL(Q2HW, q2h, 3, NT, AL, SUFFIX)
// @instances Q2_MMA   (lines generated from metrale/cuda/configs.py)

#define Q2_GEMM(NT, D, MINB, AL, SUFFIX)          \
    GEMM_KERNEL(Q2W, q2, 0, NT, D, MINB, AL, SUFFIX) \
    GEMM_KERNEL(Q2HW, q2h, 3, NT, D, MINB, AL, SUFFIX)
// @instances Q2_GEMM   (lines generated from metrale/cuda/configs.py)
