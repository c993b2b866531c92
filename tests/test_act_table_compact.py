"""The activation tables' compact device form (``metrale/cuda/weights.py`` ``compact_table``, read
from shared memory by common.cuh ``CompactAct`` in the ``_st`` kernels): ``CompactAct``'s
rule, written here in numpy step by step, gives the shipped table's bits at every one of the
65,536 bf16 codes (NaN where the table is NaN), for SiLU and GELU; the form fits a CTA's
default shared memory and copies as float4."""

from __future__ import annotations

import numpy as np
import pytest

from metrale.cuda.weights import compact_table
from metrale.errors import MetraleError
from metrale.reference.tables import ACTIVATIONS, table

CODES = np.arange(65536, dtype=np.uint32)


def act_value(c: np.ndarray, g: np.ndarray) -> np.ndarray:
    """common.cuh CompactAct over the bf16 codes g (uint32), as float32."""
    h = c.view(np.uint32)
    lo, pos_hi, neg_hi, p = h[0] & 0xFF, (h[0] >> 8) & 0xFF, h[0] >> 16, h[1]
    e = (g >> 7) & 0xFF
    x = (g << 16).view(np.float32)
    pos = g < 0x8000
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.where(pos, x, np.where((g & 0x7FFF) > 0x7F80, x, np.float32(-0.0)))  # the top binades
        idx = 4 + np.where(pos, 0, p) + (((e.astype(np.int64) - lo) << 7) | (g & 127))
        stored = (pos & (e < pos_hi)) | (~pos & (e < neg_hi))
        out = np.where(stored & (e >= lo), c[np.clip(idx, 0, c.size - 1)], out)
        return np.where(e < lo, x * np.float32(0.5), out).astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    nan = np.isnan(want)
    return bool(
        np.array_equal(np.isnan(got), nan)
        and np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    )


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_compact_table_gives_every_code(name: str) -> None:
    got, want = act_value(compact_table(name), CODES), table(name)
    bad = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)) & ~(np.isnan(got) & np.isnan(want)))
    assert bad.size == 0, f"{name}: {bad.size} codes differ, first {hex(int(bad[0]))}"


#: Named codes: ±0, the smallest subnormal of each sign, ±1, the largest finite, ±Inf, quiet and
#: signalling NaNs of each sign.
NAMED = {
    "+0": 0x0000, "-0": 0x8000, "+min subnormal": 0x0001, "-min subnormal": 0x8001, "+1": 0x3F80,
    "-1": 0xBF80, "+max": 0x7F7F, "-max": 0xFF7F, "+Inf": 0x7F80, "-Inf": 0xFF80, "+qNaN": 0x7FC0,
    "-qNaN": 0xFFC0, "+sNaN": 0x7F81, "-sNaN": 0xFF81,
}  # fmt: skip


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("code", NAMED.values(), ids=NAMED.keys())
def test_compact_table_named_codes(name: str, code: int) -> None:
    g = np.array([code], dtype=np.uint32)
    assert _same(act_value(compact_table(name), g), table(name)[g]), hex(code)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_compact_table_layout(name: str) -> None:
    c = compact_table(name)
    h = c.view(np.uint32)
    lo, pos_hi, neg_hi = h[0] & 0xFF, (h[0] >> 8) & 0xFF, h[0] >> 16
    assert 0 < lo <= pos_hi <= 255 and lo <= neg_hi <= 255
    assert h[1] == 128 * (pos_hi - lo) and c.size == 4 + 128 * (pos_hi - lo + neg_hi - lo)
    assert c.dtype == np.float32 and c.nbytes <= 48 * 1024 and c.nbytes % 16 == 0, c.nbytes


def test_compact_table_refuses_a_table_without_its_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from metrale.cuda import weights

    noise = np.random.default_rng(7).standard_normal(65536).astype(np.float32)
    monkeypatch.setattr(weights, "table", lambda name: noise)
    with pytest.raises(MetraleError, match="silu table: its top binades are not x"):
        compact_table("silu")
