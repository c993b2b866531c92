// metrale/cuda/kernels/q2_0_gemv.cu -- Q2_0 (GGUF type 42) weights x A16 activations.
//
// Contract: arithmetic.md § q2_0-format (layout), § a16 (block fixed point), § projection (exact dot,
// v_b = (f32(S_b) * f32(d)) * 2^(E_b - 14), the fixed tree, y = bf16(root)).
//
// Device weight layout (made at upload by metrale/cuda/q2_0.py): qs uint8 [N, K/4] (each 64-block's
// 16 code bytes, contiguous), d uint16 [N, K/64] (the f16 bits). A 32-bit word of qs is one
// 16-element A16 block: byte i holds elements 4i..4i+3 at bit pairs 0, 2, 4, 6.
//
// Kernels:
//   q2_a16_prep(x, ldx, K, m, lohi, aux)
//       grid (ceil(m * K/16 / 64)), block 64; one thread per (row, 16-block) (two 16-byte loads). A16 codes c
//       (|c| < 2^15, common.cuh's a16_block_int) split c = 256 hi + lo,
//       lo in [0, 255], hi in [-128, 127], stored as byte limbs permuted to match the 2-bit
//       fields (word s holds elements s, s+4, s+8, s+12): lohi uint4 [m, B, 2] (lo, hi);
//       aux uint2 [m, B] = (sum of c, f32 bits of 2^(E-14), or NaN for a block holding Inf/NaN).
//   q2_0_gemv_r{1,2,4,8}(qs, d, N, K, lohi, aux, m, out, ldo)
//       grid (ceil(N / (4 NC)), ceil(m / R)), block 128 (4 warps). Warp = NC columns x R rows.
//       Lane l owns Q2 block 32 ch + l of chunk ch (64 elements = A16 blocks 4q..4q+3, one
//       16-byte qs load + one d): S_b = 256 dp4a(q, hi) + dp4a(q, lo) - sum(c) with q in 0..3
//       (so S_b = sum (q-1) c exactly in int32), v_b in the contract's fp32 order, then
//       ((v0+v1)+(v2+v3)) and shfl_xor 1..16: the 128-block subtree of the chunk. Chunk roots
//       go to shared memory; the padded tree over chunks (C <= 64, K <= 131072) finishes with
//       the same shuffles. Serves q2_0_gemv_vec (R=1), q2_0_gemv_vec_batchm and q2_0_gemm
//       (grid.y row groups): every output is the same arithmetic, whatever m.
//
// Build: --fmad=false; fp32 steps are common.cuh's inline-PTX ieee_mul / ieee_add (subnormals kept
// whatever -ftz the compiler was given).

#include "common.cuh"

typedef unsigned short u16;
typedef unsigned int u32;

// f16 bits -> f32, exact (finite inputs; the weight validator refuses non-finite d).
__device__ __forceinline__ float q2_f16_f32(u32 h) {
    const u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (e == 0) {
        const float v = ieee_mul(__uint2float_rn(man), 5.9604644775390625e-08f);  // man * 2^-24
        return __uint_as_float(__float_as_uint(v) | sign);
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (man << 13));
}

extern "C" __global__ void __launch_bounds__(64) q2_a16_prep(
    const u16* __restrict__ x, long long ldx, int K, int m, uint4* __restrict__ lohi,
    uint2* __restrict__ aux) {
    const int B = K >> 4;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)m * B) return;
    const int r = (int)(t / B), blk = (int)(t % B);
    // the block's 16 bf16 values with two 16-byte loads (rows are 16-byte aligned)
    const uint4* xp = reinterpret_cast<const uint4*>(x + (long long)r * ldx + blk * 16);
    const uint4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
    const u32 xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    u16 xb[16];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        xb[2 * j] = (u16)(xw[j] & 0xFFFFu);
        xb[2 * j + 1] = (u16)(xw[j] >> 16);
    }
    int c[16], E;
    bool finite;
    a16_block_int(xb, c, E, finite);
    u32 lo[4], hi[4];
    int csum = 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        lo[s] = 0u;
        hi[s] = 0u;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int cj = c[4 * i + s];
            lo[s] |= (u32)(cj & 0xFF) << (8 * i);
            hi[s] |= (u32)((cj >> 8) & 0xFF) << (8 * i);
        }
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) csum += c[j];
    lohi[2 * t] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    lohi[2 * t + 1] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    aux[t] = make_uint2((u32)csum, finite ? __float_as_uint(pow2f(E - 14)) : 0x7FC00000u);
}

// Block dot of one 16-element block: q word (16 2-bit fields) x permuted limbs.
__device__ __forceinline__ int q2_block_dot(u32 qw, uint4 lo, uint4 hi, int csum) {
    const u32 l[4] = {lo.x, lo.y, lo.z, lo.w}, h[4] = {hi.x, hi.y, hi.z, hi.w};
    u32 slo = 0;
    int shi = 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        const u32 g = (qw >> (2 * s)) & 0x03030303u;
        slo = __dp4a(g, l[s], slo);
        shi = __dp4a((int)g, (int)h[s], shi);
    }
    return shi * 256 + (int)slo - csum;
}

template <int R, int NC>
__device__ __forceinline__ void q2_gemv_warp(const uint4* __restrict__ qs, const u16* __restrict__ d, int N,
                                             int K, const uint4* __restrict__ lohi,
                                             const uint2* __restrict__ aux, int r0, int m, int n0,
                                             u16* __restrict__ out, long long ldo, float* sroot) {
    const int lane = threadIdx.x & 31;
    const int nq = K >> 6, B = K >> 4, C = (nq + 31) >> 5;
    for (int ch = 0; ch < C; ++ch) {
        const int qb = ch * 32 + lane;
        const bool valid = qb < nq;
        uint4 wq[NC];
        float dd[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const int n = n0 + c;
            const bool ok = valid && n < N;
            wq[c] = ok ? __ldg(qs + (long long)n * nq + qb) : make_uint4(0u, 0u, 0u, 0u);
            dd[c] = ok ? q2_f16_f32(__ldg(d + (long long)n * nq + qb)) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = r0 + r;
            if (row >= m) continue;  // warp-uniform
            uint4 lo[4], hi[4];
            uint2 ax[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const long long bi = (long long)row * B + (valid ? 4 * qb + i : 0);
                lo[i] = __ldg(lohi + 2 * bi);
                hi[i] = __ldg(lohi + 2 * bi + 1);
                ax[i] = __ldg(aux + bi);
            }
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const u32 qw[4] = {wq[c].x, wq[c].y, wq[c].z, wq[c].w};
                float v[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int S = q2_block_dot(qw[i], lo[i], hi[i], (int)ax[i].x);
                    v[i] = valid ? ieee_mul(ieee_mul(__int2float_rn(S), dd[c]), __uint_as_float(ax[i].y))
                                 : -0.0f;
                }
                const float t = warp_tree_ieee(ieee_add(ieee_add(v[0], v[1]), ieee_add(v[2], v[3])));
                if (lane == 0) sroot[(c * R + r) * 64 + ch] = t;
            }
        }
    }
    __syncwarp();
    store_chunk_roots<R, NC>(sroot, C, lane, r0, m, n0, N, nullptr, out, ldo);
}

#define Q2_GEMV(R, NC)                                                                           \
    extern "C" __global__ void __launch_bounds__(128) q2_0_gemv_r##R(                             \
        const uint4* __restrict__ qs, const u16* __restrict__ d, int N, int K,                   \
        const uint4* __restrict__ lohi, const uint2* __restrict__ aux, int m, u16* __restrict__ out, \
        long long ldo) {                                                                         \
        __shared__ float sroot[4][NC * R * 64];                                                  \
        const int warp = threadIdx.x >> 5;                                                       \
        const int n0 = (blockIdx.x * 4 + warp) * NC;                                             \
        q2_gemv_warp<R, NC>(qs, d, N, K, lohi, aux, blockIdx.y * R, m, n0, out, ldo, sroot[warp]); \
    }

// @instances Q2_GEMV   (lines generated from metrale/cuda/configs.py)

// q2_0_chain_r{1,2,4}(qs, d, N, K, lohi, aux, m, out, ldo): the generic kernels on the block-value
// chain (docs/chain-revision.md; chain.project_chain's bits; tile.CHAIN routes them where no
// chain tile takes the rows), from q2_a16_prep's codes, any K (a multiple of 64) with Q = ceil(B /
// 64) <= CHAIN_GENERIC_THREADS chain parts per column, the last holding B - 64 (Q - 1) blocks:
//   * a run is one (column, part), one thread's, its A16 blocks in K order; a CTA round is the
//     runs of C = CHAIN_GENERIC_THREADS / Q whole columns, part-major (thread t: part t / C of column t % C,
//     threads from C Q on idle), so a warp's lanes read the same codes (one part or two);
//     rounds persistent over grid.x, groups of R rows over grid.y;
//   * per Q2 block (4 A16 blocks) its 16 code bytes and d by __ldg; per A16 block and row S_b =
//     q2_block_dot (exact), the term pair P_b = f32(S_b) * 2^(E_b - 14) (one rounding, as
//     ldexpf's, where subnormal; NaN for a non-finite block), f_b = f32(d), the chain c =
//     fma(P_b, f_b, c) from -0.0;
//   * at the round's end the roots go to shared memory (roots [R][CHAIN_GENERIC_THREADS]) and thread j < C
//     sums column j's parts in place by the padded tree over parts (stride h = 1, 2, 4, ..: part
//     p += part p + h where p is a multiple of 2h and p + h < Q), y = bf16(root).
// Block CHAIN_GENERIC_THREADS, grid (rounds, row groups), no dynamic shared memory.
template <int R>
__device__ __forceinline__ void q2_chain_body(const uint4* __restrict__ qs, const u16* __restrict__ d, int N,
                                              int K, const uint4* __restrict__ lohi,
                                              const uint2* __restrict__ aux, int m, u16* __restrict__ out,
                                              long long ldo) {
    const int nq = K >> 6;
    const ChainRuns runs(K >> 4, CHAIN_GENERIC_THREADS);
    const int lq = runs.part;
    const int nqr = runs.blocks >> 2;  // Q2 blocks of this thread's run
    const int B = K >> 4;
    chain_generic_rounds<R, CHAIN_GENERIC_THREADS>(
        runs, m, N,
        [&](int row0, int n, float (&c)[R]) {
            const int nrun = n < N ? nqr : 0;
            const long long wq0 = (long long)(n < N ? n : 0) * nq + 16 * lq;
            for (int j = 0; j < nrun; ++j) {
                const uint4 wq = __ldg(qs + wq0 + j);
                const float dd = q2_f16_f32(__ldg(d + wq0 + j));
                const u32 qw[4] = {wq.x, wq.y, wq.z, wq.w};
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int row = row0 + r < m ? row0 + r : row0;
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const long long bi = (long long)row * B + 4 * (16 * lq + j) + i;
                        const uint2 ax = __ldg(aux + bi);
                        const int S = q2_block_dot(qw[i], __ldg(lohi + 2 * bi), __ldg(lohi + 2 * bi + 1), (int)ax.x);
                        const float P = ieee_mul(__int2float_rn(S), __uint_as_float(ax.y));
                        c[r] = ieee_fma(P, dd, c[r]);
                    }
                }
            }
        },
        [&](int row, int col, float root) { out[(long long)row * ldo + col] = f32_to_bf16(root); });
}

#define Q2_CHAIN(R)                                                                                 \
    extern "C" __global__ void __launch_bounds__(CHAIN_GENERIC_THREADS) q2_0_chain_r##R(                       \
        const uint4* __restrict__ qs, const u16* __restrict__ d, int N, int K,                      \
        const uint4* __restrict__ lohi, const uint2* __restrict__ aux, int m, u16* __restrict__ out, \
        long long ldo) {                                                                            \
        q2_chain_body<R>(qs, d, N, K, lohi, aux, m, out, ldo);                                      \
    }

// @instances Q2_CHAIN
