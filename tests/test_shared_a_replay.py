"""CPU replay of ``w4s_gemm_f16``'s shared decoded weights (nvfp4_wgmma.cu: ``SaCopies::load_w``,
``sa_decode``, ``sa_scales`` and the consumer's scale load): every thread's 16-byte chunks of a
step's A, formed by w4b_pair's bit operations from the step's weight words with sa_decode's
rotations, stored at its swizzled address; then read back as wgmma reads a K-major operand with
the 128-byte swizzle (address bits 4-6 XOR bits 7-9) from each block's descriptor start
(``w4w_block_desc<8>``: half nb / 4 at 8192 bytes, 32 bytes per block inside it). Each (weight
row, k) must hold the bf16 of 2·e2m1 of the element the register-A kernels put at that k
(``tile_pair_operands``: nibbles t and t + 4 of the block's word h at k = 8h + 2t, 8h + 2t + 1),
every byte of a step's A written exactly once, and each lane's f32 scale pair its two weight
rows' (``sa_scale_pos``). And ``w4p_gemm_f16``'s producer / consumer synchronisation, replayed
over its named barriers and mbarriers (``run_protocol``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from metrale.reference.elements import BF16, E2M1_CODE2

THREADS, COLS, WROW = 256, 64, 80
#: sa_decode's (rm, rs) for the pairs t = 0..3 of a chunk: (6 - 4t, 12 - 4t) mod 32.
ROTATIONS = ((6, 12), (2, 8), (30, 4), (26, 0))


def rotl(w: int, r: int) -> int:
    return ((w << r) | (w >> (32 - r))) & 0xFFFFFFFF if r else w


def bf16_bits(v: float) -> int:
    return int(np.array([v], dtype=np.float32).astype(BF16).view(np.uint16)[0])


def w4b_pair(w: int, rm: int, rs: int) -> int:
    """tile.cuh's w4b_pair: per 16-bit half, the magnitude bits (a bf16, subnormal for code 1)
    times 2^127 by one exact bf16 fma (plus -0), then the sign bit moved in by xor."""
    mag = rotl(w, rm) & 0x01C001C0
    out = 0
    for half in (0, 1):
        m = (mag >> (16 * half)) & 0xFFFF
        v = float(np.array([m], dtype=np.uint16).view(BF16)[0]) * 2.0**127 + -0.0
        out |= bf16_bits(v) << (16 * half)
    return out ^ (rotl(w, rs) & 0x80008000)


def code_bits(nibble: int) -> int:
    """The bf16 bits of 2·e2m1 of a nibble (-0 for the nibble 8, as w4b_pair gives it)."""
    return 0x8000 if nibble == 8 else bf16_bits(float(E2M1_CODE2[nibble]))


def decode_step(raw: np.ndarray) -> tuple[bytearray, np.ndarray]:
    """A step's A (2 halves x 64 rows x 128 bytes) and write counts, as the 256 threads store it."""
    a = bytearray(2 * COLS * 128)
    writes = np.zeros(len(a), dtype=np.int32)
    for tid in range(THREADS):
        col, h = tid & 63, (tid >> 6) & 1
        for k in range(4):
            nb = 2 * k + (tid >> 7)
            o = col * WROW + 8 * nb + 4 * h
            w = int.from_bytes(bytes(raw[o : o + 4]), "little")
            words = [w4b_pair(w, rm, rs) for rm, rs in ROTATIONS]
            addr = (nb >> 2) * (COLS * 128) + col * 128 + ((((nb & 3) * 2 + h) ^ (col & 7)) << 4)
            a[addr : addr + 16] = b"".join(x.to_bytes(4, "little") for x in words)
            writes[addr : addr + 16] += 1
    return a, writes


def wgmma_a(a: bytearray, row: int, nb: int, kk: int) -> int:
    """The bf16 the MMA of block nb reads at (row, kk): logical address from the descriptor start,
    then the 128-byte swizzle."""
    logical = (nb >> 2) * (COLS * 128) + row * 128 + (nb & 3) * 32 + 2 * kk
    phys = logical ^ (((logical >> 7) & 7) << 4)
    return int.from_bytes(a[phys : phys + 2], "little")


def test_w4b_pair_rotations_every_nibble() -> None:
    """sa_decode's four rotation pairs place nibbles t and t + 4 of a word, for every nibble
    value in every position, as the bf16 code pair (low half: nibble t)."""
    for t, (rm, rs) in enumerate(ROTATIONS):
        for lo in range(16):
            for hi in range(16):
                for fill in (0x00000000, 0xFFFFFFFF, 0x5A5A5A5A):
                    w = fill & ~((0xF << (4 * t)) | (0xF << (4 * (t + 4)))) & 0xFFFFFFFF
                    w |= (lo << (4 * t)) | (hi << (4 * (t + 4)))
                    got = w4b_pair(w, rm, rs)
                    assert got & 0xFFFF == code_bits(lo), (t, lo, hi, hex(fill))
                    assert got >> 16 == code_bits(hi), (t, lo, hi, hex(fill))


@pytest.mark.parametrize("seed", [0, 1])
def test_shared_a_layout_matches_the_register_fragments(seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=COLS * (WROW + 8), dtype=np.uint8)
    a, writes = decode_step(raw)
    assert (writes == 1).all(), "every byte of the step's A written exactly once"
    for row in range(COLS):
        for nb in range(8):
            for h in range(2):
                o = row * WROW + 8 * nb + 4 * h
                w = int.from_bytes(bytes(raw[o : o + 4]), "little")
                for t in range(4):
                    for e in range(2):
                        want = code_bits((w >> (4 * (t + 4 * e))) & 0xF)
                        got = wgmma_a(a, row, nb, 8 * h + 2 * t + e)
                        assert got == want, (row, nb, h, t, e)


def test_shared_a_scales_reach_their_rows() -> None:
    """sa_scales' f32 slots (block-major, sa_scale_pos) and the consumer's 8-byte load: lane (warp
    w, g) of either warpgroup gets the scales of weight rows 16 w + g and 16 w + g + 8."""

    def pos(col: int) -> int:
        return (col & ~15) + ((col & 7) << 1) + ((col >> 3) & 1)

    scf: dict[int, tuple[int, int]] = {}
    for tid in range(THREADS):
        col, j = tid & 63, tid >> 6
        for b in (2 * j, 2 * j + 1):
            slot = b * COLS + pos(col)
            assert slot not in scf, "one writer per slot"
            scf[slot] = (col, b)
    assert len(scf) == 8 * COLS
    for warp in range(4):
        for g in range(8):
            for b in range(8):
                first = b * COLS + 16 * warp + 2 * g
                assert first % 2 == 0, "an aligned 8-byte load"
                assert scf[first] == (16 * warp + g, b)
                assert scf[first + 1] == (16 * warp + g + 8, b)


def run_protocol(sl: int, passes: int) -> int:
    """``w4p_gemm_f16``'s synchronisation replayed: the producer warpgroup (sp_produce) and the
    two consumer warpgroups (sp_consume) as actors over the named barriers (full 1, 2; empty 3, 4;
    384 threads each generation: an arrival past the count would join the wrong one) and the two
    activation mbarriers (phases counted; a consumer's parity wait must find its own phase, not
    one two ahead). Every decoded A slot and activation buffer is written only after both
    consumers finished the step that used it before, and read only after its step was written.
    Returns the steps consumed."""
    count = 384
    arrived = {i: 0 for i in (1, 2, 3, 4)}
    gen = {i: 0 for i in (1, 2, 3, 4)}
    phases = [0, 0]
    holds: dict[tuple[str, int], int] = {}  # (buffer kind, slot) -> step written there
    done: dict[int, set[int]] = {}  # step (over both passes) -> consumers done with it
    consumed = 0

    def barrier(kind: str, bid: int, n: int) -> Iterator[None]:
        arrived[bid] += n
        assert arrived[bid] <= count, f"barrier {bid} overfilled"
        g = gen[bid]
        if arrived[bid] == count:
            gen[bid] += 1
            arrived[bid] = 0
        if kind == "sync":
            while gen[bid] == g:
                yield

    def producer() -> Iterator[None]:
        for p in range(passes):
            for j in range(sl):
                slot, step = j & 1, p * sl + j
                if j >= 2:
                    yield from barrier("sync", 3 + slot, 128)
                prev = holds.get(("a", slot))
                if prev is not None:
                    assert done.get(prev, set()) == {0, 1}, f"slot {slot} rewritten in use (step {step})"
                holds[("x", slot)] = step  # the TMA of step j: completes on the slot's mbarrier
                phases[slot] += 1
                holds[("a", slot)] = step  # the decode
                yield from barrier("arrive", 1 + slot, 128)
            for j in (sl, sl + 1):
                if j >= 2:
                    yield from barrier("sync", 3 + (j & 1), 128)

    def consumer(c: int) -> Iterator[None]:
        nonlocal consumed
        for p in range(passes):
            ph = (p * ((sl + 1) // 2), p * (sl // 2))
            for ls in range(sl):
                buf, step = ls & 1, p * sl + ls
                yield from barrier("sync", 1 + buf, 128)
                want = ph[buf] + (ls >> 1)  # phases completed before this use
                while phases[buf] <= want:
                    yield
                assert phases[buf] == want + 1, "the mbarrier's parity would alias"
                assert holds[("a", buf)] == step and holds[("x", buf)] == step, "read before written"
                done.setdefault(step, set()).add(c)
                consumed += 1
                yield from barrier("arrive", 3 + buf, 128)

    actors = [producer(), consumer(0), consumer(1)]
    live = list(actors)
    idle = 0
    while live:
        progressed = False
        for a in list(live):
            try:
                next(a)
                progressed = True
            except StopIteration:
                live.remove(a)
                progressed = True
        idle = 0 if progressed else idle + 1
        assert idle < 3, "deadlock"
    assert all(v == 0 for v in arrived.values()), "a barrier left with arrivals"
    return consumed


@pytest.mark.parametrize("passes", [1, 2])
@pytest.mark.parametrize("sl", [1, 2, 3, 4, 5, 8, 9, 16, 17])
def test_producer_protocol(sl: int, passes: int) -> None:
    assert run_protocol(sl, passes) == 2 * sl * passes
