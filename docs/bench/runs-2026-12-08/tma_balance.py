"""How evenly the W8A8 stream-K CTAs finish (GPU machine; a probe, not a test).

Builds ``w8a8_wgmma.cu`` with each ``w8a8_tma_n{BN}`` CTA recording %globaltimer at its start and
when its first MMA warpgroup leaves the GEMM, and its %smid, then launches the routed stream-K
shapes of the Qwen3-8B W8A8 FFN one at a time (synchronised, weights rotated through copies that
exceed the L2): gate + up as one launch and down, at 64 and 128 rows. Prints, per shape, the
kernel's span (last end - first start), the spread of the starts, the CTAs' ends as fractions of
the span (min / p10 / median / p90 / max) and the mean end per GPC-sized group of SM ids. Equal
units per CTA (stream-K) finishing far apart would say the HBM share is uneven across SMs and a
dynamic hand-out of units would pay.

    [GATHER=1] PYTHONPATH=. python docs/bench/runs-2026-12-08/tma_balance.py

GATHER=1 builds the owners' gathered fixup (configs.W8A8_TMA_GATHER = True).
"""

from __future__ import annotations

import os
import re

import cupy
import numpy as np

from metrale.cuda import configs, runtime, w8a8
from metrale.cuda.w8a8 import DeviceA8Codes

GT = 'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(T));'
PRE = "{ unsigned long long t0_; " + GT.replace("T", "t0_") + " "
POST = (
    " if (threadIdx.x == 128) { unsigned long long t1_; unsigned int s_; "
    + GT.replace("T", "t1_")
    + ' asm volatile("mov.u32 %0, %%smid;" : "=r"(s_)); '
    "tma_t0[blockIdx.x] = t0_; tma_t1[blockIdx.x] = t1_; tma_sm[blockIdx.x] = s_; } }"
)
GLOBALS = "__device__ unsigned long long tma_t0[1024], tma_t1[1024];\n__device__ unsigned int tma_sm[1024];\n"


if os.environ.get("GATHER") == "1":
    configs.W8A8_TMA_GATHER = True


def probe_source() -> str:
    """w8a8_wgmma.cu with the stream-K kernels recording their CTAs' start, end and SM."""
    src, n = re.subn(
        r"w8_tma_gemm<BN, STAGES, KS, false, GATHER>\([^;]*\);",
        lambda m: PRE + m.group(0) + POST,
        runtime.source("w8a8_wgmma.cu"),
    )
    assert n == 1, n
    return GLOBALS + src


def module() -> cupy.RawModule:
    props = runtime.device_props(runtime.device_id())
    arch = runtime.file_arch("w8a8_wgmma.cu", f"sm_{props['major']}{props['minor']}")
    return cupy.RawModule(path=str(runtime.compile_text("tma_probe.cu", probe_source(), arch)))


class W:
    def __init__(self, n: int, k: int) -> None:
        self.n, self.k, self.name = n, k, "w"


def arrays(n: int, k: int, rng: cupy.random.RandomState) -> dict[str, cupy.ndarray]:
    return {
        "weight": rng.randint(-127, 128, size=(n, k), dtype=cupy.int8),
        "weight_scale": (rng.rand(n, dtype=cupy.float32) + 0.5) * 1e-3,
    }


def main() -> None:
    mod = module()
    w8a8.get_kernel = lambda f, name: mod.get_function(name)
    glob = {name: mod.get_global(name) for name in ("tma_t0", "tma_t1", "tma_sm")}
    t0 = cupy.ndarray((1024,), cupy.uint64, glob["tma_t0"])
    t1 = cupy.ndarray((1024,), cupy.uint64, glob["tma_t1"])
    sm = cupy.ndarray((1024,), cupy.uint32, glob["tma_sm"])
    rng = cupy.random.RandomState(7)
    hidden, inter = 4096, 12288
    gates = [(arrays(inter, hidden, rng), arrays(inter, hidden, rng)) for _ in range(2)]
    downs = [arrays(hidden, inter, rng) for _ in range(3)]
    print(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
    for m in (64, 128):
        for what in ("gate+up", "down"):
            k, n = (hidden, inter) if what == "gate+up" else (inter, hidden)
            bn = w8a8.tma_tier(m, 2 * n if what == "gate+up" else n, what == "gate+up")
            q = DeviceA8Codes(
                q=rng.randint(-127, 128, size=(m, k), dtype=cupy.int8),
                scale=rng.rand(m, dtype=cupy.float32),
            )
            out, out2 = cupy.empty((m, n), cupy.uint16), cupy.empty((m, n), cupy.uint16)
            spans, starts, ends, by_sm = [], [], [], {}
            for it in range(12):
                t0.fill(0)
                t1.fill(0)
                if what == "gate+up":
                    ag, au = gates[it % 2]
                    sec = w8a8._Second(W(n, k), au, out2, n)
                    w8a8._tma_launch(q.q, q.scale, W(n, k), ag, out, n, bn, sec)
                else:
                    w8a8._tma_launch(q.q, q.scale, W(n, k), downs[it % 3], out, n, bn)
                cupy.cuda.Device().synchronize()
                if it < 4:
                    continue
                g = int((t1 > 0).sum())
                a0, a1, s = (cupy.asnumpy(x[:g]).astype(np.int64) for x in (t0, t1, sm))
                base = a0.min()
                span = a1.max() - base
                spans.append(span / 1e3)
                starts.append((a0.max() - base) / 1e3)
                ends.append(np.percentile((a1 - base) / span, [0, 10, 50, 90, 100]))
                for smid, e in zip(s, (a1 - base) / span, strict=True):
                    by_sm.setdefault(int(smid) // 16, []).append(e)
            e = np.mean(ends, axis=0)
            print(
                f"m={m} {what} tma_n{bn} CTAs={g}: span {np.median(spans):.1f} us, starts within "
                f"{np.median(starts):.2f} us, ends min/p10/median/p90/max "
                + " / ".join(f"{v:.2f}" for v in e)
            )
            groups = ", ".join(f"{k}: {np.mean(v):.2f}" for k, v in sorted(by_sm.items()))
            print(f"  mean end by SM id // 16: {groups}")


if __name__ == "__main__":
    main()
