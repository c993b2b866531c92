// fp8_bf16_mma.cu -- FP8 (W8A16, e4m3 with a per-output-row scale) and BF16 dense weights x A16
// activations on the prefill GEMM of mma_gemm.cuh, wide mode (arithmetic.md § a16, § codes24,
// § projection; the single-row and small-m kernels are in fp8_bf16_gemv.cu).
//
// Kernels (extern "C"):
//   fp8_bf16_gemm_prep(x, ldx, m, rows8, B, NB, act, fac)
//       as nvfp4_mma.cu's w4a16_mma_prep (limbs c = 256 hi + lo of elements 4t..4t+3 in
//       B-fragment order, act u32 [rows8/8][NB/2][32][4], fac [rows8/8][NB/8][4][8][2]) with
//       the factor 2^(E - 14) as the high word of a double in each 4-byte fac slot (0x7FF80000,
//       NaN: a non-finite block; 0x80000000, -0.0: rows >= m and blocks >= B).
//   fp8_bf16_gemm_nt{NT}_d{D}_b{MINB}_p(act, fac, m, w0, pw0, rs0, out0, ldo0, w1, pw1, rs1,
//                                       out1, ldo1, N, B, NB, gz, kp8, partial, cs0, cs1,
//                                       rows_first)
//       the GEMM of mma_gemm.cuh (gemm_body; split K into aligned parts and mma_finish as
//       nvfp4_mma.cu states): grid (ceil(m / (8 NT)), ceil(N / (16 GEMM_WARPS)), gz parts) with
//       rows_first = 1 (the routed raster: the CTAs running together share weight columns),
//       (ceil(N / (16 GEMM_WARPS)), ceil(m / (8 NT)), gz parts) with 0; block 32 GEMM_WARPS,
//       every warp 16 columns x 8 NT rows, S8 = NB / 8 <= 2^D.
//       Weights as metrale/cuda/fp8_bf16.py mma_fragments uploads them: w u32 [N16][NB][32 lanes]
//       [6] (lane 4g + t: limb l of rows g, g + 8 as words 2l, 2l + 1, bytes the elements
//       4t..4t+3; N padded to 16 rows, B to NB blocks with zero codes), pw int32 [N16][NB][16]
//       (the high words of the doubles 2^(F - 22), finite in the padding too). FP8: rs = 1,
//       cs = weight_scale f32 [N] (y = bf16(root * weight_scale[n])); BF16: rs = 1, cs = null
//       (root * 1 = root). The one layout serves {fp8,bf16}_mma_nt* of fp8_bf16_gemv.cu too.
//   fp8_bf16_gemm_nt{NT}_d{D}_b{MINB}_l(same arguments)
//       the same GEMM without the prefetch of the next step's weights (W24Late: 64 registers
//       fewer, so 2 CTAs per SM at NT = 1); configs.FP8_BF16_GEMM_SUFFIX picks p or l per depth.
//   bf16c_gemm_nt{NT}_d{D}_b{MINB}_{p,l}(same arguments)
//       BF16 on the block-value chain (docs/chain-revision.md; tile.CHAIN routes it): the same
//       GEMM with each 64-block part's values chained from -0.0 (c <- c + v_b in K order) and the
//       padded tree over the part roots (gemm_body CH; K split by whole parts, mma_finish for
//       the splits' roots). The builds of the routing tables (configs.FP8_BF16_GEMM_TILES,
//       _SMALL_TILES with their FP8_BF16_GEMM_SUFFIX).
//
// Exactness: mma_gemm.cuh's wide step_roots (six 8-bit limb MMAs per block, H and L in int32,
// S_b = 2^16 H + L in float64, two exact power-of-two multiplies, ONE rounding to f32), the
// 8-leaf step subtrees, the binary counter of aligned subtrees over the steps and the split-K
// parts' tree: the contract's padded tree (arithmetic.md § tree). Blocks past B: zero weight
// and activation codes, factor -0.0, so v_b = (0 * 2^(F-22)) * -0.0 = -0.0, the padding leaf.
#include "mma_gemm.cuh"

extern "C" __global__ void __launch_bounds__(256) fp8_bf16_gemm_prep(const unsigned short* __restrict__ x,
                                                                     long long ldx, int m, int rows8, int B,
                                                                     int NB, unsigned int* __restrict__ act,
                                                                     float* __restrict__ fac) {
    a16_mma_prep_body<false, true>(x, ldx, m, rows8, B, NB, 14, act, fac);
}

// The wide weight policy: the step's 8 blocks of limb fragments and powers of two, loaded as
// used (Load = Ops, decode a copy). rows() points w0 at this lane's fragment words of block 0 of
// the warp's 16-row tile (block stride 32 * 24 bytes) and s0 / s1 at pw of rows g / g + 8
// (block stride 64 bytes); w1 is unused.
struct W24 {
    struct Consts {};
    typedef WideOps Load;
    typedef WideOps Ops;
    static __device__ __forceinline__ Consts consts() { return Consts(); }
    static __device__ __forceinline__ WeightRows rows(const WeightSet& set, int n0, int lane, int N, int B) {
        const long long nb = 8LL * ((B + 7) >> 3), tile = n0 >> 4;
        const unsigned char* w = set.w + (tile * nb * 32 + lane) * 24;
        const unsigned char* s = set.ws + (tile * nb * 16 + (lane >> 2)) * 4;
        return WeightRows{w, w, s, s + 32};
    }
    template <bool AL>
    static __device__ __forceinline__ void load(Load& s, const unsigned char* wr0, const unsigned char*,
                                                const unsigned char* sr0, const unsigned char* sr1, int blk0,
                                                int, int) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const long long b = blk0 + j;
            const uint2* wp = (const uint2*)(wr0 + b * 768);
            const uint2 l0 = __ldg(wp), l1 = __ldg(wp + 1), l2 = __ldg(wp + 2);
            s.w[j][0] = l0.x; s.w[j][1] = l0.y;
            s.w[j][2] = l1.x; s.w[j][3] = l1.y;
            s.w[j][4] = l2.x; s.w[j][5] = l2.y;
            s.pw0[j] = __ldg((const int*)(sr0 + b * 64));
            s.pw1[j] = __ldg((const int*)(sr1 + b * 64));
        }
    }
    static __device__ __forceinline__ void decode(const Load& s, int, const Consts&, Ops& o) { o = s; }
};

// The same policy without the prefetch of the next step (Load keeps the pointers, decode loads):
// 64 registers fewer, the load latency covered by the other warps only (the _l variants).
struct W24Late : W24 {
    struct Load {
        const unsigned char *w, *s0, *s1;
        int blk0;
    };
    template <bool AL>
    static __device__ __forceinline__ void load(Load& s, const unsigned char* wr0, const unsigned char*,
                                                const unsigned char* sr0, const unsigned char* sr1, int blk0,
                                                int, int) {
        s.w = wr0;
        s.s0 = sr0;
        s.s1 = sr1;
        s.blk0 = blk0;
    }
    static __device__ __forceinline__ void decode(const Load& s, int t, const Consts&, Ops& o) {
        W24::load<true>(o, s.w, s.w, s.s0, s.s1, s.blk0, 0, t);
    }
};

#define FP8_BF16_GEMM(NT, D, MINB) WIDE_GEMM_KERNEL(W24, fp8_bf16, NT, D, MINB, true, p, false)
// @instances FP8_BF16_GEMM   (lines generated from metrale/cuda/configs.py)

#define FP8_BF16_GEMM_LATE(NT, D, MINB) WIDE_GEMM_KERNEL(W24Late, fp8_bf16, NT, D, MINB, true, l, false)
// @instances FP8_BF16_GEMM_LATE   (lines generated from metrale/cuda/configs.py)

// The BF16 GEMM on the block-value chain (bf16c_gemm_*): the routed builds, each with its
// depth's policy (p: W24, l: W24Late).
#define BF16_CHAIN_POLICY_p W24
#define BF16_CHAIN_POLICY_l W24Late
#define BF16_CHAIN_GEMM(NT, D, MINB, SUF) \
    WIDE_GEMM_KERNEL(BF16_CHAIN_POLICY_##SUF, bf16c, NT, D, MINB, true, SUF, true)
// @instances BF16_CHAIN_GEMM   (lines generated from metrale/cuda/configs.py)
