// nvfp4_tile.cu -- the tiled NVFP4 and Q2_0 x A16 prefill GEMM on bf16 tensor cores:
// shared-memory tiles of 8 NF activation rows x 128 weight columns, one mma.sync.m16n8k16 bf16
// per 16-element block whose f32 accumulator is the block dot already times 2^(E_b - 15), so a
// block value costs one multiply (arithmetic.md § projection, § kernel-notes "scaled A16
// operands"; the other NVFP4 kernels are in nvfp4_gemv.cu, nvfp4_a4.cu and nvfp4_mma.cu, the
// other Q2_0 ones in q2_0_gemv.cu, q2_0_dec.cu and q2_0_mma.cu). The decodes, stage copies, step
// tree, counter and part root are tile.cuh's, shared with nvfp4_wgmma.cu, the same GEMM on
// Hopper's wgmma (which the launcher takes on sm_90: metrale/cuda/tile.py).
//
// Kernels (extern "C"):
//   w4a16b_prep(x, ldx, m, rows_pad, B, elo, ehi, xh, fac, slow)
//       grid rows_pad, block 32 ceil(B / 32) threads, at least 256 and at most 1024: one CTA per
//       row r < rows_pad (zeros past m; x 16-byte aligned, ldx a multiple of 8); launched
//       programmatically (pdl_wait before it reads x). Row r is fast when every block b is
//       finite and either all zero or has elo <= E_b <= ehi (the format's window: NVFP4
//       -102 .. 110, Q2_0 -88 .. 105): its operand is xh = c 2^(E_b - 15) (the A16 codes
//       scaled, exact bf16: at most 8 significant bits, normal) and fac = 1; otherwise (slow)
//       xh = c and fac = 2^(E_b - 15), NaN for a non-finite block. slow[r] = 1 marks a slow row.
//         xh bf16 [rows_pad][16 B], the 16 elements of each block in the order of the weight
//             decode: position 8h + 2t holds element 8h + t, 8h + 2t + 1 element 8h + t + 4;
//         fac f32 [rows_pad][B]; slow u8 [rows_pad].
//   w4a4b_prep(codes, ldc, afac, m, rows_pad, B, xh, fac, slow)
//       the same layout from w4a4_quantize's codes and f32(ascale) (block 256, launched
//       plainly): the A4 operand code (ascale / 4) (at most 6 significant bits, an exact normal
//       bf16 or zero), fac 1; a row with a non-finite block is slow (xh = code, fac = ascale / 4,
//       NaN there).
//   w4a16b_gemm_f{NF}(xh, fac, slow, m, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1, N, B,
//                     gz, kp8, dlog, partial)
//       B % 8 == 0. grid (G ceil(N / 128), ceil(T / G), gz parts) over T = rows_pad / (8 NF) row
//       tiles in groups of G (tile.cuh tile_at), block 256 (8 warps, warp w: columns 16 w .. 16 w
//       + 15 of the CTA's 128, all 8 NF rows); blockIdx.z = part gz + set.
//       The part covers steps (8 blocks) [part kp8, part kp8 + kp8) of S8 = B / 8, kp8 = 2^dlog
//       <= 32: an aligned subtree. parts = 1 (partial null): y = bf16(root * rowscale); else the
//       part roots go to partial [parts][gz][m][N] and mma_finish (nvfp4_mma.cu) sums them.
//       Launched programmatically: the first stages' weights load before pdl_wait (tile.cuh
//       tile_gemm).
//       Dynamic shared memory: 3 stages of (8 NF rows x 256 bytes of xh, XOR-swizzled 16-byte
//       chunks | 128 weight rows x 80 bytes (64 used) | 128 x 8 scale bytes), then the step
//       counter's levels 1 .. dlog - 1: float4 [dlog - 1][NF][256 threads].
//   q2a16b_gemm_f{NF}(the arguments of w4a16b_gemm_f{NF}), NF in configs.Q2_0_TILE_FRAGS
//       the same GEMM on Q2_0 weights as q2_0.py uploads them (w = qs [N, K/4], s = d f16
//       [N, K/64], rs = 1): 32 code bytes and 4 d bytes per column and step in shared memory
//       (rows of 48 bytes); the weight operand 2 (q - 1) (q2b_pair), v_b = P_b * f32(d). Built for
//       configs.Q2_0_TILE_CTAS_PER_SM CTAs per multiprocessor (__launch_bounds__: at most 128
//       registers; the NVFP4 kernels for one), whose shared memory fits one multiprocessor.
//
// Exactness. Weights are the A operand (16 columns): lane (g, t) decodes nibbles t and t + 4 of
// each 32-bit word of its rows' blocks into one bf16 pair (2 e2m1, exact: w4b_pair), so its k
// slots 2t, 2t+1 / 2t+8, 2t+9 hold elements t, t+4 / 8+t, 12+t; the prep writes the activation
// rows in that order (any k order inside a block is exact). The products wc_j xh_j are exact
// and every partial sum a multiple of 2^(E_b - 15) below 2^(E_b + 8) in magnitude (|S_b| <
// 2^23), so the f32 accumulator is P_b = S_b 2^(E_b - 15) exactly (normal: E_b >= -102), and
// v_b = P_b * f32(wscale_b), one IEEE multiply, equals the contract's
// (f32(S_b) * f32(wscale_b)) * 2^(E_b - 15): scaling by a power of two commutes with rounding
// while no result is subnormal or infinite, which -102 <= E_b <= 110 guarantees (|S_b wscale_b|
// lies in [2^-9, 2^32)); an all-zero block gives +0 * wscale both ways. A CTA that holds a slow
// row runs the slow epilogue for all its rows: P_b = S_b (xh = c, integers) or S_b 2^(E_b - 15)
// (a fast row, fac 1), v_b = (P_b * f32(wscale_b)) * fac: the contract's sequence.
// A4 (w4a4b_prep): P_b = S_b (ascale_b / 4) exactly (|S_b| <= 2304, 12 significant bits, times
// 4), and v_b = P_b * f32(wscale_b) is the exact product ((S_b wscale_b) ascale_b) / 4 of the
// contract (at most 20 significant bits, normal): no window.
// Q2_0: lane (g, t) shifts each block word right by 2t and takes bytes 0, 1 (elements t, t + 4) and
// 2, 3 (8 + t, 12 + t): the same k order, so the same prologue. P_b = 2 S_b 2^(E_b - 15) exactly
// (|S_b| < 2^20), and v_b = P_b * f32(d) equals (f32(S_b) * f32(d)) * 2^(E_b - 14) while
// |S_b d| in [2^-24, 2^36) times 2^(E_b - 14) stays normal and finite: -88 <= E_b <= 105.
// tests/gpu/test_cuda_nvfp4_tile.py checks the device (every code, the window's edges, slow rows).
//
// Tree. A step is 8 aligned blocks: its 8-leaf subtree forms in registers (levels p0, p1, p2 of
// the mma_gemm.cuh step order); the step roots enter a binary counter whose level 0 is in
// registers and levels 1 .. dlog - 1 in shared memory; the last step of a full part (2^dlog
// steps) leaves the part root in level 0; a shorter part folds the levels of the set bits of its
// step count, right-nested from the lowest (tile.cuh tile_finish).
#include "tile.cuh"

// ---- prologues ----
// The 16 operand values of row r, block b (element order, each an exact bf16) into xh in the
// weight decode's k order: position 8h + 2t holds element 8h + t, 8h + 2t + 1 element 8h + t + 4.
__device__ __forceinline__ void w4b_store(unsigned short* __restrict__ xh, int r, int B, int b,
                                          const float (&e)[16]) {
    unsigned int w[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {  // slot pair q: elements 8h + t, 8h + t + 4 (h = q / 4, t = q % 4)
        const int j = 8 * (q >> 2) + (q & 3);
        w[q] = (unsigned int)f32_to_bf16(e[j]) | ((unsigned int)f32_to_bf16(e[j + 4]) << 16);
    }
    uint4* dst = (uint4*)(xh + ((size_t)r * B + b) * 16);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

// A16. One CTA per row: thread i takes blocks i, i + blockDim.x, ...; the row is slow where any
// block is.
extern "C" __global__ void __launch_bounds__(1024) w4a16b_prep(const unsigned short* __restrict__ x, long long ldx,
                                                               int m, int rows_pad, int B, int elo, int ehi,
                                                               unsigned short* __restrict__ xh,
                                                               float* __restrict__ fac,
                                                               unsigned char* __restrict__ slow) {
    const int r = blockIdx.x;
    const bool live = r < m;
    const unsigned short* src = x + (size_t)r * ldx;
    pdl_wait();
    pdl_trigger();
    // this thread's first block stays in registers between the passes (one block per thread
    // where blockDim.x >= B: the launcher's choice up to 1024 blocks)
    const int b0 = threadIdx.x;
    uint4 u0 = make_uint4(0u, 0u, 0u, 0u), v0 = u0;
    int bad = 0;
    if (live) {
        for (int b = b0; b < B; b += blockDim.x) {
            const uint4* p = (const uint4*)(src + (size_t)b * 16);
            const uint4 u = __ldg(p), v = __ldg(p + 1);
            if (b == b0) u0 = u, v0 = v;
            const unsigned int w[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
            int F = 1, nf = 0;
            unsigned int nz = 0u;
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                const int f0 = (w[q] >> 7) & 0xFF, f1 = (w[q] >> 23) & 0xFF;
                F = max(F, max(f0, f1));
                nf |= (f0 == 255) | (f1 == 255);
                nz |= w[q] & 0x7FFF7FFFu;
            }
            const int E = F - 127;
            bad |= nf || (nz != 0u && (E < elo || E > ehi));
        }
    }
    const bool sl = __syncthreads_or(bad) != 0;
    for (int b = b0; b < B; b += blockDim.x) {
        int c[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        int E = 0;
        bool fin = true;
        if (live) {
            uint4 u = u0, v = v0;
            if (b != b0) {
                const uint4* p = (const uint4*)(src + (size_t)b * 16);
                u = __ldg(p), v = __ldg(p + 1);
            }
            const unsigned int w[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
            unsigned short xs[16];
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                xs[2 * q] = (unsigned short)(w[q] & 0xFFFFu);
                xs[2 * q + 1] = (unsigned short)(w[q] >> 16);
            }
            a16_block_int(xs, c, E, fin);
        }
        const float p = live ? pow2f(E - 15) : 1.0f;
        float e[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) e[j] = sl ? (float)c[j] : ieee_mul((float)c[j], p);
        w4b_store(xh, r, B, b, e);
        fac[(size_t)r * B + b] = !sl ? 1.0f : (fin ? p : __uint_as_float(0x7fc00000u));
    }
    if (threadIdx.x == 0) slow[r] = sl ? 1 : 0;
}

// A4 (w4a4_quantize's codes int8 [m, K], row stride ldc bytes, 16-byte aligned; afac f32 [m, B]
// = f32(ascale), NaN for a non-finite block). Every product is exact (nvfp4_mma.cu, Exactness),
// so there is no window: a row is slow only where a block is non-finite. Fast: xh = code
// (ascale / 4), fac 1; slow: xh = code, fac = ascale / 4 (NaN passes through).
extern "C" __global__ void __launch_bounds__(256) w4a4b_prep(const signed char* __restrict__ codes, long long ldc,
                                                             const float* __restrict__ afac, int m, int rows_pad,
                                                             int B, unsigned short* __restrict__ xh,
                                                             float* __restrict__ fac,
                                                             unsigned char* __restrict__ slow) {
    const int r = blockIdx.x;
    const bool live = r < m;
    int bad = 0;
    if (live)
        for (int b = threadIdx.x; b < B; b += blockDim.x) bad |= afac[(size_t)r * B + b] != afac[(size_t)r * B + b];
    const bool sl = __syncthreads_or(bad) != 0;
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
        float f = 1.0f;
        signed char c[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        if (live) {
            const uint4 u = __ldg((const uint4*)(codes + (size_t)r * ldc + (size_t)b * 16));
            const unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 16; ++j) c[j] = (signed char)((w[j >> 2] >> (8 * (j & 3))) & 0xFF);
            f = ieee_mul(afac[(size_t)r * B + b], 0.25f);  // exact: ascale / 4
        }
        float e[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) e[j] = sl || !live ? (float)c[j] : ieee_mul((float)c[j], f);
        w4b_store(xh, r, B, b, e);
        fac[(size_t)r * B + b] = sl ? f : 1.0f;
    }
    if (threadIdx.x == 0) slow[r] = sl ? 1 : 0;
}

// ---- the GEMM ----
// The block values of one block into v[nf][j] (layout in tile.cuh) from its weight operand a
// (the mma's A fragment) and the scales ws0, ws1 of columns wc0, wc0 + 8.
template <int NF, bool SLOW>
__device__ __forceinline__ void w4b_block(float (&v)[NF][4], const unsigned int (&a)[4], float ws0, float ws1,
                                          const unsigned int (&abase)[NF / 2], unsigned int chunk,
                                          const float* __restrict__ facp, int B) {
#pragma unroll
    for (int np = 0; np < NF / 2; ++np) {
        unsigned int b00, b01, b10, b11;
        w4b_ldsm4(abase[np] + (chunk << 4), b00, b01, b10, b11);
        float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        mma_f16<true>(d[0], a[0], a[1], a[2], a[3], b00, b01);
        mma_f16<true>(d[1], a[0], a[1], a[2], a[3], b10, b11);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float x = ieee_mul(d[h][j], (j & 2) ? ws1 : ws0);
                if (SLOW) x = ieee_mul(x, __ldg(facp + (size_t)(8 * (2 * np + h) + (j & 1)) * B));
                v[2 * np + h][j] = x;
            }
    }
}

template <int NF, bool SLOW, class F>
__device__ __forceinline__ void w4b_body(const unsigned char* __restrict__ xh, const float* __restrict__ fac, int m,
                                         int row0, const WeightSet& set, int n0, int N, int B, int s_begin, int Sl,
                                         int dlog, float* __restrict__ partial, int part_i, int gz, int zs,
                                         unsigned char* smem) {
    constexpr int ACT = 8 * NF * 256;
    constexpr int STAGE = tile_stage_bytes<NF, F, false>();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = B * 16;
    const unsigned int sbase = (unsigned int)__cvta_generic_to_shared(smem);
    float4* ctr = (float4*)(smem + W4B_STAGES * STAGE);  // levels 1 .. dlog - 1
    const unsigned int rm = (6u - 4u * t) & 31u, rs = (12u - 4u * t) & 31u;  // NVFP4 nibble rotations
    const unsigned int sh = 2u * t;  // Q2_0: the shift that brings lane t's 2-bit codes to bit 0 of each byte
    const int wc0 = 16 * warp + g;  // this lane's weight rows wc0, wc0 + 8 within the CTA
    const unsigned int mi = lane >> 3, mr = lane & 7;  // ldmatrix: matrix and row this lane addresses
    unsigned int arow[NF / 2];  // byte offsets of this lane's ldmatrix rows in a stage
#pragma unroll
    for (int np = 0; np < NF / 2; ++np) arow[np] = (8 * (2 * np + (mi >> 1)) + mr) * 256;
    // the slow epilogue's factors of this lane's rows 8 nf + 2t + (j & 1)
    const float* facl = fac + (size_t)(row0 + 2 * t) * B;

    float L0[NF][4];  // counter level 0
    float q[NF][4], r[NF][4], e0[NF][4], sr[NF][4];

    const TileCopies<NF, F, false> cps(xh, row0, K, set, n0, N, B);
    tile_prologue_x(smem, cps, s_begin, Sl, STAGE);
    for (int ls = 0; ls < Sl; ++ls) {
        cp_async_wait<W4B_STAGES - 2>();
        __syncthreads();
        if (ls + W4B_STAGES - 1 < Sl)
            cps.load(smem + ((ls + W4B_STAGES - 1) % W4B_STAGES) * STAGE, s_begin + ls + W4B_STAGES - 1);
        cp_async_commit();
        const int buf = ls % W4B_STAGES;
        const unsigned char* sp = smem + buf * STAGE;
        unsigned int abase[NF / 2];
#pragma unroll
        for (int np = 0; np < NF / 2; ++np) abase[np] = sbase + buf * STAGE + arow[np];
        const unsigned char* wp = sp + ACT + wc0 * F::WROW;
        const unsigned char* sc = sp + ACT + W4B_COLS * F::WROW;
        const int blk0 = 8 * (s_begin + ls);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const unsigned int ch = 4u * i + (mi & 1);
            unsigned int a[2][4];
            float ws[2][2];
            tile_pair_operands<F>(a, ws, i, wp, sc, wc0, rm, rs, sh);
            float v[NF][4];
            w4b_block<NF, SLOW>(e0, a[0], ws[0][0], ws[0][1], abase, ch ^ mr, facl + blk0 + 2 * i, B);
            w4b_block<NF, SLOW>(v, a[1], ws[1][0], ws[1][1], abase, (ch + 2u) ^ mr, facl + blk0 + 2 * i + 1, B);
            tile_pair_tree<NF>(i, e0, v, q, r, sr);
        }
        tile_counter_push<NF>(ls, dlog, sr, L0, ctr, tid);
    }
    cp_async_wait<0>();
    tile_finish<NF>(L0, ctr, tid, Sl, dlog, set, n0, N, row0, m, wc0, t, partial, part_i, gz, zs);
}

struct W4bBody {
    static constexpr bool WG = false;
    static constexpr int STAGES = W4B_STAGES;
    template <int NF, bool SLOW, class F, int NFC = NF, class... A>
    static __device__ __forceinline__ void run(A... a) {
        w4b_body<NF, SLOW, F>(a...);
    }
};

#define NVFP4_TILE(NF) TILE_GEMM_KERNEL(w4a16b_gemm_f##NF, W4bBody, TileNvfp4, NF, 1)
#define Q2_TILE(NF, MINB) TILE_GEMM_KERNEL(q2a16b_gemm_f##NF, W4bBody, TileQ2, NF, MINB)
// @instances NVFP4_TILE   (lines generated from metrale/cuda/configs.py)
// @instances Q2_TILE
