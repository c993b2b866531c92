// metrale/cuda/kernels/w8a8_wgmma.cu -- the W8A8 prefill GEMM on Hopper's warpgroup tensor cores.
// @arch sm_90a
//
// Contract: arithmetic.md § projection (W8A8: S = sum_k q_w q_a over all of K in int32, exact since
// |S| < 2^31; y = bf16((f32(S) * s_a) * s_w[n]), no blocks, no tree), § w8a8-arm. The same bits
// as w8a8.cu's w8a8_gemm_* and GEMV tiers: an int32 sum is exact in any order.
//
// Kernels (every pointer to bf16 is uint16 bits; strides in elements; rows of q and w 16-byte
// aligned, K a multiple of 16):
//   w8a8_wgmma_{BM}x{BN}(w, sw, N, K, q, ldq, sa, m, out, ldo)
//       grid (ceil(m / BM), ceil(N / BN)), block 128 BM / 64 (one warpgroup per 64 activation
//       rows), dynamic shared memory STAGES (BM + BN) 128 bytes + 1024 (alignment).
//       K in 128-byte tiles: every thread copies its share of a tile's BM activation rows and
//       BN weight rows into one of STAGES shared-memory slots by cp.async (zero-filled past m, N
//       and K), in the 128-byte-swizzled K-major layout wgmma reads (16-byte chunk c of row r at
//       chunk c ^ (r mod 8); 8-row groups 1024 bytes apart). Warpgroup g issues, per tile, four
//       wgmma.mma_async m64n{BN}k32 s32.s8.s8 (A: its 64 activation rows, B: the BN weight rows,
//       both from shared memory) into int32 accumulators it keeps over all of K, one wgmma group
//       in flight while the next tile is copied (slot reuse: a slot is refilled only after every
//       warpgroup's wgmma on it completed, ensured by the barrier that follows wait_group 1).
//       Epilogue: y = bf16((f32(S) * s_a[r]) * s_w[n]) from the accumulators (fragment: warp w of
//       the group holds rows 16 w + gid and + 8, columns 8 j + 2 t and + 1 of each 8-column run j).
//       Consecutive CTAs (blockIdx.x) share one weight tile (read once from DRAM, then L2).
//
// Build: sm_90a only (wgmma); the launcher falls back to w8a8.cu's mma.sync GEMM elsewhere.
// fp32 steps are common.cuh's inline-PTX ieee_mul (subnormals kept whatever -ftz).

#include "common.cuh"

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ u64 wg_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

__device__ __forceinline__ void wg_cp16(u32 dst, const void* src, int nbytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(nbytes));
}

// D[64 x 256] s32 += A[64 x 32] s8 (smem, K-major) * B[256 x 32] s8 (smem, K-major).
__device__ __forceinline__ void wgmma_n256(int (&d)[128], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
          "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
          "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]),
          "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]),
          "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
          "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
          "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
          "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]),
          "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
        : "l"(da), "l"(db));
}

// D[64 x 128] s32 += A[64 x 32] s8 (smem, K-major) * B[128 x 32] s8 (smem, K-major).
__device__ __forceinline__ void wgmma_n128(int (&d)[64], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(da), "l"(db));
}


template <int N_>
__device__ __forceinline__ void wgmma_tile(int (&d)[N_ / 2], u64 da, u64 db);
template <>
__device__ __forceinline__ void wgmma_tile<256>(int (&d)[128], u64 da, u64 db) { wgmma_n256(d, da, db); }
template <>
__device__ __forceinline__ void wgmma_tile<128>(int (&d)[64], u64 da, u64 db) { wgmma_n128(d, da, db); }

template <int BM, int BN, int STAGES>
__device__ __forceinline__ void w8_wgmma_gemm(const signed char* __restrict__ w, const float* __restrict__ sw,
                                              int N, int K, const signed char* __restrict__ q, long long ldq,
                                              const float* __restrict__ sa, int m, u16* __restrict__ out,
                                              long long ldo) {
    constexpr int NTH = 2 * BM, STAGE = (BM + BN) * 128, CHUNKS = (BM + BN) * 8;
    extern __shared__ unsigned char wg_smem[];
    const u32 sbase = ((u32)__cvta_generic_to_shared(wg_smem) + 1023u) & ~1023u;
    const int tid = threadIdx.x, grp = tid >> 7;
    const int r0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int ktiles = (K + 127) >> 7;

    // Tile kt into slot: BM activation rows, then BN weight rows, of eight 16-byte chunks each.
    auto load = [&](int slot, int kt) {
        const u32 st = sbase + slot * STAGE;
#pragma unroll
        for (int c = tid; c < CHUNKS; c += NTH) {
            const int row = c >> 3, ch = c & 7, k = kt * 128 + ch * 16;
            const signed char* src;
            bool ok;
            if (row < BM) {
                ok = r0 + row < m && k < K;
                src = q + (long long)min(r0 + row, m - 1) * ldq + (ok ? k : 0);
            } else {
                ok = n0 + row - BM < N && k < K;
                src = w + (long long)min(n0 + row - BM, N - 1) * K + (ok ? k : 0);
            }
            wg_cp16(st + row * 128 + ((ch ^ (row & 7)) << 4), src, ok ? 16 : 0);
        }
    };

    int acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0;

    // Copies run STAGES - 2 tiles ahead: at step kt the slot of tile kt - 2 is refilled, whose
    // wgmma every warpgroup has waited for before the barrier of step kt.
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < ktiles) load(s, s);
        asm volatile("cp.async.commit_group;");
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 3));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (kt + STAGES - 2 < ktiles) load((kt + STAGES - 2) % STAGES, kt + STAGES - 2);
        asm volatile("cp.async.commit_group;");
        const u32 a = sbase + (kt % STAGES) * STAGE + grp * 64 * 128, b = sbase + (kt % STAGES) * STAGE + BM * 128;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int k = 0; k < 4; ++k) wgmma_tile<BN>(acc, wg_desc(a + 32 * k), wg_desc(b + 32 * k));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    asm volatile("cp.async.wait_group 0;");

    const int warp = (tid >> 5) & 3, lane = tid & 31, gid = lane >> 2, t = lane & 3;
    const bool pairs = ((ldo & 1) == 0) && ((reinterpret_cast<unsigned long long>(out) & 3) == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = r0 + grp * 64 + warp * 16 + gid + 8 * h;
        if (r >= m) continue;
        const float s_a = sa[r];
        u16* orow = out + (long long)r * ldo;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int n = n0 + 8 * j + 2 * t;
            const u32 y0 = n < N ? f32_to_bf16(ieee_mul(ieee_mul(__int2float_rn(acc[4 * j + 2 * h]), s_a), sw[n])) : 0u;
            const u32 y1 =
                n + 1 < N ? f32_to_bf16(ieee_mul(ieee_mul(__int2float_rn(acc[4 * j + 2 * h + 1]), s_a), sw[n + 1])) : 0u;
            if (pairs && n + 1 < N) {
                *reinterpret_cast<u32*>(orow + n) = y0 | (y1 << 16);
            } else {
                if (n < N) orow[n] = (u16)y0;
                if (n + 1 < N) orow[n + 1] = (u16)y1;
            }
        }
    }
}

// w8a8_wgmma_{BM}x{BN}: grid (ceil(m / BM), ceil(N / BN)), block 2 BM, dynamic shared memory
// STAGES (BM + BN) 128 + 1024 bytes.
#define W8A8_WGMMA(BM, BN, STAGES)                                                                   \
    extern "C" __global__ void __launch_bounds__(2 * BM, 1) w8a8_wgmma_##BM##x##BN(                   \
        const signed char* __restrict__ w, const float* __restrict__ sw, int N, int K,              \
        const signed char* __restrict__ q, long long ldq, const float* __restrict__ sa, int m,      \
        u16* __restrict__ out, long long ldo) {                                                     \
        w8_wgmma_gemm<BM, BN, STAGES>(w, sw, N, K, q, ldq, sa, m, out, ldo);                        \
    }

// @instances W8A8_WGMMA   (lines generated from metrale/cuda/configs.py)
