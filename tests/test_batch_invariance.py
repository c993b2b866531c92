"""Batch invariance (arithmetic.md § rule): row r of an m-row call equals the 1-row call on row r in
the same arithmetic mode, for every format, every entry point that serves it and m up to 64,
including rows holding NaN/Inf (whose outputs are the canonical NaN 0x7FC0).

The mode of a call is read from its launch log (A4 when ``w4a4_gemv_small_m`` ran); the 1-row
reference is ``forward`` under a weight-quantization tier that gives that mode (``w4a4`` for A4,
``w4a16`` for A16). Whether each entry picks the right mode is test_layer_routing's business.
"""

from __future__ import annotations

import layer_cases as lc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metrale.reference.context import ForwardContext
from metrale.reference.layer import DenseFfnLayer

CANONICAL_NAN = 0x7FC0
M_CHOICES = (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 47, 64)
DIMS = st.tuples(st.sampled_from((32, 48, 64, 80)), st.sampled_from((48, 80, 112)))
Q2_DIMS = st.tuples(st.sampled_from((64, 128, 192)), st.sampled_from((64, 128, 192)))
SETTINGS = settings(
    max_examples=20,
    deadline=None,
    print_blob=True,  # fresh examples every run; a failure prints its reproduction blob
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
#: Formats × A4 declaration under test (kind, env modes that matter).
KINDS = [
    ("nvfp4", ("w4a4",)),
    ("nvfp4_a4", lc.WEIGHT_QUANT_MODES),
    ("nvfp4_gelu", ("w4a4",)),
    ("nvfp4_lora", ("w4a4",)),
    ("nvfp4_a4_lora", lc.WEIGHT_QUANT_MODES),
    ("q2", ("w4a4",)),
    ("fp8", ("w4a4",)),
    ("bf16", ("w4a4",)),
    ("w8a8", ("w4a4",)),
    ("w8a8_only", ("w4a4",)),
]


def inputs(seed: int, m: int, hidden: int, nonfinite: bool) -> np.ndarray:
    """m rows mixing seeded random rows with the named edge rows (with or without NaN/Inf)."""
    pool = (lc.x_pool if nonfinite else lc.finite_pool)(seed, 64, hidden)
    return pool[lc.row_indices(seed, 64, m)]


def call(layer: DenseFfnLayer, entry: str, x: np.ndarray) -> tuple[np.ndarray, str]:
    """(output bits, "A4" or "A16"/"A8") of one call; ``__call__`` or a named entry point."""
    layer.backend.launches.clear()
    if entry == "__call__":
        out = lc.bits(layer(x))
    else:
        out = lc.run_guarded(layer, entry, x)
    return out, "A4" if "w4a4_gemv_small_m" in layer.backend.launches else "other"


def single_rows(layer: DenseFfnLayer, x: np.ndarray, mode: str) -> np.ndarray:
    """Each row of x through ``forward`` under the tier that gives ``mode``."""
    with lc.weight_quant_env("w4a4" if mode == "A4" else "w4a16"):
        layer.backend.launches.clear()
        outs = []
        for r in range(x.shape[0]):
            ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=1)
            lc.run_entry(layer, "forward", x[r : r + 1], ctx)
            outs.append(lc.bits(ctx.backend.to_numpy(ctx.buffers.output())))
    assert ("w4a4_gemv_small_m" in layer.backend.launches) is (mode == "A4"), "1-row call in the wrong mode"
    return np.concatenate(outs)


def entries_for(kind: str, mode: str, m: int) -> list[str]:
    return [
        e for e, ms in lc.entry_ms(kind, mode).items() if m in ms or (m not in lc.ALL_M and _serves(e, ms, m))
    ]


def _serves(entry: str, ms: tuple[int, ...], m: int) -> bool:
    """Whether an entry whose served row counts (from ALL_M) are ``ms`` serves m."""
    if entry in ("forward", "forward_k2", "forward_k3"):
        return False
    return m <= max(ms)


def check_invariance(
    backend_name: str, kind: str, mode: str, dims: tuple[int, int], m: int, seed: int, nonfinite: bool
) -> None:
    hidden, inter = dims
    layer = lc.make_parts(kind, hidden, inter, seed).layer(lc.backend_for(backend_name))
    x = inputs(seed, m, hidden, nonfinite)
    refs: dict[str, np.ndarray] = {}
    with lc.weight_quant_env(mode):
        results = {e: call(layer, e, x) for e in [*entries_for(kind, mode, m), "__call__"]}
    for entry, (out, arith) in results.items():
        if arith not in refs:
            refs[arith] = single_rows(layer, x, arith)
        bad = np.argwhere(out != refs[arith])
        assert not bad.size, (
            f"{kind} {mode} {entry} m={m}: row {bad[0][0]} differs from the 1-row call "
            f"(got 0x{int(out[tuple(bad[0])]):04X}, want 0x{int(refs[arith][tuple(bad[0])]):04X})"
        )
        nan = (out & 0x7FFF) > 0x7F80
        assert (out[nan] == CANONICAL_NAN).all(), f"{kind} {entry}: non-canonical NaN"


@pytest.mark.parametrize("backend_name", lc.BACKENDS)
@pytest.mark.parametrize(("kind", "modes"), KINDS, ids=[k for k, _ in KINDS])
@SETTINGS
@given(data=st.data())
def test_row_r_of_m_rows_is_the_one_row_call(
    kind: str, modes: tuple[str, ...], backend_name: str, data: st.DataObject
) -> None:
    mode = data.draw(st.sampled_from(modes), label="mode")
    dims = data.draw(Q2_DIMS if kind == "q2" else DIMS, label="hidden, inter")
    m = data.draw(st.sampled_from(M_CHOICES), label="m")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    nonfinite = data.draw(st.booleans(), label="nonfinite")
    check_invariance(backend_name, kind, mode, dims, m, seed, nonfinite)


@pytest.mark.parametrize("backend_name", lc.BACKENDS)
@pytest.mark.parametrize("kind", ["nvfp4_a4", "q2", "w8a8_only"])
def test_invariance_at_64_rows_with_every_edge_row(kind: str, backend_name: str) -> None:
    """The fixed worst case: 64 rows, every named edge row present, every mode."""
    modes = lc.WEIGHT_QUANT_MODES if kind in lc.A4_KINDS else ("w4a4",)
    for mode in modes:
        check_invariance(backend_name, kind, mode, lc.default_shape(kind), 64, 1, True)


def test_nan_rows_give_canonical_nan() -> None:
    """A NaN input row gives an all-NaN output row, bits 0x7FC0, and leaves the others alone."""
    hidden, inter = lc.default_shape("nvfp4")
    layer = lc.make_parts("nvfp4", hidden, inter, 2).layer(lc.backend_for("reference"))
    x = lc.random_rows(np.random.default_rng(0), 4, hidden)
    x[1, 5] = np.nan
    out = lc.bits(layer(x))
    assert (out[1] == CANONICAL_NAN).all()
    assert not ((out[[0, 2, 3]] & 0x7FFF) > 0x7F80).any()
