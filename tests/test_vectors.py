"""The bit-exactness vectors ``tests/vectors/*.npz`` (arithmetic.md § vectors), on every backend.

Each vector is rebuilt from its stored raw tensors and inputs, the named entry point or kernel
runs on the ``backend_name`` backend with sentinel guard bands below the m rows, and the
output must equal the stored bits exactly (uint16), the guard rows must survive. The set of
files must be exactly what ``tools/make_vectors.py`` writes.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import layer_cases as lc
import numpy as np
import pytest
from helpers import assert_bits_equal

from metrale.reference.formats import FORMATS
from metrale.reference.lora import LoraAdapter

ROOT = Path(__file__).resolve().parents[1]
VECTOR_DIR = ROOT / "tests" / "vectors"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_vectors", ROOT / "tools" / "make_vectors.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()
NAMES: list[str] = TOOL.vector_names()


@cache
def load(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, meta) of one vector file."""
    with np.load(VECTOR_DIR / name, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, json.loads(str(arrays.pop("meta")))


def _cases(prefix: str) -> list[tuple[str, int]]:
    """(file, m) of every stored m of the vectors whose name starts with ``prefix``."""
    out = []
    for name in NAMES:
        if name.startswith(prefix) and (VECTOR_DIR / name).exists():
            out += [(name, m) for m in load(name)[1]["ms"]]
    return out


def _ids(case: tuple[str, int]) -> str:
    return f"{case[0][:-4]}-m{case[1]}"


def test_vector_files_are_exactly_the_tools() -> None:
    present = sorted(p.name for p in VECTOR_DIR.glob("*.npz"))
    assert present == sorted(NAMES), "run tools/make_vectors.py: the vector set differs from the tool's"
    assert len(NAMES) == 99


def test_tool_check_recomputes_every_vector() -> None:
    assert TOOL.check(VECTOR_DIR) == []


@pytest.mark.parametrize("backend_name", lc.BACKENDS)
@pytest.mark.parametrize("case", _cases("layer-"), ids=_ids)
def test_layer_vector(case: tuple[str, int], backend_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name, m = case
    arrays, meta = load(name)
    monkeypatch.setenv("METRALE_WEIGHT_QUANT", meta["env_mode"])
    lc.weight_quantization.cache_clear()
    layer = lc.parts_from_tensors(arrays, meta).layer(lc.backend_for(backend_name))
    x = lc.from_bits(arrays["x_pool"])[arrays[f"rows_m{m}"]]
    got = lc.run_guarded(layer, meta["entry"], x)
    assert_bits_equal(got, arrays[f"out_m{m}"], f"{name} m={m}")


def _proj_weight(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Any:
    cls = FORMATS[meta["format"]].weight_type
    kw = {k[2:]: lc.decode_tensor(arrays, meta["dtypes"], k) for k in arrays if k.startswith("w.")}
    assert cls.__name__ == meta["weight_class"]
    return cls(**kw, name="proj")


@pytest.mark.parametrize("backend_name", lc.BACKENDS)
@pytest.mark.parametrize("case", _cases("proj-"), ids=_ids)
def test_projection_vector(case: tuple[str, int], backend_name: str) -> None:
    name, m = case
    arrays, meta = load(name)
    w = _proj_weight(arrays, meta)
    x = lc.from_bits(arrays["x_pool"])[arrays[f"rows_m{m}"]]
    kernels = meta["kernels"][str(m)]
    assert tuple(kernels) == lc.projection_kernels(meta["format"], meta["mode"], m)
    backend = lc.backend_for(backend_name)
    for kernel in kernels:
        for i, got in enumerate(lc.run_projection(backend, kernel, x, w)):
            assert_bits_equal(got, arrays[f"out_m{m}"], f"{name} m={m} {kernel} output {i}")


@pytest.mark.parametrize("backend_name", lc.BACKENDS)
@pytest.mark.parametrize("case", _cases("lora-"), ids=_ids)
def test_lora_vector(case: tuple[str, int], backend_name: str) -> None:
    name, m = case
    arrays, meta = load(name)
    ad = LoraAdapter(
        **{f: lc.decode_tensor(arrays, meta["dtypes"], f"lora.{f}") for f in ("a", "b", "scale")}
    )
    rows = arrays[f"rows_m{m}"]
    x = lc.from_bits(arrays["x_pool"])[rows]
    base = lc.from_bits(arrays["base_pool"])[rows]
    t, out = lc.run_lora(lc.backend_for(backend_name), x, ad, base)
    assert_bits_equal(t, arrays[f"t_m{m}"], f"{name} m={m} lora_shrink")
    assert_bits_equal(out, arrays[f"out_m{m}"], f"{name} m={m} lora_expand")


@pytest.mark.parametrize("backend_name", lc.BACKENDS)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_act_mul_vector(activation: str, in_place: bool, backend_name: str) -> None:
    arrays, meta = load(f"act-{activation}.npz")
    assert meta["activation"] == activation
    gate, up = lc.from_bits(arrays["gate"]), lc.from_bits(arrays["up"])
    assert np.array_equal(np.sort(arrays["gate"].reshape(-1)), np.arange(65536, dtype=np.uint16))
    got = lc.run_act_mul(lc.backend_for(backend_name), activation, gate, up, in_place)
    assert_bits_equal(got, arrays["out_m64"], f"act_mul_{activation}")


def test_vectors_cover_the_contract() -> None:
    """Every format × mode × entry point and every m of arithmetic.md § checks has a vector."""
    entries: set[tuple[str, str, str]] = set()
    ms: set[int] = set()
    for name in NAMES:
        meta = load(name)[1]
        if meta["vector"] == "layer":
            entries.add((meta["layer_kind"], meta["env_mode"], meta["entry"]))
            ms.update(meta["ms"])
    assert ms == set(lc.ALL_M)
    for kind in lc.LAYER_KINDS:
        for mode in TOOL.layer_modes(kind):
            for entry in lc.entry_ms(kind, mode):
                assert (kind, mode, entry) in entries
    assert {e for _, _, e in entries} == set(lc.ENTRY_POINTS)
    projs = {(load(n)[1]["format"], load(n)[1]["mode"]) for n in NAMES if n.startswith("proj-")}
    assert projs == set(lc.PROJECTION_MODES)


def test_projection_vectors_hold_every_code() -> None:
    """The NVFP4 scales and the FP8 weights hold every non-NaN e4m3 code, the NVFP4 weights
    every e2m1 nibble, the W8A8 weights every int8 code (at K = 1040)."""
    codes = {}
    for fmt, mode in lc.PROJECTION_MODES:
        arrays, _ = load(f"proj-{fmt}-{mode}-37x{1088 if fmt == 'q2_0' else 1040}.npz")
        codes[fmt, mode] = arrays
    e4m3 = set(lc.E4M3_CODES.tolist())
    assert set(codes["nvfp4", "A16"]["w.weight_scale"].reshape(-1).tolist()) == e4m3
    assert set(codes["fp8", "A16"]["w.weight"].reshape(-1).tolist()) == e4m3
    packed = codes["nvfp4", "A16"]["w.weight"]
    assert set((packed & 15).reshape(-1).tolist()) | set((packed >> 4).reshape(-1).tolist()) == set(range(16))
    assert set(codes["w8a8", "A8"]["w.weight"].reshape(-1).tolist()) == set(range(-128, 128))
