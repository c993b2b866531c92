// tile.cuh -- the pieces shared by the tiled NVFP4 and Q2_0 x A16 / A4 GEMMs (nvfp4_tile.cu on
// mma.sync, nvfp4_wgmma.cu on Hopper's wgmma; their headers state the kernels and the contract):
// the weight operand decodes, the formats' shared-memory rows, one stage's copies, the operands
// of a block pair, the step's 8-leaf subtree, the step counter and the part root.
//
// CTA tile: 128 weight rows (warp w: rows 16 w .. 16 w + 15, lane (g, t): rows wc0 = 16 w + g and
// wc0 + 8) x 8 NF activation rows. A lane's block values v[nf][j] are weight row wc0 + 8 (j >> 1),
// activation row 8 nf + 2 t + (j & 1): the accumulator fragment of mma.sync m16n8k16 (one per nf)
// and of wgmma m64n{8 NF}k16 (accumulator 4 nf + j).
#pragma once
#include "mma_gemm.cuh"

#define W4B_THREADS 256
#define W4B_COLS 128
#define W4B_STAGES 3

// ldmatrix m8n8.x4 b16: lanes 8 i .. 8 i + 7 give the shared addresses of matrix i's 8 rows of 16
// bytes; lane (g, t) = (lane / 4, lane % 4) receives word t of row g of matrix i in r_i.
__device__ __forceinline__ void w4b_ldsm4(unsigned int addr, unsigned int& r0, unsigned int& r1, unsigned int& r2,
                                          unsigned int& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// Nibbles t and t + 4 of W (rotations rm = 6 - 4t, rs = 12 - 4t, mod 32) as the bf16 pair
// (2 e2m1 of nibble t, of nibble t + 4): the magnitude bits at 6..8 are e2m1 2^-126 (a bf16
// subnormal for the code 0.5), times 2^127 by one exact fma, and the sign bit moved to 15.
__device__ __forceinline__ unsigned int w4b_pair(unsigned int W, unsigned int rm, unsigned int rs) {
    const unsigned int mag = __funnelshift_l(W, W, rm) & 0x01C001C0u;
    unsigned int v;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(mag), "r"(0x7F007F00u), "r"(0x80008000u));
    return v ^ (__funnelshift_l(W, W, rs) & 0x80008000u);
}

// Q2_0: bytes 0 and 1 (sel 0x7150) or 2 and 3 (sel 0x7352) of Ws = W >> 2t, whose low 2 bits are
// the codes q of elements t, t + 4 (or 8 + t, 12 + t), as the bf16 pair 2 (q - 1): 128 + q (the
// byte's bits 0-1 under the exponent byte 0x43), times 2, minus 258, by one exact fma.
__device__ __forceinline__ unsigned int q2b_pair(unsigned int Ws, unsigned int sel) {
    const unsigned int x = __byte_perm(Ws, 0x43004300u, sel) & 0x43034303u;
    unsigned int v;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(0x40004000u), "r"(0xC381C381u));
    return v;
}

// The weight formats of the tiled GEMM: per 8-block step and column, the bytes of codes (WB, at
// a WROW-byte stride in shared memory: 8 distinct 16-byte bank groups for the 8 columns a warp's
// loads touch) and of scales (SB); the activation operand's limbs per element (LIMBS: stages hold
// LIMBS activation tiles), whether the output scale is per column (COLSCALE: the set's scale
// pointer holds f32 [N], not block scales) and whether a stage holds the step's per-row block
// factors (FAC: 8 blocks x 8 NF rows of f32, block-major, after the scales).
struct TileNvfp4 {  // 2 words per block (e2m1 nibbles), 8 e4m3 scales
    static constexpr int WB = 64, WROW = 80, SB = 8, LIMBS = 1, FAC = 0;
    static constexpr bool COLSCALE = false;
};
struct TileQ2 {  // 1 word per block (2-bit codes), the f16 d of blocks 0-3 and of 4-7
    static constexpr int WB = 32, WROW = 48, SB = 4, LIMBS = 1, FAC = 0;
    static constexpr bool COLSCALE = false;
};
struct TileFp8 {  // 16 bytes per block (rounded e4m3, chain.fp8_effective), two A16 limbs, per-column scale
    static constexpr int WB = 128, WROW = 144, SB = 0, LIMBS = 2, FAC = 1;
    static constexpr bool COLSCALE = true;
};

// The bytes of one pipeline stage of the 8 NF-row tile on format F (WG: nvfp4_wgmma.cu's, rounded
// up to wgmma's 1024-byte swizzle period), and the first stage's address in the dynamic shared
// memory raw (WG: the next 1024-byte boundary; the launcher adds 1024 bytes).
template <int NF, class F, bool WG>
__host__ __device__ constexpr int tile_stage_bytes() {
    constexpr int bytes = 8 * NF * 256 * F::LIMBS + W4B_COLS * F::WROW + W4B_COLS * F::SB + 256 * NF * F::FAC;
    return WG ? (bytes + 1023) & ~1023 : bytes;
}
template <bool WG>
__device__ __forceinline__ unsigned char* tile_stages(unsigned char* raw) {
    return WG ? raw + ((1024u - ((unsigned int)__cvta_generic_to_shared(raw) & 1023u)) & 1023u) : raw;
}

// Stage s (blocks 8 s .. 8 s + 7) of the CTA's rows and columns into shared memory at base: the
// 8 NF activation rows of xh (256 bytes each) first (load_x), then 128 weight rows of WROW bytes
// and 128 x SB scale bytes (load_w: the layer's weights, which a launch may read before its
// pdl_wait). Activation layout: WG = false (mma.sync, ldmatrix): row r at 256 r, 16-byte chunk c
// at c ^ (r & 7); WG = true (wgmma's K-major operand, 128-byte swizzle): K elements 64 h .. 64 h +
// 63 of every row in the 1024-byte-aligned half h (8 NF rows x 128 bytes), chunk c of row r at
// 128 r + 16 ((c & 7) ^ (r & 7)). F::LIMBS = 2 (WG only): xh rows of 2 K elements, a step's 128
// elements of limb 0 then of limb 1; the stage holds four such halves.
// A thread's chunks are i = 0, 1, ... of W4B_THREADS each: activation chunk q = tid + 256 i is row
// q / (16 LIMBS), chunk q % (16 LIMBS), so its source and destination move by a constant per i
// (the row's r & 7 stays); weight chunk q is column q / CH, chunk q % CH. The addresses are formed
// once (the constructor), a stage adds its step's offset: the loops form none.
template <int NF, class F, bool WG>
struct TileCopies {
    static_assert(F::LIMBS == 1 || (WG && F::LIMBS == 2), "one limb, or two on wgmma's layout");
    static constexpr int LIMBS = F::LIMBS, ACT = 8 * NF * 256 * LIMBS, CH = F::WB / 16;
    static constexpr int XN = (NF * LIMBS + 1) / 2;            // activation chunks per thread
    static constexpr int XROWS = W4B_THREADS / (16 * LIMBS);  // rows per activation chunk i
    static constexpr int XDST = XROWS * (WG ? 128 : 256);     // destination bytes per chunk i
    static constexpr int WCOLS = W4B_THREADS / CH;             // columns per weight chunk i
    const unsigned char* x;   // activation chunk 0 at step 0
    const unsigned char* w;   // weight chunk 0 at step 0 (column n0 + tid / CH)
    const unsigned char* ws;  // scale bytes of column n0 + tid at step 0 (tid < 128; past N: the first)
    const unsigned char* w0;  // the set's first row (the source of columns past N: 0 bytes)
    int xstep, wstep, wleft, xdst, wdst, wsz;  // wsz: the scale copy's source bytes (0 past N)

    __device__ __forceinline__ TileCopies(const unsigned char* __restrict__ xh, int row0, int K, const WeightSet& set,
                                          int n0, int N, int B) {
        const int tid = threadIdx.x, r = tid / (16 * LIMBS), c = tid % (16 * LIMBS), col = tid / CH, p = tid % CH;
        const size_t wrow = (size_t)B * (F::WB / 8);
        x = xh + (size_t)(row0 + r) * K * 2 * LIMBS + c * 16;
        xstep = XROWS * K * 2 * LIMBS;
        xdst = WG ? (c >> 3) * (8 * NF * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4) : r * 256 + ((c ^ (r & 7)) << 4);
        w0 = set.w;
        w = set.w + (size_t)(n0 + col) * wrow + p * 16;
        wstep = (int)(WCOLS * wrow);
        wleft = N - n0 - col;
        wdst = ACT + col * F::WROW + p * 16;
        wsz = n0 + tid < N ? F::SB : 0;
        ws = wsz != 0 ? set.ws + (size_t)(n0 + tid) * ((size_t)B * F::SB / 8) : set.ws;
    }
    __device__ __forceinline__ void load_x(unsigned char* base, int s) const {
        const unsigned char* src = x + (size_t)s * 128 * 2 * LIMBS;
#pragma unroll
        for (int i = 0; i < XN; ++i) {  // 8 NF rows x 16 LIMBS chunks of 16 bytes
            if (NF * LIMBS == 1 && threadIdx.x >= 128) break;  // NF = 1, one limb: 128 chunks
            cp_async16(base + xdst + i * XDST, src + (size_t)i * xstep, 16);
        }
    }
    __device__ __forceinline__ void load_w(unsigned char* base, int s) const {
        const unsigned char* src = w + (size_t)s * F::WB;
#pragma unroll
        for (int i = 0; i < CH / 2; ++i) {  // 128 weight rows x CH chunks
            const bool ok = i * WCOLS < wleft;
            cp_async16(base + wdst + i * WCOLS * F::WROW, ok ? src + (size_t)i * wstep : w0, ok ? 16 : 0);
        }
        if constexpr (F::SB > 0) {
            if (threadIdx.x < W4B_COLS) {  // 128 x SB scale bytes
                const unsigned char* src = ws + (wsz != 0 ? (size_t)s * F::SB : 0);
                unsigned char* dst = base + ACT + W4B_COLS * F::WROW + threadIdx.x * F::SB;
                if constexpr (F::SB == 8) cp_async8(dst, src, wsz);
                else cp_async4(dst, src, wsz);
            }
        }
    }
    __device__ __forceinline__ void load(unsigned char* base, int s) const {
        load_x(base, s);
        load_w(base, s);
    }
};

// The weights of the first ST - 1 stages of a CTA's K part (steps s_begin ..), uncommitted: the
// copies a launch issues before its pdl_wait (tile_gemm; each slow pass of tile_slow again).
template <int NF, class F, bool WG, int ST>
__device__ __forceinline__ void tile_early_weights(unsigned char* smem, const TileCopies<NF, F, WG>& cps, int s_begin,
                                                   int Sl) {
#pragma unroll
    for (int i = 0; i < ST - 1; ++i)
        if (i < Sl) cps.load_w(smem + i * tile_stage_bytes<NF, F, WG>(), s_begin + i);
}

// The prologue's activation rows of the first ST - 1 stages (ST: the body's stage count), one
// commit group each: the launch issued their weights before its pdl_wait (tile_gemm), so group 0
// holds stage 0's weights and activations and the next stages' weights, and every later group one
// stage (cp_async_wait<ST - 2> before stage ls is the group count of one load per stage).
template <int NF, class F, bool WG, int ST = W4B_STAGES>
__device__ __forceinline__ void tile_prologue_x(unsigned char* smem, const TileCopies<NF, F, WG>& cps, int s_begin,
                                                int Sl, int stage) {
#pragma unroll
    for (int i = 0; i < ST - 1; ++i) {
        if (i < Sl) cps.load_x(smem + i * stage, s_begin + i);
        cp_async_commit();
    }
}

// The weight operands (mma A fragments a[e][0..3]) and scales (ws[e][h]: row wc0 + 8 h) of blocks
// 2i + e, e = 0, 1, of this lane's rows in a stage: wp = the stage's weight rows (wc0's at wp,
// wc0 + 8's at wp + 8 WROW), sc = its scale bytes. NVFP4: two words per block (elements 0-7 in
// a0 / a1, 8-15 in a2 / a3), ws = f32(e4m3); Q2_0: one word per block shifted by sh = 2t (a2 / a3
// from bytes 2, 3), ws = f32(d) of the block's 64-element group.
template <class F>
__device__ __forceinline__ void tile_pair_operands(unsigned int (&a)[2][4], float (&ws)[2][2], int i,
                                                   const unsigned char* wp, const unsigned char* sc, int wc0,
                                                   unsigned int rm, unsigned int rs, unsigned int sh) {
    const unsigned char* wr1 = wp + 8 * F::WROW;
    if constexpr (F::SB == 4) {
        const float d0 = f16_to_f32(*(const unsigned short*)(sc + wc0 * 4 + 2 * (i >> 1)));
        const float d1 = f16_to_f32(*(const unsigned short*)(sc + (wc0 + 8) * 4 + 2 * (i >> 1)));
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const unsigned int X0 = *(const unsigned int*)(wp + 8 * i + 4 * e) >> sh;
            const unsigned int X1 = *(const unsigned int*)(wr1 + 8 * i + 4 * e) >> sh;
            a[e][0] = q2b_pair(X0, 0x7150u), a[e][1] = q2b_pair(X1, 0x7150u);
            a[e][2] = q2b_pair(X0, 0x7352u), a[e][3] = q2b_pair(X1, 0x7352u);
            ws[e][0] = d0, ws[e][1] = d1;
        }
    } else {
        const uint4 A0 = *(const uint4*)(wp + 16 * i), A1 = *(const uint4*)(wr1 + 16 * i);
        // scales of blocks 2i, 2i + 1: column wc0 (row 0), wc0 + 8 (row 1)
        const unsigned int s0w = *(const unsigned short*)(sc + wc0 * 8 + 2 * i);
        const unsigned int s1w = *(const unsigned short*)(sc + (wc0 + 8) * 8 + 2 * i);
        e4m3x2_to_f32(s0w, ws[0][0], ws[1][0]);
        e4m3x2_to_f32(s1w, ws[0][1], ws[1][1]);
        a[0][0] = w4b_pair(A0.x, rm, rs), a[0][1] = w4b_pair(A1.x, rm, rs);
        a[0][2] = w4b_pair(A0.y, rm, rs), a[0][3] = w4b_pair(A1.y, rm, rs);
        a[1][0] = w4b_pair(A0.z, rm, rs), a[1][1] = w4b_pair(A1.z, rm, rs);
        a[1][2] = w4b_pair(A0.w, rm, rs), a[1][3] = w4b_pair(A1.w, rm, rs);
    }
}

// Block pair i of a step into its 8-leaf subtree from its level-1 node l1 (the sum of leaves 2i
// and 2i + 1): pairs 0 and 2 park in q, pair 1 adds into r (level 2), pair 3 gives the root sr.
template <int NF>
__device__ __forceinline__ void tile_pair_up(int i, const float (&l1)[NF][4], float (&q)[NF][4], float (&r)[NF][4],
                                             float (&sr)[NF][4]) {
#pragma unroll
    for (int nf = 0; nf < NF; ++nf)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if ((i & 1) == 0) {
                q[nf][j] = l1[nf][j];
            } else {
                const float l2 = ieee_add(q[nf][j], l1[nf][j]);
                if (i == 1) r[nf][j] = l2;
                else sr[nf][j] = ieee_add(r[nf][j], l2);
            }
        }
}

// Block pair i of a step into its 8-leaf subtree: the leaves e0 (block 2i) and v (2i + 1) added
// (level 1), then tile_pair_up.
template <int NF>
__device__ __forceinline__ void tile_pair_tree(int i, const float (&e0)[NF][4], const float (&v)[NF][4],
                                               float (&q)[NF][4], float (&r)[NF][4], float (&sr)[NF][4]) {
    float l1[NF][4];
#pragma unroll
    for (int nf = 0; nf < NF; ++nf)
#pragma unroll
        for (int j = 0; j < 4; ++j) l1[nf][j] = ieee_add(e0[nf][j], v[nf][j]);
    tile_pair_up<NF>(i, l1, q, r, sr);
}

// The root sr of local step ls into the counter: added into levels 0 .. lvl - 1 (level 0 in
// L0, levels 1 .. dlog - 1 in ctr, float4 [dlog - 1][NF][256 threads]), parked at the first clear
// bit lvl of ls (the last step of a full part, lvl = dlog, leaves the part root in L0).
template <int NF>
__device__ __forceinline__ void tile_counter_push(int ls, int dlog, float (&sr)[NF][4], float (&L0)[NF][4],
                                                  float4* ctr, int tid) {
    const int lvl = __ffs(~ls) - 1;
    if (lvl == 0) {
#pragma unroll
        for (int nf = 0; nf < NF; ++nf)
#pragma unroll
            for (int j = 0; j < 4; ++j) L0[nf][j] = sr[nf][j];
        return;
    }
#pragma unroll
    for (int nf = 0; nf < NF; ++nf)
#pragma unroll
        for (int j = 0; j < 4; ++j) sr[nf][j] = ieee_add(L0[nf][j], sr[nf][j]);
    for (int L = 1; L < lvl; ++L) {
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
            const float4 c = ctr[((L - 1) * NF + nf) * W4B_THREADS + tid];
            sr[nf][0] = ieee_add(c.x, sr[nf][0]);
            sr[nf][1] = ieee_add(c.y, sr[nf][1]);
            sr[nf][2] = ieee_add(c.z, sr[nf][2]);
            sr[nf][3] = ieee_add(c.w, sr[nf][3]);
        }
    }
    if (lvl < dlog) {
#pragma unroll
        for (int nf = 0; nf < NF; ++nf)
            ctr[((lvl - 1) * NF + nf) * W4B_THREADS + tid] = make_float4(sr[nf][0], sr[nf][1], sr[nf][2], sr[nf][3]);
    } else {
#pragma unroll
        for (int nf = 0; nf < NF; ++nf)
#pragma unroll
            for (int j = 0; j < 4; ++j) L0[nf][j] = sr[nf][j];
    }
}

// A lane's roots r[nf][j] (weight row wc0 + 8 (j >> 1), activation row 8 nf + 2 t + (j & 1)) out:
// y = bf16(root * scale) (partial null; scale the set's rowscale, COLSCALE: the column's f32 from
// the set's scale pointer) or the root into partial [parts][gz][m][N].
template <int NF, bool COLSCALE = false>
__device__ __forceinline__ void tile_store(const float (&r)[NF][4], const WeightSet& set, int n0, int N, int row0,
                                           int m, int wc0, int t, float* __restrict__ partial, int part_i, int gz,
                                           int zs) {
#pragma unroll
    for (int nf = 0; nf < NF; ++nf)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = n0 + wc0 + 8 * (j >> 1), row = row0 + 8 * nf + 2 * t + (j & 1);
            if (col >= N || row >= m) continue;
            if (partial == nullptr)
                set.out[(size_t)row * set.ldo + col] = f32_to_bf16(
                    ieee_mul(r[nf][j], COLSCALE ? __ldg((const float*)set.ws + col) : set.rowscale));
            else
                partial[(((size_t)part_i * gz + zs) * m + row) * N + col] = r[nf][j];
        }
}

// The part root of Sl steps (level 0 after a full part of 2^dlog, else the fold of the set bits
// of Sl, the lowest first, each earlier subtree on the left) into L0, then out (tile_store).
template <int NF>
__device__ __forceinline__ void tile_finish(float (&L0)[NF][4], const float4* ctr, int tid, int Sl, int dlog,
                                            const WeightSet& set, int n0, int N, int row0, int m, int wc0, int t,
                                            float* __restrict__ partial, int part_i, int gz, int zs) {
    if (Sl != (1 << dlog)) {
        bool have = (Sl & 1) != 0;
        for (int L = 1; L < dlog; ++L) {
            if (((Sl >> L) & 1) == 0) continue;
#pragma unroll
            for (int nf = 0; nf < NF; ++nf) {
                const float4 c = ctr[((L - 1) * NF + nf) * W4B_THREADS + tid];
                L0[nf][0] = have ? ieee_add(c.x, L0[nf][0]) : c.x;
                L0[nf][1] = have ? ieee_add(c.y, L0[nf][1]) : c.y;
                L0[nf][2] = have ? ieee_add(c.z, L0[nf][2]) : c.z;
                L0[nf][3] = have ? ieee_add(c.w, L0[nf][3]) : c.w;
            }
            have = true;
        }
    }
    tile_store<NF>(L0, set, n0, N, row0, m, wc0, t, partial, part_i, gz, zs);
}

// The activation rows / 8 of a slow pass (tile_slow): half the tile's from NF = 8 (the slow
// epilogue's registers, a factor load per block value, at NF = 16 spill), else the tile's.
template <int NF>
__host__ __device__ constexpr int tile_slow_frags() {
    return NF >= 8 ? NF / 2 : NF;
}

// Body::run<NS, true, F> on a CTA with a slow row (NS = tile_slow_frags<NF>()): its 8 NF rows in
// passes of 8 NS, inlined. A call here (a __noinline__ slow body) makes ptxas serialise every
// wgmma of the kernel, the fast body's too (C7510: a wgmma pipeline crossing a function call).
// With NS < NF the launch's early weight copies (the NF stage layout) retire unused and each pass
// issues its own first stages' weights, as tile_gemm does.
template <int NF, class F, class Body>
__device__ __forceinline__ void tile_slow(const unsigned char* __restrict__ xh, const float* __restrict__ fac, int m,
                                          int row0, const WeightSet& set, int n0, int N, int B, int s_begin, int Sl,
                                          int dlog, float* __restrict__ partial, int part_i, int gz, int zs,
                                          unsigned char* smem) {
    constexpr int NS = tile_slow_frags<NF>();
    if constexpr (NS == NF) {
        Body::template run<NF, true, F>(xh, fac, m, row0, set, n0, N, B, s_begin, Sl, dlog, partial, part_i, gz, zs,
                                        smem);
    } else {
        cp_async_commit();
        cp_async_wait<0>();
        for (int h = 0; h < NF / NS; ++h) {
            __syncthreads();  // the earlier pass (or the early copies) is done with the stages
            const TileCopies<NS, F, Body::WG> cps(xh, row0 + 8 * NS * h, 16 * B, set, n0, N, B);
            tile_early_weights<NS, F, Body::WG, Body::STAGES>(smem, cps, s_begin, Sl);
            Body::template run<NS, true, F, NF>(xh, fac, m, row0 + 8 * NS * h, set, n0, N, B, s_begin, Sl, dlog,
                                                partial, part_i, gz, zs, smem);
        }
    }
}

// The CTA's output tile, rows [row0, row0 + rows) and columns [n0, n0 + cols), from a launch of
// (G C, ceil(R / G), parts x sets) CTAs over R = ceil(m / rows) row tiles and C = ceil(N / cols)
// column tiles: group blockIdx.y holds row tiles [G y, G y + G), taken row tiles fastest, then
// the next column tile, so a wave of CTAs reads the activations of about G row tiles (G = R: one
// group, each column tile's row tiles in turn). False for a CTA past a partial last group (it
// exits: every thread alike). The order of tiles changes no bits.
__device__ __forceinline__ bool tile_at(int m, int rows, int N, int cols, int& row0, int& n0) {
    const int C = (N + cols - 1) / cols, R = (m + rows - 1) / rows, G = gridDim.x / C;
    const int g0 = blockIdx.y * G, gs = min(G, R - g0), i = blockIdx.x;
    if (i >= gs * C) return false;
    row0 = (g0 + i % gs) * rows;
    n0 = (i / gs) * cols;
    return true;
}

// The CTA's tile (tile_at: 8 NF rows, 128 columns; blockIdx.z: part gz + set), its K part (steps
// [part kp8, part kp8 + kp8) of B / 8) and whether any of its rows is slow, then Body::run<NF,
// SLOW, F> over them (the mma.sync body of nvfp4_tile.cu or the wgmma bodies of nvfp4_wgmma.cu,
// Body::WG their stage layout, Body::STAGES their pipeline depth) with the dynamic shared memory.
// Launched programmatically (metrale/cuda/pdl.py): the weights of the first Body::STAGES - 1
// stages are requested before pdl_wait, everything the prologue wrote after it.
template <int NF, class F, class Body>
__device__ __forceinline__ void tile_gemm(const unsigned char* __restrict__ xh, const float* __restrict__ fac,
                                          const unsigned char* __restrict__ slow, int m, const WeightSet& set, int N,
                                          int B, int gz, int kp8, int dlog, float* __restrict__ partial) {
    extern __shared__ __align__(16) unsigned char tile_smem[];
    int row0, n0;
    if (!tile_at(m, 8 * NF, N, W4B_COLS, row0, n0)) return;
    const int part_i = blockIdx.z / gz, zs = blockIdx.z % gz;
    const int S8 = B >> 3, s_begin = part_i * kp8, Sl = min(S8 - s_begin, kp8);
    unsigned char* smem = tile_stages<Body::WG>(tile_smem);
    const TileCopies<NF, F, Body::WG> cps(xh, row0, 16 * B, set, n0, N, B);
    tile_early_weights<NF, F, Body::WG, Body::STAGES>(smem, cps, s_begin, Sl);
    pdl_wait();
    pdl_trigger();
    const int any_slow = __syncthreads_or(threadIdx.x < 8 * NF ? slow[row0 + threadIdx.x] : 0);
    if (any_slow)
        tile_slow<NF, F, Body>(xh, fac, m, row0, set, n0, N, B, s_begin, Sl, dlog, partial, part_i, gz, zs, smem);
    else
        Body::template run<NF, false, F>(xh, fac, m, row0, set, n0, N, B, s_begin, Sl, dlog, partial, part_i, gz, zs,
                                         smem);
}

// extern "C" NAME: the tiled GEMM of Body on format F, 8 NF rows per CTA, built for MINB CTAs per
// multiprocessor (the arguments of nvfp4_tile.cu's header).
#define TILE_GEMM_KERNEL(NAME, BODY, F, NF, MINB)                                                         \
    extern "C" __global__ void __launch_bounds__(W4B_THREADS, MINB) NAME(                                  \
        const unsigned char* __restrict__ xh, const float* __restrict__ fac,                               \
        const unsigned char* __restrict__ slow, int m, const unsigned char* w0, const unsigned char* s0,   \
        float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, const unsigned char* s1, \
        float rs1, unsigned short* out1, long long ldo1, int N, int B, int gz, int kp8, int dlog,          \
        float* __restrict__ partial) {                                                                     \
        const WeightSet set = weight_set_at(blockIdx.z % gz, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1); \
        tile_gemm<NF, F, BODY>(xh, fac, slow, m, set, N, B, gz, kp8, dlog, partial);                        \
    }
