// metrale/cuda/kernels/w8a8.cu -- the W8A8 arm (int8 weights x per-row int8 activations).
//
// Contract: arithmetic.md § a8 (vLLM dynamic per-token int8) and § projection (W8A8: S over all of K
// in int32, y = bf16((f32(S) * s_a) * s_w[n]), no tree); § act-mul (the shipped SiLU table).
//
// Kernels (every pointer to bf16 is uint16 bits; strides in elements):
//   w8a8_quantize(x, ldx, K, q, scale)
//       grid (m), block 256. Row r: amax = max|x|, s = amax/127, inv = 127/amax (0 when
//       amax == 0), q = sat_int8(rne(x * inv)); a row holding Inf/NaN: q = 0, s = NaN.
//   w8a8_gemv_r{1,2}(w, sw, N, K, q, ldq, sa, m, out, ldo)                    (m <= 2)
//       grid (ceil(N / 16), ceil(m / R)), block 128 (4 warps). Warp = 4 output columns x R
//       rows; lane l
//       streams 16 weight bytes at k = 16 l + 512 i of each column (coalesced 512-byte rows),
//       dp4a into int32 (exact), warp shfl_xor reduction (exact). Measured 1.14x the
//       weight-streaming floor at 12288x4096 on an H200 (the MMA kernels: 1.53x there).
//   w8a8_mma_r{8,16,32}_w{4,8}(w, sw, N, K, q, ldq, sa, m, out, ldo)          (m >= 2)
//       Integer tensor cores, mma.sync m16n8k32 s8.s8.s32 (exact int32). CTA = W warps on
//       16 MT output columns (MT = 1, 1, 2) x R = 8 NT activation rows; grid (ceil(N / 16 MT),
//       ceil(m / R)), block 32 W. Weights are the A operand (16 columns), activation rows the
//       B operand (8 rows); each warp takes an equal run of K in 64-byte steps (split-K inside
//       the CTA), 16-byte loads (weights with L1::no_allocate), U steps of loads in flight;
//       the warps' int32 partials are summed with shared-memory integer atomics (exact,
//       order-free), then y = bf16((f32(S) * s_a) * s_w[n]). Details at w8_mma_gemv below.
//   w8a8_gemm_{BM}x{BN}(w, sw, N, K, q, ldq, sa, m, out, ldo)              (prefill rows)
//       Tiled integer-tensor-core GEMM: CTA = BM activation rows x BN output columns, 32 WM WN
//       threads (warp tile BM/WM x BN/WN), K in 64-byte tiles streamed through STAGES
//       shared-memory slots by cp.async (zero-filled past m, N and K), mma.sync m16n8k32
//       s8.s8.s32 with the activation rows as the A operand. Each warp owns its int32
//       accumulators over all of K (no split), so S is the exact full-K dot; epilogue as above.
//       grid (ceil(m / BM), ceil(N / BN)): consecutive CTAs share one weight tile. The tiles
//       are metrale/cuda/configs.py's W8A8_GEMM_TILES (the instantiation lines below).
//   w8a8_silu_parts(gate, ldg, up, ldu, table, K, part), then
//   w8a8_quantize_parts(gate, ldg, K, part, P, q, scale)
//       grid (ceil(K / 1024), m), block 128 each: A8 codes of h = bf16(silu[gate] * f32(up))
//       (arithmetic.md § act-mul, § a8): the first writes h over gate (the FFN's gate buffer
//       holds h after every route) and each 1024-element slice's amax / non-finite flag, the
//       second reduces a row's P parts (max, or: exact in any order; P = the slices, or the
//       column tiles of w8a8_wgmma.cu's fused gate + up) and writes the codes. With
//       a GEMV kernel above they serve w8a8_silu_quant_gemv (metrale/cuda/w8a8.py says why).
//   w8a8_silu_quant(gate, ldg, up, ldu, table, K, q, scale)                       (sm_90)
//       grid (8, m), clusters of 8 CTAs (a row each), block 256: the two kernels above in one
//       launch (each CTA an eighth of the row, h in registers; the row's amax / flag reduced
//       over the cluster's distributed shared memory). Absent below sm_90 (the pair serves).
//       w8a8_silu_quant_c{CL}(same arguments): the same with CL CTAs per row (configs.py
//       W8A8_SILU_QUANT_BUILDS: cluster size -> block, registers' groups).
//   w8a8_silu_quant_st(gate, ldg, up, ldu, ctab, words, K, m, q, scale)          (sm_90)
//       grid min(m, MINB x multiprocessors) persistent CTAs, a row at a time, block T
//       (configs.py W8A8_SILU_QUANT_ST), dynamic shared memory 4 words bytes: the c1 kernel's
//       step with the compact SiLU table (metrale/cuda/weights.py compact_table) in shared memory.
//
// Every kernel is PDL-capable (metrale/cuda/pdl.py): pdl_trigger, then pdl_wait, before it touches
// global memory that an earlier kernel writes (w8a8_silu_quant_st copies the SiLU table before).
//
// Build: --fmad=false; every fp32 step is an inline-PTX ieee_mul/ieee_div (common.cuh): exact
// IEEE with subnormals whatever -ftz the compiler was given; zero tests are on the bits.

#include "common.cuh"
#include "w8a8.cuh"

extern "C" __global__ void __launch_bounds__(256) w8a8_quantize(
    const u16* __restrict__ x, long long ldx, int K, signed char* __restrict__ q,
    float* __restrict__ scale) {
    pdl_trigger();
    pdl_wait();
    __shared__ u32 red[64];
    __shared__ float sinv;
    const int r = blockIdx.x;
    const u16* xr = x + (long long)r * ldx;
    u32 amax = 0;
    int bad = 0;
    for (int k = threadIdx.x * 8; k < K; k += blockDim.x * 8)
        w8_scan8(*reinterpret_cast<const uint4*>(xr + k), &amax, &bad);
    w8_block_reduce(&amax, &bad, red);
    if (threadIdx.x == 0) {
        float s, inv;
        w8_row_params(amax, bad, &s, &inv);
        scale[r] = s;
        sinv = inv;
    }
    __syncthreads();
    const float inv = sinv;
    signed char* qr = q + (long long)r * K;
    for (int k = threadIdx.x * 8; k < K; k += blockDim.x * 8)
        *reinterpret_cast<uint2*>(qr + k) = w8_quant8(*reinterpret_cast<const uint4*>(xr + k), inv);
}

// ---- the GEMV body: warp = NC columns [n0, n0 + NC) x R rows [r0, r0 + R) ∩ [0, m) ----
template <int R, int NC>
__device__ __forceinline__ void w8_gemv_warp(const signed char* __restrict__ w, const float* __restrict__ sw,
                                             int N, int K, const signed char* qa, long long ldq,
                                             const float* sa, int r0, int m, int n0, u16* out,
                                             long long ldo) {
    const int lane = threadIdx.x & 31;
    int acc[NC][R];
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0;
    for (int k = lane * 16; k < K; k += 512) {
        uint4 wv[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const int n = n0 + c;
            wv[c] = n < N ? __ldg(reinterpret_cast<const uint4*>(w + (long long)n * K + k))
                          : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r0 + r < m) {
                const uint4 av = *reinterpret_cast<const uint4*>(qa + (long long)(r0 + r) * ldq + k);
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    int a = acc[c][r];
                    a = __dp4a((int)wv[c].x, (int)av.x, a);
                    a = __dp4a((int)wv[c].y, (int)av.y, a);
                    a = __dp4a((int)wv[c].z, (int)av.z, a);
                    a = __dp4a((int)wv[c].w, (int)av.w, a);
                    acc[c][r] = a;
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            int a = acc[c][r];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
            acc[c][r] = a;
        }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = r0 + r;
            if (row >= m) continue;
            const float s_a = sa[row];
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const int n = n0 + c;
                if (n < N)
                    out[(long long)row * ldo + n] =
                        w8_f32_bf16(ieee_mul(ieee_mul(__int2float_rn(acc[c][r]), s_a), sw[n]));
            }
        }
    }
}

#define W8A8_GEMV(R, NC)                                                                          \
    extern "C" __global__ void __launch_bounds__(128) w8a8_gemv_r##R(                              \
        const signed char* __restrict__ w, const float* __restrict__ sw, int N, int K,            \
        const signed char* __restrict__ q, long long ldq, const float* __restrict__ sa, int m,    \
        u16* __restrict__ out, long long ldo) {                                                   \
        pdl_trigger();                                                                            \
        pdl_wait();                                                                               \
        const int n0 = (blockIdx.x * 4 + (threadIdx.x >> 5)) * NC;                               \
        w8_gemv_warp<R, NC>(w, sw, N, K, q, ldq, sa, blockIdx.y * R, m, n0, out, ldo);            \
    }

// @instances W8A8_GEMV   (lines generated from metrale/cuda/configs.py)

// ---- tensor-core GEMV (mma.sync m16n8k32 s8 x s8 -> s32, exact integer accumulation) ----
// CTA = W warps on 16 MT output columns x 8 NT activation rows; warp w takes an equal run of the
// K steps (64 bytes each). In a step, lane (g = lane / 4, t = lane % 4) loads 16 weight bytes
// k = 64 s + 16 t .. + 15 of columns n0 + 16 mt + g and + g + 8 (two 16-byte loads per 16-column
// tile) and 16 code bytes of activation row 8 nt + g at the same k: words (x, y) are the A / B
// fragments of one m16n8k32 MMA, words (z, w) of a second one. Both operands use the same k
// permutation, and S is an exact integer sum, so any k order gives the same S. Warp partials
// meet in shared memory through integer atomics (exact, order-free). Rows >= m and columns >= N
// read clamped (valid) memory and are never written.
__device__ __forceinline__ void w8_mma(int (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int NT, int MT, int W, int U>
__device__ __forceinline__ void w8_mma_gemv(const signed char* __restrict__ w, const float* __restrict__ sw,
                                            int N, int K, const signed char* __restrict__ q, long long ldq,
                                            const float* __restrict__ sa, int m, u16* __restrict__ out,
                                            long long ldo) {
    constexpr int NACC = MT * NT * 4 * 32;
    __shared__ int red[NACC];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16 * MT, r0 = blockIdx.y * 8 * NT;
    for (int i = threadIdx.x; i < NACC; i += 32 * W) red[i] = 0;
    const signed char* wr[MT][2];
    const signed char* ar[NT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            wr[mt][h] = w + (long long)min(n0 + 16 * mt + 8 * h + g, N - 1) * K + 16 * t;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) ar[nt] = q + (long long)min(r0 + 8 * nt + g, m - 1) * ldq + 16 * t;
    int acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0;
    const int steps = (K + 63) >> 6, per = (steps + W - 1) / W;
    const int s0 = warp * per, s1 = min(steps, s0 + per);
    const uint4 z4 = make_uint4(0u, 0u, 0u, 0u);
    for (int s = s0; s < s1; s += U) {
        uint4 wa[U][MT][2], av[U][NT];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = (s + u) * 64;
            const bool ok = (s + u < s1) && (k + 16 * t < K);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) wa[u][mt][h] = ok ? ld_stream16(wr[mt][h] + k) : z4;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                av[u][nt] = ok ? __ldg(reinterpret_cast<const uint4*>(ar[nt] + k)) : z4;
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    w8_mma(acc[mt][nt], wa[u][mt][0].x, wa[u][mt][1].x, wa[u][mt][0].y, wa[u][mt][1].y,
                           av[u][nt].x, av[u][nt].y);
                    w8_mma(acc[mt][nt], wa[u][mt][0].z, wa[u][mt][1].z, wa[u][mt][0].w, wa[u][mt][1].w,
                           av[u][nt].z, av[u][nt].w);
                }
    }
    __syncthreads();  // red[] zeroed by every thread
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) atomicAdd(&red[((mt * NT + nt) * 4 + j) * 32 + lane], acc[mt][nt][j]);
    __syncthreads();
    for (int i = threadIdx.x; i < NACC; i += 32 * W) {
        const int ln = i & 31, j = (i >> 5) & 3, tile = i >> 7, nt = tile % NT, mt = tile / NT;
        // C fragment: c0, c1 at (column g, rows 2t, 2t+1), c2, c3 at column g + 8.
        const int n = n0 + 16 * mt + (ln >> 2) + 8 * (j >> 1), r = r0 + 8 * nt + 2 * (ln & 3) + (j & 1);
        if (n < N && r < m)
            out[(long long)r * ldo + n] = w8_f32_bf16(ieee_mul(ieee_mul(__int2float_rn(red[i]), sa[r]), sw[n]));
    }
}

// w8a8_mma_r{8 NT}_w{W}: grid (ceil(N / (16 MT)), ceil(m / (8 NT))), block 32 W.
#define W8A8_MMA(R, NT, MT, W, U)                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * W) w8a8_mma_r##R##_w##W(                     \
        const signed char* __restrict__ w, const float* __restrict__ sw, int N, int K,              \
        const signed char* __restrict__ q, long long ldq, const float* __restrict__ sa, int m,      \
        u16* __restrict__ out, long long ldo) {                                                     \
        pdl_trigger();                                                                              \
        pdl_wait();                                                                                 \
        w8_mma_gemv<NT, MT, W, U>(w, sw, N, K, q, ldq, sa, m, out, ldo);                            \
    }

// @instances W8A8_MMA   (lines generated from metrale/cuda/configs.py)

// ---- prefill GEMM: cp.async multi-stage tiles, mma.sync m16n8k32 s8 (exact int32, full K) ----
// Shared tiles hold 64 K-bytes per row (row-major, unpadded). Lane (g, t) reads the 16 bytes at
// k = 16 t of rows g and g + 8 of an A tile and of column g of a B tile: words (x, y) feed one
// MMA, (z, w) a second, the same k permutation for both operands (S is an exact integer sum, so
// the order is free). A quarter-warp's 16-byte reads cover 128 contiguous bytes: no bank
// conflicts.
__device__ __forceinline__ void w8_cp16(u32 dst, const void* src, int nbytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(nbytes));
}

template <int BM, int BN, int WM, int WN, int STAGES>
__device__ __forceinline__ void w8_gemm(const signed char* __restrict__ w, const float* __restrict__ sw, int N,
                                        int K, const signed char* __restrict__ q, long long ldq,
                                        const float* __restrict__ sa, int m, u16* __restrict__ out,
                                        long long ldo) {
    constexpr int NTH = 32 * WM * WN, TM = BM / WM, TN = BN / WN, MT = TM / 16, NT = TN / 8;
    constexpr int STAGE = (BM + BN) * 64;
    extern __shared__ __align__(16) unsigned char w8_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp / WN, wn = warp % WN;
    const int r0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int ktiles = (K + 63) >> 6;
    const u32 sbase = (u32)__cvta_generic_to_shared(w8_smem);

    // Tile kt into slot: BM + BN rows of four 16-byte chunks each.
    auto load = [&](int slot, int kt) {
        const u32 st = sbase + slot * STAGE;
#pragma unroll
        for (int c = threadIdx.x; c < (BM + BN) * 4; c += NTH) {
            const int row = c >> 2, k = kt * 64 + (c & 3) * 16;
            const signed char* src;
            bool ok;
            if (row < BM) {
                ok = r0 + row < m && k < K;
                src = q + (long long)min(r0 + row, m - 1) * ldq + (ok ? k : 0);
            } else {
                ok = n0 + row - BM < N && k < K;
                src = w + (long long)min(n0 + row - BM, N - 1) * K + (ok ? k : 0);
            }
            w8_cp16(st + c * 16, src, ok ? 16 : 0);
        }
    };

    int acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load(s, s);
        asm volatile("cp.async.commit_group;");
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2));
        __syncthreads();  // slot kt ready for all; slot kt - 1 read by all
        if (kt + STAGES - 1 < ktiles) load((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
        asm volatile("cp.async.commit_group;");
        const unsigned char* a = w8_smem + (kt % STAGES) * STAGE;
        const unsigned char* b = a + BM * 64;
        uint4 af[MT][2], bf[NT];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                af[i][h] = *reinterpret_cast<const uint4*>(a + (wm * TM + 16 * i + 8 * h + g) * 64 + 16 * t);
#pragma unroll
        for (int j = 0; j < NT; ++j)
            bf[j] = *reinterpret_cast<const uint4*>(b + (wn * TN + 8 * j + g) * 64 + 16 * t);
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                w8_mma(acc[i][j], af[i][0].x, af[i][1].x, af[i][0].y, af[i][1].y, bf[j].x, bf[j].y);
                w8_mma(acc[i][j], af[i][0].z, af[i][1].z, af[i][0].w, af[i][1].w, bf[j].z, bf[j].w);
            }
    }
    asm volatile("cp.async.wait_group 0;");
    // C fragment: c0, c1 at (row g, columns 2t, 2t + 1), c2, c3 at row g + 8.
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = r0 + wm * TM + 16 * i + g + 8 * (e >> 1);
            if (r >= m) continue;
            const float s_a = sa[r];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int n = n0 + wn * TN + 8 * j + 2 * t + (e & 1);
                if (n < N)
                    out[(long long)r * ldo + n] =
                        w8_f32_bf16(ieee_mul(ieee_mul(__int2float_rn(acc[i][j][e]), s_a), sw[n]));
            }
        }
}

// w8a8_gemm_{BM}x{BN}: grid (ceil(m / BM), ceil(N / BN)), block 32 WM WN, dynamic shared memory
// STAGES (BM + BN) 64 bytes, at least MINB CTAs per multiprocessor (register cap).
#define W8A8_GEMM(BM, BN, WM, WN, STAGES, MINB)                                                    \
    extern "C" __global__ void __launch_bounds__(32 * WM * WN, MINB) w8a8_gemm_##BM##x##BN(           \
        const signed char* __restrict__ w, const float* __restrict__ sw, int N, int K,              \
        const signed char* __restrict__ q, long long ldq, const float* __restrict__ sa, int m,      \
        u16* __restrict__ out, long long ldo) {                                                     \
        pdl_trigger();                                                                              \
        pdl_wait();                                                                                 \
        w8_gemm<BM, BN, WM, WN, STAGES>(w, sw, N, K, q, ldq, sa, m, out, ldo);                      \
    }

// @instances W8A8_GEMM   (lines generated from metrale/cuda/configs.py)

// ---- the SiLU-quantize step in two kernels over row slices of SILU_SLICE elements ----
// w8a8_silu_parts: grid (C, m), C = ceil(K / SILU_SLICE), block SILU_SLICE / 8. Each CTA
// computes h = bf16(silu[gate] * f32(up)) of its slice, stores it over gate (every route leaves
// h in the gate buffer) and its slice's (amax bits, non-finite flag) in part [m, C].
#define SILU_SLICE 1024
extern "C" __global__ void __launch_bounds__(SILU_SLICE / 8) w8a8_silu_parts(
    u16* __restrict__ gate, long long ldg_, const u16* __restrict__ up, long long ldu,
    const float* __restrict__ table, int K, uint2* __restrict__ part) {
    pdl_trigger();
    pdl_wait();
    __shared__ u32 red[64];
    const int r = blockIdx.y, c = blockIdx.x;
    const int k = (c * blockDim.x + threadIdx.x) * 8;
    u16* gr = gate + (long long)r * ldg_;
    u32 amax = 0;
    int bad = 0;
    if (k < K) {
        const uint4 h = act_mul8(*reinterpret_cast<const uint4*>(gr + k),
                                 *reinterpret_cast<const uint4*>(up + (long long)r * ldu + k), TableAct{table});
        w8_scan8(h, &amax, &bad);
        *reinterpret_cast<uint4*>(gr + k) = h;
    }
    w8_block_reduce(&amax, &bad, red);
    if (threadIdx.x == 0) part[(long long)r * gridDim.x + c] = make_uint2(amax, (u32)bad);
}

// w8a8_quantize_parts: grid (C, m), block SILU_SLICE / 8. Every CTA reduces its row's P parts
// (max and or: any order gives the same; P = C after w8a8_silu_parts, the column tiles' count
// after w8a8_wgmma.cu's fused gate + up), derives the row's scale as w8a8_quantize does (CTA 0
// stores it) and writes the codes of its slice of h.
extern "C" __global__ void __launch_bounds__(SILU_SLICE / 8) w8a8_quantize_parts(
    const u16* __restrict__ h, long long ldh, int K, const uint2* __restrict__ part, int P,
    signed char* __restrict__ q, float* __restrict__ scale) {
    pdl_trigger();
    pdl_wait();
    __shared__ u32 red[64];
    const int r = blockIdx.y, c = blockIdx.x;
    u32 amax = 0;
    int bad = 0;
    for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const uint2 p = part[(long long)r * P + i];
        amax = max(amax, p.x);
        bad |= (int)p.y;
    }
    w8_block_reduce(&amax, &bad, red);
    float s, inv;
    w8_row_params(amax, bad, &s, &inv);
    if (c == 0 && threadIdx.x == 0) scale[r] = s;
    const int k = (c * blockDim.x + threadIdx.x) * 8;
    if (k < K)
        *reinterpret_cast<uint2*>(q + (long long)r * K + k) =
            w8_quant8(*reinterpret_cast<const uint4*>(h + (long long)r * ldh + k), inv);
}

// ---- the SiLU-quantize step in one launch (sm_90: thread-block clusters) ----
// silu_quant_body<CL, T, V>: grid (CL, m), clusters of CL CTAs (one row each; CL = 1: no
// cluster), block T. CTA c of row r takes the 8-element groups [c G, (c + 1) G) of the row,
// G = ceil(K / 8 / CL), keeps h = bf16(silu[gate] * f32(up)) of them in registers (at most V
// groups per thread: K <= 8 V T CL), stores h over gate and reduces its (amax bits, non-finite
// flag); the row's is the max / or of the cluster's, read from each CTA's shared memory
// (distributed shared memory: any order gives the same); then the scale (CTA 0 stores it) and
// the codes as w8a8_quantize_parts writes them, from the registers. The same bits as the two
// kernels above, with one launch and one read of gate and up. Kernels (configs.py
// W8A8_SILU_QUANT_BUILDS): w8a8_silu_quant (CL = 8, T = 256, V = 8: K <= MAX_K, few rows: a row
// over eight multiprocessors) and w8a8_silu_quant_c{CL} (fewer CTAs per row for more rows).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// One row r of silu_quant_body, CTA c of its CL (act: TableAct or CompactAct).
template <int CL, int T, int V, class Act>
__device__ __forceinline__ void silu_quant_row(int r, int c, const Act& act, u16* __restrict__ gate, long long ldg_,
                                               const u16* __restrict__ up, long long ldu, int K,
                                               signed char* __restrict__ q, float* __restrict__ scale) {
    __shared__ u32 red[64];
    __shared__ uint2 mine;
    const int tid = threadIdx.x;
    const int NG = K >> 3, G = (NG + CL - 1) / CL, g0 = c * G, g1 = min(NG, g0 + G);
    u16* gr = gate + (long long)r * ldg_;
    const u16* ur = up + (long long)r * ldu;
    uint4 h[V];
    u32 amax = 0;
    int bad = 0;
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const int gi = g0 + tid + v * T;
        if (gi < g1) {
            h[v] = act_mul8(*reinterpret_cast<const uint4*>(gr + 8 * gi), *reinterpret_cast<const uint4*>(ur + 8 * gi),
                            act);
            w8_scan8(h[v], &amax, &bad);
            *reinterpret_cast<uint4*>(gr + 8 * gi) = h[v];
        }
    }
    w8_block_reduce(&amax, &bad, red);
    if constexpr (CL > 1) {
        if (tid == 0) mine = make_uint2(amax, (u32)bad);
        cluster_sync_all();  // every CTA's part is in its shared memory
        amax = 0;
        bad = 0;
        if (tid < CL) {
            u32 remote, px, py;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                         : "=r"(remote)
                         : "r"((u32)__cvta_generic_to_shared(&mine)), "r"(tid));
            asm volatile("ld.shared::cluster.v2.u32 {%0, %1}, [%2];" : "=r"(px), "=r"(py) : "r"(remote) : "memory");
            amax = px;
            bad = (int)py;
        }
        w8_block_reduce(&amax, &bad, red);
        asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");  // done reading the others
    }
    float s, inv;
    w8_row_params(amax, bad, &s, &inv);
    if (c == 0 && tid == 0) scale[r] = s;
    signed char* qr = q + (long long)r * K;
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const int gi = g0 + tid + v * T;
        if (gi < g1) *reinterpret_cast<uint2*>(qr + 8 * gi) = w8_quant8(h[v], inv);
    }
    if constexpr (CL > 1) asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");  // no CTA leaves while read
}

template <int CL, int T, int V>
__device__ __forceinline__ void silu_quant_body(u16* __restrict__ gate, long long ldg_, const u16* __restrict__ up,
                                                long long ldu, const float* __restrict__ table, int K,
                                                signed char* __restrict__ q, float* __restrict__ scale) {
    pdl_trigger();
    pdl_wait();
    silu_quant_row<CL, T, V>(blockIdx.y, blockIdx.x, TableAct{table}, gate, ldg_, up, ldu, K, q, scale);
}

#define W8A8_SILU_QUANT(CL, T, V, NAME)                                                                       \
    extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(T) NAME(                        \
        u16* __restrict__ gate, long long ldg_, const u16* __restrict__ up, long long ldu,                  \
        const float* __restrict__ table, int K, signed char* __restrict__ q, float* __restrict__ scale) {   \
        silu_quant_body<CL, T, V>(gate, ldg_, up, ldu, table, K, q, scale);                                 \
    }

// @instances W8A8_SILU_QUANT

// w8a8_silu_quant_st(gate, ldg, up, ldu, ctab, words, K, m, q, scale): the one-CTA-per-row step
// with the SiLU table in shared memory (metrale/cuda/weights.py compact_table: `words` floats,
// about 30 KB, a multiple of 4), for many rows. Grid G <= m persistent CTAs (row r = blockIdx.x,
// then + G ...), block T, dynamic shared memory 4 words bytes. The table is copied in before the
// PDL wait (it is the uploader's, no earlier kernel's output); each row as silu_quant_body with
// CL = 1 (K <= 8 V T).
template <int T, int V>
__device__ __forceinline__ void silu_quant_st_body(u16* __restrict__ gate, long long ldg_, const u16* __restrict__ up,
                                                   long long ldu, const float* __restrict__ ctab, int words, int K,
                                                   int m, signed char* __restrict__ q, float* __restrict__ scale) {
    extern __shared__ float4 st4[];
    const CompactAct act = compact_act_start(st4, ctab, words);
    for (int r = blockIdx.x; r < m; r += gridDim.x) silu_quant_row<1, T, V>(r, 0, act, gate, ldg_, up, ldu, K, q, scale);
}

#define W8A8_SILU_QUANT_ST(T, V, MINB)                                                                         \
    extern "C" __global__ void __launch_bounds__(T, MINB) w8a8_silu_quant_st(                                 \
        u16* __restrict__ gate, long long ldg_, const u16* __restrict__ up, long long ldu,                  \
        const float* __restrict__ ctab, int words, int K, int m, signed char* __restrict__ q,               \
        float* __restrict__ scale) {                                                                        \
        silu_quant_st_body<T, V>(gate, ldg_, up, ldu, ctab, words, K, m, q, scale);                         \
    }

// @instances W8A8_SILU_QUANT_ST
#endif
