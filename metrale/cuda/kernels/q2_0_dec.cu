// q2_0_dec.cu -- Q2_0 (GGUF type 42) weights x A16 activations for decode rows (m = 1, 2, 3): one pass
// over the weights whatever m, every weight load used for every row.
//
// Contract: arithmetic.md § q2_0-format (layout), § a16 (block fixed point), § projection (Q2_0 row:
// S_b exact, v_b = (f32(S_b) * f32(d)) * 2^(E_b - 14), y = bf16(root)), § tree (the fixed binary tree
// over the blocks, padded with -0.0).
//
// Weights as metrale/cuda/q2_0.py uploads them: qs uint8 [N, K/4] (the 16 code bytes of each Q2 block
// contiguous: 32-bit word i is A16 block 4 qb + i, its byte j holds elements 4j .. 4j+3 at bit pairs
// 0, 2, 4, 6), d uint16 [N, K/64] (f16 bits). nq = K/64 Q2 blocks per row.
//
// Kernels (extern "C"; both PDL-capable, metrale/cuda/pdl.py: pdl_trigger, pdl_wait, then memory;
// with Q2D_RING_EARLY the decode kernels' first D - 1 weight steps before the wait):
//   q2_dec_prep(x, ldx, K, m, act)
//       grid ceil(4 m (K/16) / 128), block 128: four threads per (row, A16 block), thread s making
//       limb word s (elements s, s+4, s+8, s+12: the order of the 2-bit fields). A16 codes c by
//       common.cuh's a16_code_int (0 in a block holding Inf/NaN), split c = 256 hi + lo with
//       lo in [0, 255], hi in [-128, 127]. act uint32 [m, 40 nq]: per row three planes, entry
//       i nq + qb for A16 block b = 4 qb + i (so a warp reading 32 consecutive qb is coalesced
//       and free of bank conflicts):
//         lo  uint4 [4, nq]   byte j of word s: lo of element s + 4j
//         hi  uint4 [4, nq]   the same for hi
//         aux uint2 [4, nq]   (0x4B400000 - sum of the 16 codes, f32 bits of 2^(E - 14), or a NaN
//                             for a non-finite block)
//   q2_dec_r{R}_c{NC}_d{D}_{s,l}(qs, d, N, K, act, m, out, ldo)
//       block 32 W (W <= 8 warps), grid (gx, ceil(m / R)); dynamic shared memory R * 160 nq bytes
//       (_s) or none (_l). Warp = NC output columns x R rows: column group g covers columns NC g ..
//       NC g + NC - 1; warp w of CTA b takes groups W b + w, then + W gx, ... (gx below the group
//       count makes the CTAs persistent). _s copies the R rows of act into shared memory once per CTA;
//       _l reads them through L1 (__ldg; the weights bypass L1). Step = one chunk of 32 Q2 blocks
//       (2048 elements) of the warp's NC columns: lane l takes Q2 block qb = 32 ch + l, 16 bytes of
//       qs per column (ld.global.nc.L1::no_allocate) and its f16 d. A warp's steps (its groups'
//       chunks in order) go through a ring of D register slots: D - 1 steps are in flight while one
//       is computed (the first ones issued before the activations are staged).
//       Instantiated from metrale/cuda/configs.py Q2_0_DEC_VARIANTS (the launcher: q2_0.py).
//   q2c_dec_r{R}_c{NC}_d{D}_{s,l} (the same arguments): on the block-value chain
//       (docs/chain-revision.md; tile.CHAIN; the variants Q2_0_DEC_ROUTE routes,
//       configs.q2_chain_dec_builds): the same steps and block dots, but each step's term pairs
//       P_b = f32(S_b) 2^(E_b - 14), f_b = f32(d) go to the warp's scratch after the staged rows
//       (2 NC R (Q2D_P_FLOATS + Q2D_F_FLOATS) floats: q2d_terms), and lane u < NC R chains the chunk's two parts of
//       (row u / NC, column u % NC), c = fma(P_b, f_b, c) from -0.0 (q2d_chain_parts), then
//       pushes the part roots into its counter over parts (8 levels: up to 128 parts).
//   q2cp_dec_r{R}_c{NC}_d{D}_{s,l}: the same with each step's chains run after the next step's
//       terms (two scratches per warp by step parity; every lane chains, lane mod NC R, so the
//       chains' code has no branch and interleaves with the block dots); rows
//       configs.Q2_0_CHAIN_PIPE_ROWS_BUILT, routed for q2_0.CHAIN_PIPE_ROWS.
//
// Arithmetic per lane, column and A16 block (exact, in int32): g_s = (word >> 2s) & 0x03030303 holds
// the codes q in 0..3 of elements s + 4j; slo = dp4a(g_s, lo_s) (unsigned, started at aux.x),
// shi = dp4a(g_s, hi_s) (signed), so 256 shi + slo = 0x4B400000 + S_b with S_b = sum (q - 1) c
// (|S_b| < 2^20): the bits of the float 1.5 * 2^23 + S_b, and f32(S_b) = that float - 1.5 * 2^23
// exactly (no int -> float conversion). v_b = (f32(S_b) * f32(d)) * 2^(E_b - 14), f32(d) by
// cvt.f32.f16 (exact), every fp32 step common.cuh's ieee_mul / ieee_add. A non-finite block has
// codes 0 and factor NaN, so v_b = NaN.
//
// Tree (arithmetic.md § tree): the lane's value is ((v0 + v1) + (v2 + v3)) over its Q2 block (the
// aligned 4-block subtree; -0.0 past nq). The NC columns' lane values meet in a butterfly that
// halves the columns at each level (shfl_xor 1, 2, .. NC/2), then shfl_xor NC .. 16: every level
// adds the subtrees of lanes l and l ^ o, the pairing of warp_tree_ieee, so each lane ends with the
// chunk root (an aligned 128-block subtree) of column NC g + rev(l mod NC), rev = bit reversal over
// log2 NC bits. Chunk roots enter a binary counter in K order (as mma_gemm.cuh's streaming tree):
// chunk s is added into levels 0, 1, .. while bit L of s is set and parks at the first clear bit;
// after C chunks the padded tree's root is the right-nested sum of the parked subtrees from the
// lowest level up. Lanes l < NC store y = bf16(root). C <= 64 (K <= 131072).
//
// Build: --fmad=false (no contraction); subnormals kept whatever -ftz (inline-PTX fp32 steps).

#include "common.cuh"

typedef unsigned short u16;
typedef unsigned int u32;

// @defines Q2_0_DEC (Q2D_WARPS, the most warps per CTA; Q2D_P_FLOATS / Q2D_F_FLOATS, the chain
// scratch's floats per (row, column, part) of P_b and f_b; Q2D_RING_EARLY, the decode kernels'
// first weight loads before the PDL wait; from metrale/cuda/configs.py)
#define Q2D_LEVELS 7  // binary counter over at most 64 chunk roots (the chain's: 128 part roots, 8)

// f16 bits (low half of h) -> f32, exact.
__device__ __forceinline__ float q2d_f16(u32 h) {
    float f;
    asm("{.reg .b16 l, u;\n\tmov.b32 {l, u}, %1;\n\tcvt.f32.f16 %0, l;\n\t}" : "=f"(f) : "r"(h));
    return f;
}

extern "C" __global__ void __launch_bounds__(128) q2_dec_prep(const u16* __restrict__ x, long long ldx, int K,
                                                             int m, u32* __restrict__ act) {
    pdl_trigger();
    pdl_wait();
    const int B = K >> 4, nq = K >> 6;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long rb = t >> 2;  // (row, block): the four threads of a quad share it
    if (rb >= (long long)m * B) return;
    const int s = (int)(t & 3), r = (int)(rb / B), blk = (int)(rb % B);
    const u32 quad = 0xFu << (threadIdx.x & 28);
    const uint4* xp = reinterpret_cast<const uint4*>(x + (long long)r * ldx + blk * 16);
    const uint4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
    const u32 xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    int F = 1, nf = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int f0 = (xw[j] >> 7) & 0xFF, f1 = (xw[j] >> 23) & 0xFF;
        F = max(F, max(f0, f1));
        nf |= (f0 == 255) | (f1 == 255);
    }
    u32 lo = 0u, hi = 0u;
    int csum = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        // element s + 4j of the block: half s & 1 of word 2j + (s >> 1) (static indices: no local memory)
        const u32 wj = (s >> 1) ? xw[2 * j + 1] : xw[2 * j];
        const u16 xe = (u16)((s & 1) ? (wj >> 16) : (wj & 0xFFFFu));
        const int c = nf ? 0 : a16_code_int(xe, F);
        lo |= (u32)(c & 0xFF) << (8 * j);
        hi |= (u32)((c >> 8) & 0xFF) << (8 * j);
        csum += c;
    }
    csum += __shfl_xor_sync(quad, csum, 1);
    csum += __shfl_xor_sync(quad, csum, 2);
    const int qb = blk >> 2, i = blk & 3;
    u32* a = act + (long long)r * 40 * nq;
    const long long e4 = (long long)(i * nq + qb) * 4 + s;
    a[e4] = lo;
    a[16LL * nq + e4] = hi;
    if (s == 0) {
        const long long e2 = 32LL * nq + (long long)(i * nq + qb) * 2;
        a[e2] = 0x4B400000u - (u32)csum;
        a[e2 + 1] = nf ? 0x7FC00000u : __float_as_uint(pow2f(F - 127 - 14));
    }
}

// One step's weights: column c's 16 code bytes and f16 d (low half).
template <int NC>
struct Q2dLoad {
    uint4 w[NC];
    u32 d[NC];
};

template <int NC>
__device__ __forceinline__ void q2d_load(Q2dLoad<NC>& st, const uint4* __restrict__ qs, const u16* __restrict__ d,
                                         int N, int nq, int groups, int g, int ch, int lane) {
    const int qb = ch * 32 + lane;
    const bool ok = g < groups && qb < nq;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        const int n = g * NC + c;
        const long long o = (long long)n * nq + qb;
        st.w[c] = (ok && n < N) ? ld_stream16(qs + o) : make_uint4(0u, 0u, 0u, 0u);
        st.d[c] = (ok && n < N) ? (u32)__ldg(d + o) : 0u;
    }
}

template <bool SM>
__device__ __forceinline__ uint4 q2d_act4(const u32* p) {
    return SM ? *reinterpret_cast<const uint4*>(p) : __ldg(reinterpret_cast<const uint4*>(p));
}
template <bool SM>
__device__ __forceinline__ uint2 q2d_act2(const u32* p) {
    return SM ? *reinterpret_cast<const uint2*>(p) : __ldg(reinterpret_cast<const uint2*>(p));
}

// The chunk roots of a step, root[r] for column NC g + rev(lane mod NC) of row r.
template <int NC>
__device__ __forceinline__ float q2d_warp_tree(float (&v)[NC], int lane) {
#pragma unroll
    for (int lv = 0; (NC >> lv) > 1; ++lv) {
        const int h = NC >> (lv + 1), o = 1 << lv;
        const bool up = (lane & o) != 0;
#pragma unroll
        for (int j = 0; j < h; ++j) {
            const float keep = up ? v[j + h] : v[j];
            const float send = up ? v[j] : v[j + h];
            v[j] = ieee_add(keep, __shfl_xor_sync(0xffffffffu, send, o));
        }
    }
    float t = v[0];
#pragma unroll
    for (int o = NC; o < 32; o <<= 1) t = ieee_add(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

// The act words of A16 block 4 e + i of one row (lo, hi limbs; aux).
struct Q2dAct {
    uint4 lo, hi;
    uint2 ax;
};
template <bool SM>
__device__ __forceinline__ Q2dAct q2d_act(const u32* a, int nq, int e, int i) {
    return {q2d_act4<SM>(a + 4 * (i * nq + e)), q2d_act4<SM>(a + 16 * nq + 4 * (i * nq + e)),
            q2d_act2<SM>(a + 32 * nq + 2 * (i * nq + e))};
}
// The 2-bit codes g_s of word i of a column's Q2 block (elements s + 4j of A16 block 4 qb + i).
template <int NC>
__device__ __forceinline__ void q2d_codes(const Q2dLoad<NC>& st, int c, int i, u32 (&gq)[4]) {
    const u32 qw = i == 0 ? st.w[c].x : i == 1 ? st.w[c].y : i == 2 ? st.w[c].z : st.w[c].w;
#pragma unroll
    for (int s = 0; s < 4; ++s) gq[s] = (qw >> (2 * s)) & 0x03030303u;
}
// f32(S_b) of one block and row, exactly (the header's arithmetic).
__device__ __forceinline__ float q2d_sum(const u32 (&gq)[4], const Q2dAct& a) {
    const u32 l[4] = {a.lo.x, a.lo.y, a.lo.z, a.lo.w};
    const u32 h[4] = {a.hi.x, a.hi.y, a.hi.z, a.hi.w};
    u32 slo = a.ax.x;
    int shi = 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        slo = __dp4a(gq[s], l[s], slo);
        shi = __dp4a((int)gq[s], (int)h[s], shi);
    }
    return ieee_add(__uint_as_float((u32)shi * 256u + slo), -12582912.0f);
}

// For A16 block i = 0..3 of the lane's Q2 block e, column c and row r (in that loop order):
// f(i, c, r, f32(S_b), 2^(E_b - 14)).
template <int R, int NC, bool SM, class F>
__device__ __forceinline__ void q2d_blocks(const Q2dLoad<NC>& st, const u32* const (&ar)[R], int nq, int e, F f) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        Q2dAct av[R];
#pragma unroll
        for (int r = 0; r < R; ++r) av[r] = q2d_act<SM>(ar[r], nq, e, i);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            u32 gq[4];
            q2d_codes(st, c, i, gq);
#pragma unroll
            for (int r = 0; r < R; ++r) f(i, c, r, q2d_sum(gq, av[r]), __uint_as_float(av[r].ax.y));
        }
    }
}

template <int R, int NC, bool SM>
__device__ __forceinline__ void q2d_step(const Q2dLoad<NC>& st, const u32* const (&ar)[R], int nq, int qb,
                                         bool valid, int lane, float (&root)[R]) {
    float dd[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) dd[c] = q2d_f16(st.d[c]);
    float a[R][NC], b[R][NC];
    q2d_blocks<R, NC, SM>(st, ar, nq, valid ? qb : 0, [&](int i, int c, int r, float fs, float fac) {
        const float v = ieee_mul(ieee_mul(fs, dd[c]), fac);
        if (i == 0) a[r][c] = v;
        else if (i == 1) a[r][c] = ieee_add(a[r][c], v);
        else if (i == 2) b[r][c] = v;
        else a[r][c] = ieee_add(a[r][c], ieee_add(b[r][c], v));
    });
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) v[c] = valid ? a[r][c] : -0.0f;
        root[r] = q2d_warp_tree<NC>(v, lane);
    }
}

// CH (the block-value chain): the step's term pairs into the warp's scratch instead of the tree:
// P_b = f32(S_b) * 2^(E_b - 14) (one rounding, as ldexpf's where subnormal; NaN for a non-finite
// block) of A16 block 4 qb + i at sp[Q2D_P_FLOATS k + 4 (lane & 15) + i] and f_b = f32(d) at
// sf[Q2D_F_FLOATS k + (lane & 15)], k = r NC + c + (lane >> 4) NC R (lanes 0-15 hold part 2 ch of the
// chunk, lanes 16-31 part 2 ch + 1).
template <int R, int NC, bool SM>
__device__ __forceinline__ void q2d_terms(const Q2dLoad<NC>& st, const u32* const (&ar)[R], int nq, int qb,
                                          int lane, float* sp, float* sf) {
    float P[R][NC][4];
    q2d_blocks<R, NC, SM>(st, ar, nq, qb < nq ? qb : 0,
                          [&](int i, int c, int r, float fs, float fac) { P[r][c][i] = ieee_mul(fs, fac); });
    const int half = lane >> 4, j = lane & 15;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const int k = r * NC + c + half * NC * R;
            *reinterpret_cast<float4*>(sp + Q2D_P_FLOATS * k + 4 * j) = make_float4(P[r][c][0], P[r][c][1], P[r][c][2], P[r][c][3]);
            sf[Q2D_F_FLOATS * k + j] = q2d_f16(st.d[c]);
        }
}

// CH: lane u < NC R chains the two parts of the chunk for (row u / NC, column u % NC) from the
// scratch (c = fma(P_b, f_b, c) from -0.0 over the part's nq0 / nq1 Q2 blocks in K order, both
// parts in one loop, unrolled so that the reads run ahead of the fmas: the slots past a part's
// end are read and not used) and returns their roots.
__device__ __forceinline__ void q2d_chain_parts(const float* sp, const float* sf, int k0, int k1, int nq0, int nq1,
                                                float& c0, float& c1) {
    c0 = -0.0f;
    c1 = -0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const float4 p0 = *reinterpret_cast<const float4*>(sp + Q2D_P_FLOATS * k0 + 4 * j);
        const float4 p1 = *reinterpret_cast<const float4*>(sp + Q2D_P_FLOATS * k1 + 4 * j);
        const float f0 = sf[Q2D_F_FLOATS * k0 + j], f1 = sf[Q2D_F_FLOATS * k1 + j];
        if (j < nq0) c0 = ieee_fma(p0.w, f0, ieee_fma(p0.z, f0, ieee_fma(p0.y, f0, ieee_fma(p0.x, f0, c0))));
        if (j < nq1) c1 = ieee_fma(p1.w, f1, ieee_fma(p1.z, f1, ieee_fma(p1.y, f1, ieee_fma(p1.x, f1, c1))));
    }
}

// Chunk s of a column enters the counter (arithmetic.md § tree, streaming).
template <int LV>
__device__ __forceinline__ void q2d_push(float (&p)[LV], float c, int s) {
    bool carry = true;
#pragma unroll
    for (int L = 0; L < LV; ++L) {
        if (carry) {
            if ((s >> L) & 1) {
                c = ieee_add(p[L], c);
            } else {
                p[L] = c;
                carry = false;
            }
        }
    }
}

// The padded tree's root after C chunks: p[L_hi] + (... + (p[L_2] + p[L_1])) over the set bits of C.
template <int LV>
__device__ __forceinline__ float q2d_root(const float (&p)[LV], int C) {
    float acc = -0.0f;
    bool have = false;
#pragma unroll
    for (int L = 0; L < LV; ++L) {
        if ((C >> L) & 1) {
            acc = have ? ieee_add(p[L], acc) : p[L];
            have = true;
        }
    }
    return acc;
}

// The next step of a warp: chunk ch + 1 of group g, or chunk 0 of group g + gstep.
__device__ __forceinline__ void q2d_advance(int& g, int& ch, int C, int gstep) {
    if (++ch == C) {
        ch = 0;
        g += gstep;
    }
}

template <int R, int NC, int D, bool SM, int CH>
__device__ __forceinline__ void q2d_body(const uint4* __restrict__ qs, const u16* __restrict__ d, int N, int K,
                                         const u32* __restrict__ act, int m, u16* __restrict__ out, long long ldo,
                                         u32* smem) {
    static_assert(!CH || NC * R <= 32, "one chaining lane per (row, column)");
    constexpr bool PIPE = CH == 2;  // the chains of step t run after step t + 1's terms
    pdl_trigger();
    if (!Q2D_RING_EARLY) pdl_wait();
    const int nq = K >> 6, C = (nq + 31) >> 5, rs = 40 * nq;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int warps = blockDim.x >> 5, groups = (N + NC - 1) / NC, gstep = gridDim.x * warps;
    const int r0 = blockIdx.y * R;
    const int g0 = blockIdx.x * warps + warp;
    const int T = g0 < groups ? ((groups - 1 - g0) / gstep + 1) * C : 0;  // this warp's steps
    // Ring of D load slots: step t lives in slot t mod D, D - 1 steps in flight. The first D - 1
    // are issued before the activations arrive (weights never depend on them).
    Q2dLoad<NC> buf[D];
    int lg = g0, lch = 0;  // the next step to load
#pragma unroll
    for (int j = 0; j < D - 1; ++j) {
        q2d_load<NC>(buf[j], qs, d, N, nq, groups, lg, lch, lane);
        q2d_advance(lg, lch, C, gstep);
    }
    // Q2D_RING_EARLY: those loads go before the PDL wait (no launch of the FFN writes weights:
    // metrale/cuda/pdl.py), the activations after it
    if (Q2D_RING_EARLY) pdl_wait();
    const u32* ar[R];
    if (SM) {
        const int rows = min(R, m - r0);
        const uint4* src = reinterpret_cast<const uint4*>(act + (long long)r0 * rs);
        uint4* dst = reinterpret_cast<uint4*>(smem);
        for (int i = threadIdx.x; i < rows * 10 * nq; i += blockDim.x) dst[i] = __ldg(src + i);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < R; ++r) ar[r] = smem + r * rs;  // rows >= m: never stored
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) ar[r] = act + (long long)min(r0 + r, m - 1) * rs;
    }
    int col = 0;  // rev(lane mod NC)
#pragma unroll
    for (int lv = 0; (NC >> lv) > 1; ++lv) col += (lane >> lv) & 1 ? NC >> (lv + 1) : 0;
    float p[R][Q2D_LEVELS];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int L = 0; L < Q2D_LEVELS; ++L) p[r][L] = -0.0f;
    // CH: the warp's term scratch after the staged rows (SCR floats per warp; PIPE: two, by step
    // parity), this lane's counter over the parts of (row u / NC, column u % NC), u = lane
    // (PIPE: lane mod NC R, every lane chaining so the chains' code has no branch to interleave
    // with the next step's)
    constexpr int SCR = 2 * NC * R * (Q2D_P_FLOATS + Q2D_F_FLOATS);
    float* const sp0 = reinterpret_cast<float*>(smem + (SM ? R * rs : 0)) + warp * SCR * (PIPE ? 2 : 1);
    const int QP = (nq + 15) >> 4;  // chain parts per column
    float pc[Q2D_LEVELS + 1];
#pragma unroll
    for (int L = 0; L <= Q2D_LEVELS; ++L) pc[L] = -0.0f;
    const int u = PIPE ? lane % (NC * R) : lane;
    auto chain_step = [&](const float* sp, int gg, int cc) {  // the chains of step (gg, cc)
        const int nq0 = min(16, nq - 32 * cc), nq1 = min(16, nq - 32 * cc - 16);
        float c0, c1;
        q2d_chain_parts(sp, sp + 2 * NC * R * Q2D_P_FLOATS, u, u + NC * R, nq0, nq1, c0, c1);
        q2d_push(pc, c0, 2 * cc);
        if (nq1 > 0) q2d_push(pc, c1, 2 * cc + 1);
        const int n = gg * NC + u % NC, r = u / NC;
        if (lane < NC * R && cc == C - 1 && n < N && r0 + r < m)
            out[(long long)(r0 + r) * ldo + n] = f32_to_bf16(q2d_root(pc, QP));
    };
    int pg = 0, pch = -1, sc = 0;  // PIPE: the step whose chains are pending (pch < 0: none), steps done
    int g = g0, ch = 0;  // the step computed next
    for (int t = 0; t < T; t += D) {
#pragma unroll
        for (int j = 0; j < D; ++j) {
            // slot (j + D - 1) mod D held step t + j - 1, computed: refill it with step t + j + D - 1
            q2d_load<NC>(buf[(j + D - 1) % D], qs, d, N, nq, groups, lg, lch, lane);
            q2d_advance(lg, lch, C, gstep);
            if (CH && t + j < T) {  // warp-uniform
                float* const sp = sp0 + (PIPE ? (sc & 1) * SCR : 0);
                q2d_terms<R, NC, SM>(buf[j], ar, nq, ch * 32 + lane, lane, sp, sp + 2 * NC * R * Q2D_P_FLOATS);
                if constexpr (PIPE) {
                    if (pch >= 0) chain_step(sp0 + ((sc + 1) & 1) * SCR, pg, pch);
                    pg = g;
                    pch = ch;
                    ++sc;
                } else {
                    __syncwarp();
                    if (lane < NC * R) chain_step(sp, g, ch);
                }
                __syncwarp();  // the scratch is read before the next step (PIPE: the one after) writes it
                q2d_advance(g, ch, C, gstep);
            } else if (t + j < T) {  // warp-uniform
                const int qb = ch * 32 + lane;
                float root[R];
                q2d_step<R, NC, SM>(buf[j], ar, nq, qb, qb < nq, lane, root);
#pragma unroll
                for (int r = 0; r < R; ++r) q2d_push(p[r], root[r], ch);
                if (ch == C - 1) {  // the group's last chunk: its roots are complete
                    const int n = g * NC + col;
                    if (lane < NC && n < N) {
#pragma unroll
                        for (int r = 0; r < R; ++r)
                            if (r0 + r < m) out[(long long)(r0 + r) * ldo + n] = f32_to_bf16(q2d_root(p[r], C));
                    }
                }
                q2d_advance(g, ch, C, gstep);
            }
        }
    }
    if constexpr (PIPE) {
        if (pch >= 0) chain_step(sp0 + ((sc + 1) & 1) * SCR, pg, pch);  // the last step's chains
    }
}

#define Q2_DEC(R, NC, D, SM, SUFFIX, CH, PREFIX)                                                          \
    extern "C" __global__ void __launch_bounds__(32 * Q2D_WARPS) PREFIX##_dec_r##R##_c##NC##_d##D##_##SUFFIX( \
        const uint4* __restrict__ qs, const u16* __restrict__ d, int N, int K, const u32* __restrict__ act, \
        int m, u16* __restrict__ out, long long ldo) {                                                   \
        extern __shared__ uint4 q2d_smem[];                                                              \
        q2d_body<R, NC, D, SM, CH>(qs, d, N, K, act, m, out, ldo, reinterpret_cast<u32*>(q2d_smem));    \
    }

// @instances Q2_DEC   (lines generated from metrale/cuda/configs.py)
