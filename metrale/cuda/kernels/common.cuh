// common.cuh -- device helpers shared by metrale's kernel files (arithmetic.md § elements, § a16).
//
// No system headers: the files compile under NVRTC (CuPy RawModule) and nvcc alike.
// bf16 travels as raw 16-bit patterns (unsigned short); every function here is exact
// or correctly rounded by IEEE rules, and the files are built with --fmad=false.
//
//   bf16_to_f32(bits)        exact widening
//   f32_to_bf16(f)           round to nearest even, overflow to Inf, every NaN -> 0x7FC0
//   e4m3_to_f32(byte)        exact (no NaN expected: weights are validated)
//   f32_to_e4m3_sat(f)       RNE of a finite f in [0, 448] (caller clamps)
//   pow2f(e)                 2^e as f32 for e in [-149, 127] (subnormal included)
//   nib8_codes(w, c0, c1)    8 NVFP4 nibbles -> 8 int8 codes 2*e2m1 (byte n = element n)
//   dp4a_su / dp4a_ss        int32 += 4 x (s8 * u8) / (s8 * s8)
//   dp4a_su4 / dp4a_ss4      16 products: words c0..c3 against v.x..v.w, chained from 0 in that order
//   warp_sum_tree(v)         shfl_xor 1,2,4,8,16: lane l's value is leaf l of a 32-leaf tree
//   a16_block(...)           A16 codes of one 16-element block (E, c_j, finite)
//   pdl_trigger / pdl_wait   programmatic dependent launch (metrale/cuda/pdl.py; no-ops below sm_90)
//   ld_stream16(p)           16 bytes read once (weights): ld.global.nc without L1 allocation
//   TableAct / CompactAct    an activation table's value: the whole table / its compact form in smem
//   act_mul1 / act_mul8      h = bf16(act[gate] * f32(up)) of 1 / 8 packed elements
//   load_compact_table       the compact form into shared memory
//   compact_act_start        a kernel's start with it: trigger, copy, wait, sync
//   tk_start(c, G, U)        stream-K: the first of U work units of CTA c of G
#pragma once

#define METRALE_NEG_ZERO (-0.0f)

__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)0x7FC0u;  // canonical NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // RNE; a finite value past the top rounds to Inf
    return (unsigned short)(u >> 16);
}

__device__ __forceinline__ float e4m3_to_f32(unsigned int v) {
    unsigned int s = (v >> 7) & 1u, e = (v >> 3) & 15u, mm = v & 7u;
    float r;
    if (e == 0u) {
        r = (float)mm * 0.001953125f;  // mm * 2^-9, exact
    } else {
        r = __uint_as_float(((e + 120u) << 23) | (mm << 20));
    }
    return s ? -r : r;
}

// e4m3 bits of a finite f in [0, 448] (round to nearest even); the caller saturates.
__device__ __forceinline__ unsigned int f32_to_e4m3_sat(float f) {
    if (f < 0.015625f) {  // below the smallest normal 2^-6: multiples of 2^-9
        float q = rintf(f * 512.0f);  // exact product, RNE to an integer in [0, 8]
        return (unsigned int)q;        // q = 8 is the normal 2^-6 (bits 0x08)
    }
    unsigned int u = __float_as_uint(f);
    u += 0x7ffffu + ((u >> 20) & 1u);  // RNE to 3 mantissa bits
    return (u >> 20) - (120u << 3);
}

__device__ __forceinline__ float pow2f(int e) {
    if (e >= -126) return __uint_as_float((unsigned int)(e + 127) << 23);
    return __uint_as_float(1u << (e + 149));
}

__device__ __forceinline__ unsigned int prmt(unsigned int a, unsigned int b, unsigned int s) {
    unsigned int d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
    return d;
}

// Eight nibbles (element n in bits 4n..4n+3: bit 3 sign, bits 0-2 index e2m1 magnitudes)
// -> int8 codes 2*e2m1 in {0,1,2,3,4,6,8,12} with sign; c0 holds elements 0-3, c1 4-7.
__device__ __forceinline__ void nib8_codes(unsigned int w, unsigned int& c0, unsigned int& c1) {
    const unsigned int P0 = 0x03020100u, P1 = 0x0C080604u;  // +0 +1 +2 +3 | +4 +6 +8 +12
    const unsigned int N0 = 0xFDFEFF00u, N1 = 0xF4F8FAFCu;  // -0 -1 -2 -3 | -4 -6 -8 -12
    unsigned int mag = w & 0x77777777u;
    unsigned int sel = ((w >> 1) & 0x44444444u) | 0x32103210u;  // byte n from pos (n) or neg (n+4)
    unsigned int mag1 = mag >> 16, sel1 = sel >> 16;
    c0 = prmt(prmt(P0, P1, mag), prmt(N0, N1, mag), sel);
    c1 = prmt(prmt(P0, P1, mag1), prmt(N0, N1, mag1), sel1);
}

__device__ __forceinline__ int dp4a_su(unsigned int a_s8, unsigned int b_u8, int c) {
    int d;
    asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a_s8), "r"(b_u8), "r"(c));
    return d;
}

__device__ __forceinline__ int dp4a_ss(unsigned int a_s8, unsigned int b_s8, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a_s8), "r"(b_s8), "r"(c));
    return d;
}

// The dot of four signed code words c0..c3 with the four words of v (u8 bytes: dp4a_su4, s8:
// dp4a_ss4), one dp4a chain from 0 in the order c0.v.x, c1.v.y, c2.v.z, c3.v.w.
__device__ __forceinline__ int dp4a_su4(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3,
                                        uint4 v) {
    return dp4a_su(c3, v.w, dp4a_su(c2, v.z, dp4a_su(c1, v.y, dp4a_su(c0, v.x, 0))));
}

__device__ __forceinline__ int dp4a_ss4(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3,
                                        uint4 v) {
    return dp4a_ss(c3, v.w, dp4a_ss(c2, v.z, dp4a_ss(c1, v.y, dp4a_ss(c0, v.x, 0))));
}

// The contract's tree over 32 leaves, leaf l in lane l: adjacent pairs first (xor 1), then
// pairs of pairs... Every lane ends with the root (fp32 add is commutative, so a+b == b+a).
__device__ __forceinline__ float warp_sum_tree(float v) {
    v = v + __shfl_xor_sync(0xffffffffu, v, 1);
    v = v + __shfl_xor_sync(0xffffffffu, v, 2);
    v = v + __shfl_xor_sync(0xffffffffu, v, 4);
    v = v + __shfl_xor_sync(0xffffffffu, v, 8);
    v = v + __shfl_xor_sync(0xffffffffu, v, 16);
    return v;
}

// A16 (arithmetic.md § a16) for one block of 16 bf16 values xb[0..15]:
// E = max(exponent field, zero field counted as 1) - 127; c_j = rne(x_j * 2^(14-E)) (exact in
// double, then rint); finite = no field is 255. Codes of a non-finite block are 0.
__device__ __forceinline__ void a16_block(const unsigned short* xb, int (&c)[16], int& E, bool& finite) {
    int fmax = 1;
    finite = true;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        int f = (xb[j] >> 7) & 0xff;
        finite = finite && (f != 255);
        fmax = f > fmax ? f : fmax;
    }
    E = fmax - 127;
    // 2^(14-E) with 14-E in [-113, 140]: exact in double.
    double sc = __longlong_as_double((long long)(1023 + 14 - E) << 52);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        double v = (double)bf16_to_f32(xb[j]) * sc;
        c[j] = finite ? (int)rint(v) : 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Helper-2 section (q2_0_gemv.cu, w8a8.cu, fp8_bf16_gemv.cu): IEEE fp32 steps that keep subnormals
// whatever the compile flags. CuPy appends '-ftz=true' to every NVRTC compile (after our
// '--ftz=false', so it wins): then a*b, a+b, a/b, (double)f and __double2float_rn flush
// subnormal inputs and results to zero. Inline PTX without .ftz is immune to the flag.
//   ieee_mul / ieee_add / ieee_div   fp32 mul.rn / add.rn / div.rn, subnormals kept
//   ieee_fma(a, b, c)                fp32 fma.rn: a * b + c rounded once, subnormals kept
//   ieee_d2f(d)                      cvt.rn.f32.f64 (one rounding, subnormal results kept)
//   a16_block_int(xb, c, E, finite)  A16 codes by exact integer arithmetic on the bf16 bits
//   a16_code_int(x, F)               one element's code of that rule
//   a16_codes8_f32(w, mx, c, E, fin) the same codes for half a block by exact f32 steps
//   warp_tree_ieee / chunk_roots_tree / store_chunk_roots<R, NC>  the GEMVs' trees and epilogue
//   ChainRuns(B, T)                  a generic chain kernel's run: parts, columns per round, part, column
//   chain_round_tree<R, T>(...)      the chain kernels' tree over parts at the end of a CTA round
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float ieee_mul(float a, float b) {
    float d;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}
__device__ __forceinline__ float ieee_add(float a, float b) {
    float d;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}
__device__ __forceinline__ float ieee_fma(float a, float b, float c) {
    float d;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}
__device__ __forceinline__ float ieee_div(float a, float b) {
    float d;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}
__device__ __forceinline__ float ieee_d2f(double a) {
    float d;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(d) : "d"(a));
    return d;
}

// The contract's tree over 32 leaves (leaf l in lane l: xor 1 adds adjacent pairs first), every
// add the non-FTZ ieee_add.
__device__ __forceinline__ float warp_tree_ieee(float t) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) t = ieee_add(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

// The tree over C <= 64 chunk roots sr[0 .. C) in K order, padded with -0.0 leaves: lane l adds
// the pair (2l, 2l + 1), then warp_tree_ieee. Every lane returns the root.
__device__ __forceinline__ float chunk_roots_tree(const float* sr, int C, int lane) {
    const float a = 2 * lane < C ? sr[2 * lane] : -0.0f;
    const float b = 2 * lane + 1 < C ? sr[2 * lane + 1] : -0.0f;
    return warp_tree_ieee(ieee_add(a, b));
}

// The epilogue of the warp GEMVs (fp8_bf16_gemv.cu, q2_0_gemv.cu): for each row r0 + r < m of
// the R-row tile and each column n = n0 + c < N, the tree over its C chunk roots
// sroot[(c R + r) 64 + ch] (chunk_roots_tree), times scale[n] where scale is given, to bf16 in
// out[row ldo + n] by lane 0.
template <int R, int NC>
__device__ __forceinline__ void store_chunk_roots(const float* sroot, int C, int lane, int r0, int m, int n0,
                                                  int N, const float* __restrict__ scale,
                                                  unsigned short* __restrict__ out, long long ldo) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int row = r0 + r;
        if (row >= m) continue;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const float* sr = sroot + (c * R + r) * 64;
            const float t = chunk_roots_tree(sr, C, lane);
            const int n = n0 + c;
            if (lane == 0 && n < N)
                out[(long long)row * ldo + n] = f32_to_bf16(scale ? ieee_mul(t, scale[n]) : t);
        }
    }
}

// A16 (arithmetic.md § a16) without floating point: with F = max(field, 1) and f_j = max(field_j, 1),
// |x_j| 2^(14-E) = m_j 2^(7 + f_j - F) (m_j the 8-bit significand), so c_j = m_j << (7 - d) for
// d = F - f_j <= 7, else m_j >> (d - 7) rounded to nearest even. Codes of a non-finite block: 0.
// a16_code_int(x, F): the code of one finite block's element x given F (its block's largest field, at
// least 1), by the rule above.
__device__ __forceinline__ int a16_code_int(unsigned short x, int F) {
    const int f = (x >> 7) & 0xFF;
    const int man = (int)(x & 0x7Fu) | (f ? 0x80 : 0);
    const int d = F - max(f, 1);
    int q;
    if (d <= 7) {
        q = man << (7 - d);
    } else if (d > 16) {
        q = 0;
    } else {
        const int sh = d - 7, half = 1 << (sh - 1), rem = man & ((1 << sh) - 1);
        q = man >> sh;
        if (rem > half || (rem == half && (q & 1))) q += 1;
    }
    return (x & 0x8000u) ? -q : q;
}
__device__ __forceinline__ void a16_block_int(const unsigned short* xb, int (&c)[16], int& E, bool& finite) {
    int F = 1, nf = 0;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int f = (xb[j] >> 7) & 0xFF;
        F = max(F, f);
        nf |= (f == 255);
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) c[j] = nf ? 0 : a16_code_int(xb[j], F);
    E = F - 127;
    finite = !nf;
}

// The codes of a16_block_int for half a block -- 8 bf16 values in 4 pair words (element 2i in
// the low half of w[i]) -- given mx, the largest |x| bits (x & 0x7FFF) of the whole block, by
// f32 steps (fewer instructions): with k = 14 - E split k1 = k >> 1, k2 = k - k1 (2^k1, 2^k2
// normal), v_j = (x_j 2^k1) 2^k2 is exact, or -- only when k < 0 and a product falls below
// 2^-126 -- below 1/2 either way; v_j + 1.5 * 2^23 (add.rn) rounds it to an integer, ties to
// even (|v_j| < 2^15), read back from the sum's low bits. mul.rn / add.rn never flush subnormals.
__device__ __forceinline__ unsigned int a16_mag_max4(const unsigned int (&w)[4]) {
    unsigned int mx = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) mx = max(mx, max(w[i] & 0x7FFFu, (w[i] >> 16) & 0x7FFFu));
    return mx;
}
__device__ __forceinline__ void a16_codes8_f32(const unsigned int (&w)[4], unsigned int mx, int (&c)[8], int& E,
                                               bool& finite) {
    const int F = max((int)(mx >> 7), 1);
    finite = mx < 0x7F80u;
    E = F - 127;
    const int k = 14 - E, k1 = k >> 1, k2 = k - k1;
    const float s1 = __int_as_float((127 + k1) << 23), s2 = __int_as_float((127 + k2) << 23);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const unsigned int bits = (j & 1) ? (w[j >> 1] & 0xFFFF0000u) : (w[j >> 1] << 16);
        const float v = ieee_mul(ieee_mul(__uint_as_float(bits), s1), s2);
        const float t = ieee_add(v, 12582912.0f);
        c[j] = finite ? __float_as_int(t) - 0x4B400000 : 0;
    }
}

// Programmatic dependent launch (metrale/cuda/pdl.py). pdl_trigger: the next launch in the stream
// may start (it waits for this grid's completion in its own pdl_wait). pdl_wait: the grids this
// launch depends on have completed and their writes are visible; a kernel launched without the
// PDL attribute returns at once. A kernel launched with it reads no global memory before
// pdl_wait but the layer's weights (no launch of an FFN writes them) and writes none.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ---- the activation tables (arithmetic.md § tables; the kernels' h = bf16(act[gate] * f32(up))) ----
// TableAct: the value at bf16 bits g from the whole table (65,536 f32) in global memory.
struct TableAct {
    const float* __restrict__ t;
    __device__ __forceinline__ float operator()(unsigned int g) const { return __ldg(t + g); }
};

// CompactAct: the same values from metrale/cuda/weights.py compact_table's form in shared memory
// (header lo | pos_hi << 8 | neg_hi << 16 and P, then the stored binades): x / 2 below exponent
// lo (subnormals kept), x for a positive exponent from pos_hi (Inf and NaN included), -0.0 for a
// negative one from neg_hi (NaN: x), else the stored entry; tests/test_act_table_compact.py
// replays this rule on every code. A warp's 32 reads cost its worst bank conflict, where the
// whole table's cost a wavefront per distinct cache line.
struct CompactAct {
    const float* t;
    unsigned int lo, pos_hi, neg_hi, p;
    __device__ __forceinline__ explicit CompactAct(const float* smem)
        : t(smem), lo(__float_as_uint(smem[0]) & 0xFFu), pos_hi((__float_as_uint(smem[0]) >> 8) & 0xFFu),
          neg_hi(__float_as_uint(smem[0]) >> 16), p(__float_as_uint(smem[1])) {}
    __device__ __forceinline__ float operator()(unsigned int g) const {
        const unsigned int e = (g >> 7) & 0xFFu;
        const float x = __uint_as_float(g << 16);
        if (e < lo) return ieee_mul(x, 0.5f);
        const bool neg = g >= 0x8000u;
        if (e >= (neg ? neg_hi : pos_hi)) return neg && (g & 0x7FFFu) <= 0x7F80u ? -0.0f : x;
        return t[4u + (neg ? p : 0u) + (((e - lo) << 7) | (g & 127u))];
    }
};

// h = bf16(act[gate] * f32(up)) of one element (gate, up: bf16 bits; arithmetic.md § act-mul; act:
// TableAct or CompactAct, the same values), and of 8 packed elements (one uint4 of gate and of up).
template <class Act>
__device__ __forceinline__ unsigned int act_mul1(unsigned int g, unsigned int u, const Act& act) {
    return f32_to_bf16(ieee_mul(act(g), bf16_to_f32((unsigned short)u)));
}
template <class Act>
__device__ __forceinline__ uint4 act_mul8(uint4 g, uint4 u, const Act& act) {
    const unsigned int gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
    unsigned int hw[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        hw[i] = act_mul1(gw[i] & 0xFFFFu, uw[i] & 0xFFFFu, act) | (act_mul1(gw[i] >> 16, uw[i] >> 16, act) << 16);
    return make_uint4(hw[0], hw[1], hw[2], hw[3]);
}

// Copies compact_table's `words` floats (a multiple of 4) into shared memory st by the CTA's
// threads (the caller syncs before reading).
__device__ __forceinline__ void load_compact_table(float4* st, const float* __restrict__ ctab, int words) {
    for (int i = threadIdx.x; 4 * i < words; i += blockDim.x) st[i] = __ldg(reinterpret_cast<const float4*>(ctab) + i);
}

// A PDL-capable kernel's start with the compact table in its dynamic shared memory st: trigger,
// the table copied before the wait (it is the uploader's, no earlier kernel's output), wait, sync.
__device__ __forceinline__ CompactAct compact_act_start(float4* st, const float* __restrict__ ctab, int words) {
    pdl_trigger();
    load_compact_table(st, ctab, words);
    pdl_wait();
    __syncthreads();
    return CompactAct(reinterpret_cast<const float*>(st));
}

// The first work unit of CTA c of G over U units (stream-K: CTA c takes [tk_start(c), tk_start(c + 1))).
__device__ __forceinline__ int tk_start(int c, int G, int U) { return (int)(((long long)c * U) / G); }

// 16 bytes read once (weights): no L1 allocation, so L1 keeps what is reused (activations).
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// @defines CHAIN_GENERIC (CHAIN_GENERIC_THREADS, the Q2_0 / FP8 / BF16 generic chain kernels' CTA, from metrale/cuda/configs.py)

// A generic chain kernel's runs (docs/chain-revision.md; nvfp4.cuh nvfp4_chain_body, q2_0_gemv.cu,
// fp8_bf16_gemv.cu): B blocks in Q = ceil(B / 64) parts per column (the last holding B - 64 (Q -
// 1)), a CTA round of T threads the runs of C = T / Q whole columns, part-major: this thread's
// part t / C of column t % C of the round, and the blocks of its run (0 for threads from C Q on,
// idle as part Q - 1).
struct ChainRuns {
    int Q, C, part, col, blocks;
    __device__ __forceinline__ ChainRuns(int B, int T) {
        const int t = threadIdx.x;
        Q = (B + 63) >> 6;
        C = T / Q;
        part = min(t / C, Q - 1);
        col = t % C;
        blocks = t < C * Q ? min(64, B - 64 * part) : 0;
    }
    __device__ __forceinline__ int rounds(int N) const { return (N + C - 1) / C; }
};

// The chain kernels' tree over parts (docs/chain-revision.md) at the end of a CTA round of T
// threads whose thread t holds part t / C of column t % C (the run kernels: nvfp4.cuh,
// q2_0_gemv.cu, fp8_bf16_gemv.cu): each thread's R part roots c into roots [R][T], a barrier,
// then thread j < C sums column j's Q roots in place by the padded tree over parts (stride h =
// 1, 2, 4, ..: part p += part p + h where p is a multiple of 2h and p + h < Q; a missing partner
// is the -0.0 leaf, x + -0.0 = x) and calls store(r, root) for each row r; a second barrier
// frees the roots for the next round.
template <int R, int T, class Store>
__device__ __forceinline__ void chain_round_tree(float* roots, const float (&c)[R], int Q, int C, Store store) {
    const int t = threadIdx.x;
#pragma unroll
    for (int r = 0; r < R; ++r) roots[r * T + t] = c[r];
    __syncthreads();
    if (t < C) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float* const v = roots + r * T + t;  // part p at v[p C]
            for (int h = 1; h < Q; h <<= 1)
                for (int p = 0; p + h < Q; p += 2 * h) v[p * C] = ieee_add(v[p * C], v[(p + h) * C]);
            store(r, v[0]);
        }
    }
    __syncthreads();
}

// The generic Q2_0 / FP8 / BF16 chain kernels' rounds (q2_0_gemv.cu, fp8_bf16_gemv.cu): row groups
// of R rows over grid.y, CTA rounds over grid.x; run(row0, n, c) chains this thread's run of
// column n (n >= N: a dead run) into c[R] from -0.0, chain_round_tree sums each column's parts
// and store(row, col, root) writes the live outputs (row < m, col < N). The kernel's launch
// prologue too: the parts' roots in static shared memory, pdl_trigger, pdl_wait (the callers read
// no global memory before).
template <int R, int T, class Run, class Store>
__device__ __forceinline__ void chain_generic_rounds(const ChainRuns& runs, int m, int N, Run run, Store store) {
    __shared__ float roots[R * T];
    pdl_trigger();
    pdl_wait();
    const int ngroups = (m + R - 1) / R, rounds = runs.rounds(N);
    for (int g = blockIdx.y; g < ngroups; g += gridDim.y) {
        const int row0 = g * R;
        for (int it = blockIdx.x; it < rounds; it += gridDim.x) {
            float c[R];
#pragma unroll
            for (int r = 0; r < R; ++r) c[r] = -0.0f;
            run(row0, it * runs.C + runs.col, c);
            const int nj = it * runs.C + (int)threadIdx.x;
            chain_round_tree<R, T>(roots, c, runs.Q, runs.C, [&](int r, float root) {
                if (nj < N && row0 + r < m) store(row0 + r, nj, root);
            });
        }
    }
}
