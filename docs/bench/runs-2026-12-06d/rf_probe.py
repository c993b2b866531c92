"""Probe: does a wgmma in flight slow the FFMAs beside it? The chain tile's loop (NF = 16) in
isolation, one CTA of two warpgroups per SM: per block each warpgroup issues one
wgmma.mma_async m64n128k16 (bf16, D overwritten, A in registers or in shared memory) into one of
two accumulator sets and then runs the 64 FFMAs of the other set into 64 chains (c = fma(d, s, c)),
in stages of 8 blocks, as w4c_body does without the decode, copies, barrier and counter. Modes:
ffma (no wgmma), mma (no FFMA), rs (both, A in registers: the kernels' form), ss (both, A in
shared memory). Prints cycles per block (clock64 of the CTA) and FFMA lane-operations per SM
cycle; the loop's
issue floor is 64 + 4 instructions per warp per block at one instruction per cycle and
scheduler, two warps per scheduler: about 136 cycles (the FFMAs alone: 128).

    python docs/bench/runs-2026-12-06d/rf_probe.py
"""

import json
import os

import cupy as cp
import numpy as np

from metrale.cuda import runtime

#: The wgmma m64n128k16 helpers (A in registers or in shared memory), also ws_probe.py's.
PRELUDE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
#define R8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
    "+f"(d[i + 6]), "+f"(d[i + 7])
#define ACC R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56)
#define DREGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
__device__ __forceinline__ u64 desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ void mma_rs(float (&d)[64], const u32 (&a)[4], u64 db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DREGS
                 "{%64, %65, %66, %67}, %68, 0, 1, 1, 0;"
                 : ACC : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void mma_ss(float (&d)[64], u64 da, u64 db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DREGS
                 "%64, %65, 0, 1, 1, 0, 0;"
                 : ACC : "l"(da), "l"(db));
}
template <int N>
__device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
"""

SRC = (
    PRELUDE
    + r"""
// MODE: 0 FFMA only, 1 wgmma only, 2 both (A in registers), 3 both (A in shared memory)
template <int MODE>
__device__ __forceinline__ void body(float* out, long long* cyc, int iters, float s) {
    // B: 128 rows x 128 bytes; A (ss): 64 rows x 128 bytes per warpgroup
    __shared__ __align__(1024) unsigned char sm[32768];
    for (int i = threadIdx.x; i < 32768 / 4; i += blockDim.x) ((u32*)sm)[i] = 0x3F803F80u * (i & 1);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const u32 sb = (u32)__cvta_generic_to_shared(sm);
    const u64 db = desc(sb), da = desc(sb + 16384 + 8192 * (threadIdx.x >> 7 & 1));
    float c[64], d[2][64];
#pragma unroll
    for (int i = 0; i < 64; ++i) c[i] = -0.0f, d[0][i] = d[1][i] = (float)(threadIdx.x + i);
    const u32 a[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
    auto issue = [&](float (&dd)[64], int b) {
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        if (MODE == 3) mma_ss(dd, da + 2 * (b & 3), db + 2 * (b & 3));
        else mma_rs(dd, a, db + 2 * (b & 3));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    };
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {  // a stage of 8 blocks, as w4c_body's
        if (MODE != 0) issue(d[0], 0);
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            if (MODE != 0) {
                if (b < 7) {
                    issue(d[(b + 1) & 1], b + 1);
                    wait<1>();
                } else {
                    wait<0>();
                }
            }
            if (MODE != 1) {
#pragma unroll
                for (int i = 0; i < 64; ++i) c[i] = __fmaf_rn(d[b & 1][i], s, c[i]);
            }
        }
    }
    const long long t1 = clock64();
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc += c[i] + d[0][i] + d[1][i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}
extern "C" __global__ void __launch_bounds__(256, 1) k_ffma(float* o, long long* c, int n, float s) {
    body<0>(o, c, n, s);
}
extern "C" __global__ void __launch_bounds__(256, 1) k_mma(float* o, long long* c, int n, float s) {
    body<1>(o, c, n, s);
}
extern "C" __global__ void __launch_bounds__(256, 1) k_rs(float* o, long long* c, int n, float s) {
    body<2>(o, c, n, s);
}
extern "C" __global__ void __launch_bounds__(256, 1) k_ss(float* o, long long* c, int n, float s) {
    body<3>(o, c, n, s);
}
"""
)

MODES = ("ffma", "mma", "rs", "ss")


def median_cycles(kern: cp.RawKernel, threads: int, args: tuple, cyc: cp.ndarray, smem: int = 0) -> float:
    """The median over the CTAs (one per SM) of the clock64 cycles the kernel wrote to ``cyc``, of
    the second of two launches (the first warms the clocks)."""
    if smem:
        kern.max_dynamic_shared_size_bytes = smem
    for _ in range(2):
        kern((cyc.size,), (threads,), args, shared_mem=smem)
    cp.cuda.Device().synchronize()
    return float(np.median(cyc.get()))


def main() -> None:
    mod = cp.RawModule(path=str(runtime.compile_text("rf_probe.cu", SRC, "sm_90a")))
    sms = runtime.sm_count()
    iters = 1000
    out = cp.zeros(sms * 256, cp.float32)
    cyc = cp.zeros(sms, cp.int64)
    res = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "iters": iters, "modes": {}}
    for mode in MODES:
        args = (out, cyc, np.int32(iters), np.float32(0.5))
        # cycles per block (one wgmma + 64 FFMA per warpgroup)
        per_it = median_cycles(mod.get_function(f"k_{mode}"), 256, args, cyc) / (8 * iters)
        ffma_lanes = 0 if mode == "mma" else 256 * 64 / per_it  # FFMA lane-operations per SM cycle
        res["modes"][mode] = {
            "cycles_per_step": round(per_it, 1),
            "ffma_lanes_per_cycle": round(ffma_lanes, 1),
        }
        print(mode, res["modes"][mode], flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "rf_probe.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
