// ---- probe only (not the contract): block values chained by fma ----
template <>
__device__ __forceinline__ void w4w_mma<16>(float (&d)[64], const u32 (&a)[4], u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, 0, 1, 1, 0;"
        : W4W_R8(0), W4W_R8(8), W4W_R8(16), W4W_R8(24), W4W_R8(32), W4W_R8(40), W4W_R8(48), W4W_R8(56)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ float pfma(float a, float b, float c) {
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
}
// STEP = 0: one fma chain over the whole part; 1: a chain per 8-block step, step roots added.
template <int NF, int STEP, class F>
__device__ __forceinline__ void w4c_gemm(const unsigned char* __restrict__ xh, int m, const WeightSet& set, int N,
                                         int B, int gz, int kp8, float* __restrict__ partial) {
    extern __shared__ __align__(16) unsigned char w4c_smem_raw[];
    unsigned char* smem = w4c_smem_raw + ((1024u - ((u32)__cvta_generic_to_shared(w4c_smem_raw) & 1023u)) & 1023u);
    const int row0 = blockIdx.x * 8 * NF, n0 = blockIdx.y * W4B_COLS;
    const int part_i = blockIdx.z / gz, zs = blockIdx.z % gz;
    const int S8 = B >> 3, s_begin = part_i * kp8, Sl = min(S8 - s_begin, kp8);
    constexpr int ACT = 8 * NF * 256;
    constexpr int STAGE = (ACT + W4B_COLS * F::WROW + W4B_COLS * F::SB + 1023) & ~1023;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = B * 16;
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    const u32 rm = (6u - 4u * t) & 31u, rs = (12u - 4u * t) & 31u, sh = 2u * t;
    const int wc0 = 16 * warp + g;
    float acc[4 * NF], sum[STEP ? 4 * NF : 1];
#pragma unroll
    for (int i = 0; i < 4 * NF; ++i) acc[i] = -0.0f;
    if (STEP)
#pragma unroll
        for (int i = 0; i < (STEP ? 4 * NF : 1); ++i) sum[i] = -0.0f;
#pragma unroll
    for (int i = 0; i < W4B_STAGES - 1; ++i) {
        if (i < Sl) tile_load<NF, F, true>(smem + i * STAGE, xh, row0, K, set, n0, N, B, s_begin + i);
        cp_async_commit();
    }
    for (int ls = 0; ls < Sl; ++ls) {
        cp_async_wait<W4B_STAGES - 2>();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (ls + W4B_STAGES - 1 < Sl)
            tile_load<NF, F, true>(smem + ((ls + W4B_STAGES - 1) % W4B_STAGES) * STAGE, xh, row0, K, set, n0, N, B,
                                   s_begin + ls + W4B_STAGES - 1);
        cp_async_commit();
        const int buf = ls % W4B_STAGES;
        const unsigned char* sp = smem + buf * STAGE;
        const u64 dact = wg_desc(sbase + buf * STAGE);
        const unsigned char* wp = sp + ACT + wc0 * F::WROW;
        const unsigned char* sc = sp + ACT + W4B_COLS * F::WROW;
        u32 a[2][2][4];
        float ws[2][2][2];
        float d[2][4 * NF];
        tile_pair_operands<F>(a[0], ws[0], 0, wp, sc, wc0, rm, rs, sh);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        w4w_mma<NF>(d[0], a[0][0], dact);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            if (b < 7) {
                const int nb = b + 1, p = nb >> 1;
                if ((nb & 1) == 0) tile_pair_operands<F>(a[p & 1], ws[p & 1], p, wp, sc, wc0, rm, rs, sh);
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
                w4w_mma<NF>(d[nb & 1], a[p & 1][nb & 1], w4w_block_desc<NF>(dact, nb));
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                w4w_wait<1>();
            } else {
                w4w_wait<0>();
            }
            const int p = b >> 1;
#pragma unroll
            for (int i = 0; i < 4 * NF; ++i) acc[i] = pfma(d[b & 1][i], ws[p & 1][b & 1][(i >> 1) & 1], acc[i]);
        }
        if (STEP)
#pragma unroll
            for (int i = 0; i < (STEP ? 4 * NF : 1); ++i) {
                sum[i] = ieee_add(sum[i], acc[i]);
                acc[i] = -0.0f;
            }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < 4 * NF; ++i) {
        const int nf = i >> 2, j = i & 3;
        const float v = STEP ? sum[i] : acc[i];
        const int col = n0 + wc0 + 8 * (j >> 1), row = row0 + 8 * nf + 2 * t + (j & 1);
        if (col >= N || row >= m) continue;
        if (partial == nullptr)
            set.out[(size_t)row * set.ldo + col] = f32_to_bf16(ieee_mul(v, set.rowscale));
        else
            partial[(((size_t)part_i * gz + zs) * m + row) * N + col] = v;
    }
}
#define CHAIN_KERNEL(NAME, F, NF, STEP)                                                                   \
    extern "C" __global__ void __launch_bounds__(W4B_THREADS, 1) NAME(                                     \
        const unsigned char* __restrict__ xh, const float* __restrict__ fac,                               \
        const unsigned char* __restrict__ slow, int m, const unsigned char* w0, const unsigned char* s0,   \
        float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, const unsigned char* s1, \
        float rs1, unsigned short* out1, long long ldo1, int N, int B, int gz, int kp8, int dlog,          \
        float* __restrict__ partial) {                                                                     \
        const WeightSet set = weight_set_at(blockIdx.z % gz, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1); \
        w4c_gemm<NF, STEP, F>(xh, m, set, N, B, gz, kp8, partial);                                         \
    }
CHAIN_KERNEL(w4c_part_f8, TileNvfp4, 8, 0)
CHAIN_KERNEL(w4c_part_f16, TileNvfp4, 16, 0)
CHAIN_KERNEL(w4c_step_f8, TileNvfp4, 8, 1)
