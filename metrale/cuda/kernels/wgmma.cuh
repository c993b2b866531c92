// wgmma.cuh -- what the Hopper warpgroup-MMA kernels share (w8a8_wgmma.cu, nvfp4_wgmma.cu; both
// sm_90a): the shared-memory matrix descriptor of their 128-byte-swizzled K-major operands.
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
