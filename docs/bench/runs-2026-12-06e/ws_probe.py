"""Probe: a warp-specialised chain tile against the present one, without global memory. The
NVFP4 chain tile's loop (NF = 16) in isolation, one CTA per SM, per 8-block stage:

* ``rs`` (the present kernels' form): two warpgroups, each decodes its own 64 weight rows'
  nibbles into wgmma's register A fragment (w4b_pair, e4m3 scales to f32), issues one
  m64n128k16 wgmma per block into one of two accumulator sets and runs the 64 FFMAs of the other.
* ``ws``: a producer warpgroup (40 registers, setmaxnreg) decodes 64 weight rows once per stage
  into shared memory (wgmma's 128-byte-swizzled K-major A layout, one 16-byte store per thread
  and block) and the scales to f32; two consumer warpgroups (232 registers) take that A from
  shared memory against their own 128 activation rows (A shared: half the decode per block
  value), synchronised by named barriers over a two-slot ring (full / empty).
* ``ws2``: as ``ws`` with a 64-row A per consumer (the producer decodes both: no sharing).
* ``coop``: no producer: the two warpgroups share one A (64 weight rows, their own 128
  activation rows each) and decode the next stage's A between this stage's blocks (four 16-byte
  chunks per thread and stage), published by the stage barrier.

Prints cycles per stage and block values per SM cycle (the FFMA pipe's peak is 128).

    python docs/bench/runs-2026-12-06e/ws_probe.py
"""

import importlib.util
import json
import os
from pathlib import Path

import cupy as cp
import numpy as np

from metrale.cuda import runtime

_spec = importlib.util.spec_from_file_location(
    "rf_probe", Path(__file__).resolve().parent.parent / "runs-2026-12-06d" / "rf_probe.py"
)
assert _spec is not None and _spec.loader is not None
RF = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(RF)  # rf_probe.PRELUDE (the wgmma helpers) and median_cycles

SRC = (
    RF.PRELUDE
    + r"""
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

// nibbles (t, t + 4) of W as a bf16 pair (tile.cuh's w4b_pair)
__device__ __forceinline__ u32 pair(u32 W, u32 rm, u32 rs) {
    const u32 mag = __funnelshift_l(W, W, rm) & 0x01C001C0u;
    u32 v;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(mag), "r"(0x7F007F00u), "r"(0x80008000u));
    return v ^ (__funnelshift_l(W, W, rs) & 0x80008000u);
}
__device__ __forceinline__ void e4m3x2(u32 v, float& lo, float& hi) {
    u32 h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)v));
    asm("{.reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}"
        : "=f"(lo), "=f"(hi) : "r"(h2));
}

constexpr int BROWS = 128 * 256;   // one consumer's activations: 128 rows x 8 blocks x 32 bytes
constexpr int AW = 64 * 256;       // one 64-row decoded A stage
constexpr int RAW = 64 * 64;       // one 64-row raw stage: 8 blocks x 8 bytes
constexpr int SCF = 8 * 64 * 4;    // f32 scales of one 64-row stage
// smem: B[2] | A ring [2 slots][2 A] | raw [2 slots][2] | raw scales [2 slots][2] | f32 scales [2 slots][2]
constexpr int OFF_A = 2 * BROWS, OFF_RAW = OFF_A + 4 * AW, OFF_RSC = OFF_RAW + 4 * RAW,
              OFF_SCF = OFF_RSC + 4 * 512, SMEM = OFF_SCF + 4 * SCF;

__device__ __forceinline__ u64 bdesc(u64 d0, int rows, int b) {
    return d0 + (u64)(((b >> 2) * (rows * 128) + (b & 3) * 32) >> 4);
}

// the 16-byte chunk of elements 8 h .. 8 h + 7 of block b of weight row r: a word of 8 nibbles
// from the row's raw bytes into 4 bf16 pairs, stored at its swizzled place in the A at abase
__device__ __forceinline__ void decode_chunk(const unsigned char* row_raw, u32 abase, int r, int h, int b) {
    const u32 W = *(const u32*)(row_raw + 8 * b + 4 * h);
    const u32 v0 = pair(W, 6u, 12u), v1 = pair(W >> 4, 6u, 12u), v2 = pair(W >> 8, 6u, 12u),
              v3 = pair(W >> 12, 6u, 12u);
    const u32 addr = abase + (b >> 2) * (64 * 128) + r * 128 + ((((b & 3) * 2 + h) ^ (r & 7)) << 4);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v0), "r"(v1), "r"(v2), "r"(v3)
                 : "memory");
}

// one stage of 8 blocks on A and B in shared memory (da, db), the chains' FFMAs with this lane's
// f32 scales (scf [block][row]); release() after the last wgmma, after(b) behind each block
template <class Release, class After>
__device__ __forceinline__ void stage_ss(float (&d)[2][64], float (&c)[64], u64 da, u64 db, const float* scf,
                                         int wc0, Release release, After after) {
    fence();
    mma_ss(d[0], bdesc(da, 64, 0), bdesc(db, 128, 0));
    commit();
#pragma unroll
    for (int b = 0; b < 8; ++b) {
        if (b < 7) {
            fence();
            mma_ss(d[(b + 1) & 1], bdesc(da, 64, b + 1), bdesc(db, 128, b + 1));
            commit();
            wait<1>();
        } else {
            wait<0>();
            release();
        }
        const float s0 = scf[b * 64 + wc0], s1 = scf[b * 64 + wc0 + 8];
#pragma unroll
        for (int i = 0; i < 64; ++i) c[i] = __fmaf_rn(d[b & 1][i], (i & 2) ? s1 : s0, c[i]);
        after(b);
    }
}

// the present form: each warpgroup decodes its own rows (raw stage in slot 0, its own copy)
__device__ void body_rs(unsigned char* sm, float* out, long long* cyc, int iters) {
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const u32 sb = (u32)__cvta_generic_to_shared(sm);
    const u64 db = desc(sb + wg * BROWS);
    const u32 rm = (6u - 4u * t) & 31u, rs = (12u - 4u * t) & 31u;
    const int wc0 = 16 * warp + g;
    const unsigned char* wp = sm + OFF_RAW + wg * RAW + wc0 * 64;
    const unsigned char* sc = sm + OFF_RSC + wg * 512;
    float c[64], d[2][64];
#pragma unroll
    for (int i = 0; i < 64; ++i) c[i] = -0.0f, d[0][i] = d[1][i] = 0.0f;
    u32 a[2][2][4];
    float ws[2][2][2];
    auto operands = [&](int p, int i) {
        const uint4 A0 = *(const uint4*)(wp + 16 * i), A1 = *(const uint4*)(wp + 8 * 64 + 16 * i);
        e4m3x2(*(const unsigned short*)(sc + wc0 * 8 + 2 * i), ws[p][0][0], ws[p][1][0]);
        e4m3x2(*(const unsigned short*)(sc + (wc0 + 8) * 8 + 2 * i), ws[p][0][1], ws[p][1][1]);
        a[p][0][0] = pair(A0.x, rm, rs), a[p][0][1] = pair(A1.x, rm, rs);
        a[p][0][2] = pair(A0.y, rm, rs), a[p][0][3] = pair(A1.y, rm, rs);
        a[p][1][0] = pair(A0.z, rm, rs), a[p][1][1] = pair(A1.z, rm, rs);
        a[p][1][2] = pair(A0.w, rm, rs), a[p][1][3] = pair(A1.w, rm, rs);
    };
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
        __syncthreads();  // the stage barrier of the kernels
        operands(0, 0);
        fence();
        mma_rs(d[0], a[0][0], bdesc(db, 128, 0));
        commit();
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            if (b < 7) {
                const int nb = b + 1, p = nb >> 1;
                if ((nb & 1) == 0) operands(p & 1, p);
                fence();
                mma_rs(d[nb & 1], a[p & 1][nb & 1], bdesc(db, 128, nb));
                commit();
                wait<1>();
            } else {
                wait<0>();
            }
            const int p = b >> 1;
#pragma unroll
            for (int i = 0; i < 64; ++i) c[i] = __fmaf_rn(d[b & 1][i], ws[p & 1][b & 1][(i >> 1) & 1], c[i]);
        }
    }
    const long long t1 = clock64();
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc += c[i];
    out[blockIdx.x * blockDim.x + tid] = acc;
    if (tid == 0) cyc[blockIdx.x] = t1 - t0;
}

// warp-specialised: warpgroup 0 decodes, 1 and 2 multiply and chain; SHARE: one A for both
template <bool SHARE>
__device__ void body_ws(unsigned char* sm, float* out, long long* cyc, int iters) {
    const int tid = threadIdx.x, wg = tid >> 7;
    const u32 sb = (u32)__cvta_generic_to_shared(sm);
    __syncthreads();
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        // thread tp: row r = tp & 63, half h = tp >> 6 (elements 8h .. 8h + 7 of each block);
        // per A and block one word of 8 nibbles -> 4 bf16 pairs -> one 16-byte store
        const int r = tid & 63, h = tid >> 6;
        for (int it = 0; it < iters; ++it) {
            const int slot = it & 1;
            if (it >= 2) bar_sync(3 + slot, 384);
#pragma unroll
            for (int q = 0; q < (SHARE ? 1 : 2); ++q) {
                const unsigned char* raw = sm + OFF_RAW + (2 * slot + q) * RAW + r * 64;
                const u32 abase = sb + OFF_A + (2 * slot + q) * AW;
#pragma unroll
                for (int b = 0; b < 8; ++b) decode_chunk(raw, abase, r, h, b);
                // scales: 8 blocks x 64 rows, 4 per thread
                const u32 s4 = *(const u32*)(sm + OFF_RSC + (2 * slot + q) * 512 + 4 * (tid & 127));
                float4 f;
                e4m3x2(s4, f.x, f.y);
                e4m3x2(s4 >> 16, f.z, f.w);
                *(float4*)(sm + OFF_SCF + (2 * slot + q) * SCF + 16 * (tid & 127)) = f;
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            bar_arrive(1 + slot, 384);
        }
        // the last two stages' empties
        for (int it = iters; it < iters + 2; ++it)
            if (it >= 2) bar_sync(3 + (it & 1), 384);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int ct = tid - 128, cw = ct >> 7, lane = ct & 31, warp = (ct >> 5) & 3, g = lane >> 2;
    const int wc0 = 16 * warp + g;
    const u64 db = desc(sb + cw * BROWS);
    float c[64], d[2][64];
#pragma unroll
    for (int i = 0; i < 64; ++i) c[i] = -0.0f, d[0][i] = d[1][i] = 0.0f;
    const long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
        const int slot = it & 1, q = SHARE ? 0 : cw;
        const u64 da = desc(sb + OFF_A + (2 * slot + q) * AW);
        const float* scf = (const float*)(sm + OFF_SCF + (2 * slot + q) * SCF);
        bar_sync(1 + slot, 384);
        stage_ss(d, c, da, db, scf, wc0, [&] { bar_arrive(3 + slot, 384); }, [](int) {});
    }
    const long long t1 = clock64();
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc += c[i];
    out[blockIdx.x * blockDim.x + tid] = acc;
    if (ct == 0) cyc[blockIdx.x] = t1 - t0;
}

// cooperative: two warpgroups share one decoded A (64 weight rows) against their own 128
// activation rows; each thread decodes 4 of the next stage's 16-byte chunks inside this stage
// (one after every other block), the stage barrier publishes them
__device__ void body_coop(unsigned char* sm, float* out, long long* cyc, int iters) {
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3, g = lane >> 2;
    const u32 sb = (u32)__cvta_generic_to_shared(sm);
    const u64 db = desc(sb + wg * BROWS);
    const int wc0 = 16 * warp + g;
    // chunk i of this thread (i < 4): row r = tid & 63, half h = (tid >> 6) & 1, block 2 i + (tid >> 7)
    const int r = tid & 63, h = (tid >> 6) & 1;
    float c[64], d[2][64];
#pragma unroll
    for (int i = 0; i < 64; ++i) c[i] = -0.0f, d[0][i] = d[1][i] = 0.0f;
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
        const int slot = it & 1, nslot = slot ^ 1;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        const u64 da = desc(sb + OFF_A + 2 * slot * AW);
        const float* scf = (const float*)(sm + OFF_SCF + 2 * slot * SCF);
        const unsigned char* raw = sm + OFF_RAW + 2 * nslot * RAW + r * 64;
        const u32 abase = sb + OFF_A + 2 * nslot * AW;
        stage_ss(d, c, da, db, scf, wc0, [] {}, [&](int b) {
            if (b & 1) {
                decode_chunk(raw, abase, r, h, (b & 6) + wg);
                if (b == 7) {  // the next stage's scales, 2 per thread
                    const u32 s2 = *(const unsigned short*)(sm + OFF_RSC + 2 * nslot * 512 + 2 * tid);
                    float2 f;
                    e4m3x2(s2, f.x, f.y);
                    *(float2*)(sm + OFF_SCF + 2 * nslot * SCF + 8 * tid) = f;
                }
            }
        });
    }
    const long long t1 = clock64();
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc += c[i];
    out[blockIdx.x * blockDim.x + tid] = acc;
    if (tid == 0) cyc[blockIdx.x] = t1 - t0;
}

__device__ void fill(unsigned char* sm) {
    for (int i = threadIdx.x; i < SMEM / 4; i += blockDim.x)
        ((u32*)sm)[i] = 0x3A3A3A3Au + 0x01010101u * (i % 5);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
}
extern "C" __global__ void __launch_bounds__(256, 1) k_rs(float* o, long long* c, int n) {
    extern __shared__ __align__(1024) unsigned char sm[];
    fill(sm);
    body_rs(sm, o, c, n);
}
extern "C" __global__ void __launch_bounds__(256, 1) k_coop(float* o, long long* c, int n) {
    extern __shared__ __align__(1024) unsigned char sm[];
    fill(sm);
    body_coop(sm, o, c, n);
}
extern "C" __global__ void __launch_bounds__(384, 1) k_ws(float* o, long long* c, int n) {
    extern __shared__ __align__(1024) unsigned char sm[];
    fill(sm);
    body_ws<true>(sm, o, c, n);
}
extern "C" __global__ void __launch_bounds__(384, 1) k_ws2(float* o, long long* c, int n) {
    extern __shared__ __align__(1024) unsigned char sm[];
    fill(sm);
    body_ws<false>(sm, o, c, n);
}
"""
)

SMEM = 2 * 128 * 256 + 4 * 64 * 256 + 4 * 64 * 64 + 4 * 512 + 4 * 8 * 64 * 4
MODES = {"rs": 256, "coop": 256, "ws": 384, "ws2": 384}


def main() -> None:
    mod = cp.RawModule(path=str(runtime.compile_text("ws_probe.cu", SRC, "sm_90a")))
    sms = runtime.sm_count()
    iters = 2000
    out = cp.zeros(sms * 384, cp.float32)
    cyc = cp.zeros(sms, cp.int64)
    res = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "iters": iters, "modes": {}}
    for mode, threads in MODES.items():
        args = (out, cyc, np.int32(iters))
        per_stage = RF.median_cycles(mod.get_function(f"k_{mode}"), threads, args, cyc, SMEM) / iters
        res["modes"][mode] = {
            "cycles_per_stage": round(per_stage, 1),
            "block_values_per_sm_cycle": round(2 * 8 * 64 * 128 / per_stage, 1),
        }
        print(mode, res["modes"][mode], flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ws_probe.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
