// nvfp4_gemv.cu -- NVFP4 weights x A16 activations (arithmetic.md § a16, § projection; body in nvfp4.cuh).
//
// Kernels (extern "C"), all with the same arguments:
//   nvfp4_a16_r{1,2,3,4}_{e,o}(x, ldx, m, w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1, N, K)
//     R = 1..4 rows per pass; _e: B = K/16 even (16-byte weight loads), _o: B odd (8-byte).
//   Launch: block 256 threads (8 warps, one output column each), grid (gx, gy, gz):
//     gx persistent CTAs over the N columns, gy over groups of R rows (m rows in all),
//     gz = 1 (weight set 0) or 2 (blockIdx.z = 1 takes set 1: gate and up in one launch).
//     Dynamic shared memory R * 72 * P bytes, P = 32 * ceil(B / 64).
//   The launchers (metrale/cuda/nvfp4.py) map w4a16_gemv (R=1), w4a16_gemv_batch2/3 and the
//   dual_batch2/3 (R=2/3, gz=2), w4a16_gemv_batch4..32 and w4a16_gemm (R=4, gy groups).
#include "nvfp4.cuh"

#define NVFP4_A16(R, EV, SUFFIX)                                                                       \
    extern "C" __global__ void __launch_bounds__(NVFP4_THREADS) nvfp4_a16_r##R##_##SUFFIX(            \
        const unsigned short* x, long long ldx, int m, const unsigned char* w0, const unsigned char* s0, \
        float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, const unsigned char* s1, \
        float rs1, unsigned short* out1, long long ldo1, int N, int K) {                               \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);             \
        nvfp4_body<0, R, EV>(x, ldx, nullptr, m, set, N, K);                                           \
    }

// @instances NVFP4_A16   (lines generated from metrale/cuda/configs.py)

// nvfp4_a16c_r{1,2,3,4}(same arguments): the generic kernels on the block-value chain
// (docs/chain-revision.md; nvfp4.cuh nvfp4_chain_body, chain.project_chain's bits; tile.CHAIN
// routes them where no fast kernel applies): any B with Q = ceil(B / 64) <= NVFP4_THREADS,
// PDL-capable; block NVFP4_THREADS, grid (gx rounds of NVFP4_THREADS / Q columns, gy row groups,
// gz sets); dynamic shared memory R * 36 * 64 Q + R * NVFP4_THREADS * 4 bytes.
#define NVFP4_A16C(R)                                                                                  \
    extern "C" __global__ void __launch_bounds__(NVFP4_THREADS) nvfp4_a16c_r##R(                      \
        const unsigned short* x, long long ldx, int m, const unsigned char* w0, const unsigned char* s0, \
        float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, const unsigned char* s1, \
        float rs1, unsigned short* out1, long long ldo1, int N, int K) {                               \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);             \
        nvfp4_chain_body<0, R>(x, ldx, nullptr, m, set, N, K);                                         \
    }

// @instances NVFP4_A16C

// Fast path (nvfp4.cuh nvfp4_fast_body), for B % 64 == 0:
//   nvfp4_a16f_r{1,2,3,4}(same arguments as above), PDL-capable (metrale/cuda/pdl.py); block
//   FAST_THREADS = 512 threads (16 warps, one column at a time each), one CTA per SM along
//   grid.x, dynamic shared memory R * 72 * P + 16 * D * 2304 bytes, P = 128 * ceil(B / 256): the activation records, then
//   each warp's ring of D work-item slots (D = 3 for R = 1, 4 for R = 2, 3 for R = 3, 4), D - 1 items in
//   flight per warp (cp.async); R <= 2 use the P/Q block dot (nvfp4.cuh block_dot_pq).
// nvfp4_a16fc_r{1,2,3,4}: the same arguments on the block-value chain (docs/chain-revision.md;
// nvfp4.cuh nvfp4_run_body, chain.project_chain's bits; tile.CHAIN routes them), B % 64 == 0 and
// Q = B / 64 <= RUN_THREADS: CTAs of RUN_THREADS threads, grid.x at most one per SM and one per
// round of RUN_THREADS / Q columns, dynamic shared memory R * 36 * B + W * D * 2304 + W * NBUF *
// 32 * 8 * RUN_SCALE_SLICES (when > 1) + R * RUN_THREADS * 4 bytes (W = RUN_THREADS / 32 warps,
// D = configs.NVFP4_RUN_DEPTH[R]; metrale/cuda/nvfp4.py _fast_smem); no P/Q block dot.
#define NVFP4_A16F(R, D, PQ, C, SUFFIX)                                                               \
    extern "C" __global__ void __launch_bounds__(C ? RUN_THREADS : FAST_THREADS, C ? RUN_CTAS : 1) nvfp4_a16##SUFFIX##_r##R(              \
        const unsigned short* x, long long ldx, int m, const unsigned char* w0, const unsigned char* s0, \
        float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, const unsigned char* s1, \
        float rs1, unsigned short* out1, long long ldo1, int N, int K) {                               \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);             \
        if constexpr (C) nvfp4_run_body<0, R, D, PQ>(x, ldx, nullptr, m, set, N, K);                   \
        else nvfp4_fast_body<0, R, D, PQ>(x, ldx, nullptr, m, set, N, K);                              \
    }

// @instances NVFP4_A16F   (lines generated from metrale/cuda/configs.py)

// nvfp4_a16f8_r{R}: the fast kernels' shape on the chain with 8-block parts (nvfp4.cuh
// nvfp4_fast_body CH8; chain.project_chain with chain.PART_BLOCKS = 8): a probe of that part
// size (docs/chain-revision.md, "The part size"), not routed; configs.NVFP4_CH8_ROWS.
#define NVFP4_A16F8(R, D, PQ)                                                                          \
    extern "C" __global__ void __launch_bounds__(FAST_THREADS, 1) nvfp4_a16f8_r##R(                    \
        const unsigned short* x, long long ldx, int m, const unsigned char* w0, const unsigned char* s0, \
        float rs0, unsigned short* out0, long long ldo0, const unsigned char* w1, const unsigned char* s1, \
        float rs1, unsigned short* out1, long long ldo1, int N, int K) {                               \
        const WeightSet set = weight_set(w0, s0, rs0, out0, ldo0, w1, s1, rs1, out1, ldo1);             \
        nvfp4_fast_body<0, R, D, PQ, true>(x, ldx, nullptr, m, set, N, K);                             \
    }

// @instances NVFP4_A16F8
