"""CPU replay of the data movement of the fast chain decode kernels (nvfp4.cuh ``nvfp4_run_body``):
one warp's issue cursor (the cp.async copies of each run slice's weight bytes by four lanes, with
the chunk swizzle, and of the scales, per slice in the slot or per group of SG slices in a ring of
NBUF group buffers) against its consumer (lane l, the share l % G of run slot i = l / G: column
i % CPI of the item, part i / CPI, reading its chunks of slice s and the run's scales), with one,
two and four lanes per run, over several items and ring turns. Every byte a lane reads must be
the weight or scale byte of its own (column, part, slice) as copied by the latest write to that
place, and no copy may land on a place a lane reads later in the same ring turn (the race two
scale buffers had at six slots)."""

from __future__ import annotations

import pytest


def replay(
    q: int, n_cols: int, depth: int, sg: int, i_first: int, i_step: int, nbuf: int | None = None, g: int = 1
) -> int:
    """Run one warp of the kernel's loop with ``g`` lanes per run; returns the run slices checked
    (each by all its lanes). Memory is modelled as dicts from (place, byte) to the source it
    holds: ("w", n, k) a weight byte, ("s", n, b) a scale byte, None a zero fill. ``nbuf``: the
    scale ring's buffers (default the kernel's)."""
    slots = 32 // g  # RUN_SLOTS
    cpi, used = slots // q, (slots // q) * q
    items = -(-n_cols // cpi)
    nbuf = (sg - 1 + depth - 1) // sg + 1 if nbuf is None else nbuf
    ring: dict[tuple[int, int], object] = {}
    sbuf: dict[tuple[int, int], object] = {}
    state = {"it": i_first, "s": 0, "g": 0}

    def issue(slot: int) -> None:
        it_i, s_i = state["it"], state["s"]
        for lane in range(32):
            for k in range(4 // g):  # weights: lane L copies chunk L & 3 of run (L >> 2) + 8 k
                run, c = (lane >> 2) + 8 * k, lane & 3
                n = it_i * cpi + run % cpi
                live = it_i < items and run < used and n < n_cols
                dst = run * 64 + ((c ^ ((run >> 1) & 3)) << 4)
                off = (run // cpi) * 512 + c * 16 + 64 * s_i  # byte of the weight row (K / 2 bytes)
                for j in range(16):
                    ring[(slot, dst + j)] = ("w", n, off + j) if live else None
            if sg == 1 and lane % g == 0:  # the run's first lane copies its 8 scale bytes
                run = lane // g
                n = it_i * cpi + run % cpi
                live = it_i < items and run < used and n < n_cols
                for j in range(8):
                    src = ("s", n, 64 * (run // cpi) + 8 * s_i + j) if live else None
                    ring[(slot, 64 * slots + run * 8 + j)] = src
        if sg > 1 and s_i % sg == 0:
            buf = state["g"] % nbuf
            state["g"] += 1
            sch = max(1, 8 * sg // 16)
            for lane in range(32):
                for i in range(-(-slots * sch // 32)):
                    qq = lane + 32 * i
                    if qq >= slots * sch:
                        continue
                    run = qq // sch
                    n = it_i * cpi + run % cpi
                    live = it_i < items and run < used and n < n_cols
                    off = (run // cpi) * 64 + (qq % sch) * 16 + 8 * s_i
                    for j in range(16):
                        sbuf[(buf, qq * 16 + j)] = ("s", n, off + j) if live else None
        state["s"] += 1
        if state["s"] == 8:
            state["s"], state["it"] = 0, it_i + i_step

    for d in range(depth - 1):
        issue(d)
    it, s, g_c, checked = i_first, 0, 0, 0
    while it < items:
        for d in range(depth):
            if it >= items:
                break
            issue((d + depth - 1) % depth)  # after the wait and the warp's sync, before the reads
            for lane in range(32):
                run, gl = lane // g, lane % g
                n, part = it * cpi + run % cpi, run // cpi
                if run >= used or n >= n_cols:
                    continue
                swz = (run >> 1) & 3
                for h in range((4 // g) * gl, (4 // g) * (gl + 1)):  # this lane's chunks
                    for j in range(16):
                        got = ring[(d, run * 64 + ((h ^ swz) << 4) + j)]
                        assert got == ("w", n, (64 * part + 8 * s) * 8 + 16 * h + j), (q, lane, s, h, j, got)
                for j in range(8):  # the run's scales, read by each of its lanes
                    if sg == 1:
                        got = ring[(d, 64 * slots + run * 8 + j)]
                    else:
                        got = sbuf[(g_c % nbuf, run * 8 * sg + (s % sg) * 8 + j)]
                    assert got == ("s", n, 64 * part + 8 * s + j), (q, lane, s, j, got)
                checked += 1
            if sg > 1 and s % sg == sg - 1:
                g_c += 1
            s += 1
            if s == 8:
                s, it = 0, it + i_step
    return checked


@pytest.mark.parametrize(
    ("g", "q"), [(g, q) for g in (1, 2, 4) for q in (1, 3, 4, 12, 14, 20, 32) if q <= 32 // g]
)
@pytest.mark.parametrize(("depth", "sg"), [(3, 1), (3, 4), (5, 4), (6, 4), (6, 1), (4, 2)])
def test_every_lane_reads_its_own_run(g: int, q: int, depth: int, sg: int) -> None:
    """Warps with one item, several items and none (i_first past the last item); N not a whole
    number of items (zero-filled columns past N)."""
    cpi = 32 // g // q
    n_cols = 3 * cpi + 1
    items = -(-n_cols // cpi)
    want = 8 * g * sum(min(cpi, n_cols - i * cpi) * q for i in range(items))
    assert replay(q, n_cols, depth, sg, 0, 1, g=g) == want
    assert replay(q, n_cols, depth, sg, 1, 2, g=g) > 0
    assert replay(q, n_cols, depth, sg, items, 5, g=g) == 0


def test_two_scale_buffers_race_at_six_slots() -> None:
    """The replay sees the race the kernel had: two alternating scale group buffers with six slots
    (the next item's first group copied over the group still being read)."""
    assert replay(4, 9, 6, 4, 0, 1) > 0
    with pytest.raises(AssertionError):
        replay(4, 9, 6, 4, 0, 1, nbuf=2)
