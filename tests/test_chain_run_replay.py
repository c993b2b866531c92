"""CPU replay of the data movement of the fast chain decode kernels (nvfp4.cuh ``nvfp4_run_body``):
one warp's issue cursor (the cp.async copies of each run slice's weight bytes by four lanes, with
the chunk swizzle, and of the scales, per slice in the slot or per group of SG slices in a ring of
NBUF group buffers) against its consumer (thread t = 32 warp + lane takes part t // C of column
t % C of each CTA round, C = threads // Q columns per round, reading its chunks of slice s and its
run's scales), over several rounds and ring turns. Every byte a lane reads must be the weight or
scale byte of its own (column, part, slice) as copied by the latest write to that place, and no
copy may land on a place a lane reads later in the same ring turn (the race two scale buffers had
at six slots)."""

from __future__ import annotations

import pytest


def replay(
    q: int,
    n_cols: int,
    depth: int,
    sg: int,
    threads: int,
    warp: int,
    first: int,
    step: int,
    nbuf: int | None = None,
) -> int:
    """Run warp ``warp`` of a CTA of ``threads`` threads over rounds first, first + step, ...;
    returns the run slices checked. Memory is modelled as dicts from (place, byte) to the source
    it holds: ("w", n, k) a weight byte, ("s", n, b) a scale byte, None a zero fill. ``nbuf``: the
    scale ring's buffers (default the kernel's)."""
    cols = threads // q  # C
    used = cols * q
    rounds = -(-n_cols // cols)
    nbuf = (sg - 1 + depth - 1) // sg + 1 if nbuf is None else nbuf
    ring: dict[tuple[int, int], object] = {}
    sbuf: dict[tuple[int, int], object] = {}
    state = {"it": first, "s": 0, "g": 0}

    def issue(slot: int) -> None:
        it_i, s_i = state["it"], state["s"]
        for lane in range(32):
            for k in range(4):  # weights: lane L copies chunk L & 3 of its warp's runs (L >> 2) + 8 k
                run, c = (lane >> 2) + 8 * k, lane & 3
                t = 32 * warp + run
                n = it_i * cols + t % cols
                live = it_i < rounds and t < used and n < n_cols
                dst = run * 64 + ((c ^ ((run >> 1) & 3)) << 4)
                off = (t // cols) * 512 + c * 16 + 64 * s_i  # byte of the weight row (K / 2 bytes)
                for j in range(16):
                    ring[(slot, dst + j)] = ("w", n, off + j) if live else None
            if sg == 1:  # the lane's own 8 scale bytes
                t = 32 * warp + lane
                n = it_i * cols + t % cols
                live = it_i < rounds and t < used and n < n_cols
                for j in range(8):
                    src = ("s", n, 64 * min(t // cols, q - 1) + 8 * s_i + j) if live else None
                    ring[(slot, 2048 + lane * 8 + j)] = src
        if sg > 1 and s_i % sg == 0:
            buf = state["g"] % nbuf
            state["g"] += 1
            sch = max(1, 8 * sg // 16)
            for lane in range(32):
                for i in range(sch):
                    qq = lane + 32 * i
                    t = 32 * warp + qq // sch
                    n = it_i * cols + t % cols
                    live = it_i < rounds and t < used and n < n_cols
                    off = (t // cols) * 64 + (qq % sch) * 16 + 8 * s_i
                    for j in range(16):
                        sbuf[(buf, qq * 16 + j)] = ("s", n, off + j) if live else None
        state["s"] += 1
        if state["s"] == 8:
            state["s"], state["it"] = 0, it_i + step

    for d in range(depth - 1):
        issue(d)
    it, s, g_c, checked = first, 0, 0, 0
    while it < rounds:
        for d in range(depth):
            if it >= rounds:
                break
            issue((d + depth - 1) % depth)  # after the wait and the warp's sync, before the reads
            for lane in range(32):
                t = 32 * warp + lane
                n, part = it * cols + t % cols, t // cols
                if t >= used or n >= n_cols:
                    continue
                swz = (lane >> 1) & 3
                for h in range(4):
                    for j in range(16):
                        got = ring[(d, lane * 64 + ((h ^ swz) << 4) + j)]
                        assert got == ("w", n, (64 * part + 8 * s) * 8 + 16 * h + j), (q, lane, s, h, j, got)
                for j in range(8):
                    if sg == 1:
                        got = ring[(d, 2048 + lane * 8 + j)]
                    else:
                        got = sbuf[(g_c % nbuf, lane * 8 * sg + (s % sg) * 8 + j)]
                    assert got == ("s", n, 64 * part + 8 * s + j), (q, lane, s, j, got)
                checked += 1
            if sg > 1 and s % sg == sg - 1:
                g_c += 1
            s += 1
            if s == 8:
                s, it = 0, it + step
    return checked


@pytest.mark.parametrize(
    ("threads", "q"), [(384, 1), (384, 3), (384, 4), (384, 12), (384, 14), (64, 20), (32, 32)]
)
@pytest.mark.parametrize(("depth", "sg"), [(3, 1), (3, 4), (5, 4), (6, 4), (6, 1), (4, 2)])
def test_every_lane_reads_its_own_run(threads: int, q: int, depth: int, sg: int) -> None:
    """Every warp of the CTA over rounds 0, 1, 2, ... (one CTA) and 1, 3, ... (the second of two);
    N not a whole number of rounds (zero-filled columns past N), a warp past the threads in use,
    a CTA past the last round."""
    cols = threads // q
    n_cols = 3 * cols + 1
    rounds = -(-n_cols // cols)
    total = 0
    for warp in range(threads // 32):
        total += replay(q, n_cols, depth, sg, threads, warp, 0, 1)
        assert replay(q, n_cols, depth, sg, threads, warp, 1, 2) >= 0
        assert replay(q, n_cols, depth, sg, threads, warp, rounds, 5) == 0
    assert total == 8 * q * n_cols  # every run of every column, 8 slices each


def test_two_scale_buffers_race_at_six_slots() -> None:
    """The replay sees the race the kernel had: two alternating scale group buffers with six slots
    (the next round's first group copied over the group still being read)."""
    assert replay(4, 9, 6, 4, 32, 0, 0, 1) > 0
    with pytest.raises(AssertionError):
        replay(4, 9, 6, 4, 32, 0, 0, 1, nbuf=2)
