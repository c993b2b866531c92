// wgmma.cuh -- what the Hopper warpgroup-MMA kernels share (w8a8_wgmma.cu, nvfp4_wgmma.cu; both
// sm_90a): the shared-memory matrix descriptor of their 128-byte-swizzled K-major operands, the
// TMA box copy of a 2-D tensor map into that layout and the mbarriers it completes on.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;

// v (equal in every lane) as ptxas can see it is: a broadcast from lane 0 lets it keep what is
// formed from v in uniform registers, so a wgmma descriptor built from it needs no R2UR per MMA
// (the stage buffer's index, which a loop counter in a vector register would otherwise carry).
__device__ __forceinline__ int warp_uniform(int v) {
    return __shfl_sync(0xffffffffu, v, 0);
}

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart; the
// start address field counts 16 bytes (a descriptor plus (bytes >> 4) addresses bytes further
// inside the same 1024-byte-aligned swizzle atom column).
__device__ __forceinline__ u64 wg_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

// ---- TMA, mbarriers and named barriers (w8a8_wgmma.cu's stream-K GEMM, nvfp4_wgmma.cu's w4s / w4p) ----

// The 128-byte CUtensorMap the host encodes (metrale/cuda/tma.py), passed by value.
struct __align__(64) TmaDesc {
    u64 v[16];
};

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 ok = 0;
    while (!ok)
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(ok)
            : "r"(bar), "r"(parity)
            : "memory");
}
// Box (x = byte x0 of the row, y = row y0) of the 2-D int8 tensor map into shared memory at dst,
// completing bytes on the mbarrier bar (rows and bytes past the tensor are zero-filled).
__device__ __forceinline__ void tma_box(u32 dst, const TmaDesc& tm, int x0, int y0, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            dst),
        "l"(reinterpret_cast<u64>(&tm)), "r"(x0), "r"(y0), "r"(bar)
        : "memory");
}

// Named barrier id (1..15) over n threads (a multiple of 32): wait for it, or arrive and go on.
__device__ __forceinline__ void named_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
