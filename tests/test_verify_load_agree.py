"""verify and DenseFfnLayer.from_checkpoint apply one set of checks: every checkpoint one of
them refuses, the other refuses too, with the same message; verify fails exactly when
loading some decoder layer's FFN fails (a property over tamperings)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.io import HfFolder, SafetensorsFile, save_tensors
from metrale.checkpoint.load import load_ffn_layer
from metrale.checkpoint.verify import verify_path
from metrale.errors import MetraleError

MOD = "model.layers.1.mlp.up_proj"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("agree")
    src = make_example_checkpoint(root / "src", hidden=64, intermediate=128, layers=2, shards=2)
    out = {"src": src}
    for fmt in ("nvfp4", "fp8", "w8a8"):
        convert_checkpoint(src, root / fmt, ConvertOptions(fmt))
        out[fmt] = root / fmt
    return out


def _edit(d: Path, fn: Callable[[dict[str, np.ndarray]], None]) -> None:
    with HfFolder(d) as f:
        shard = f.where[f"{MOD}.weight"]
    with SafetensorsFile(d / shard) as sf:
        t = {n: np.array(sf.tensor(n)) for n in sf.names()}
    fn(t)
    save_tensors(d / shard, t, metadata={"format": "pt"})
    idx = d / "model.safetensors.index.json"
    if idx.exists():
        body = json.loads(idx.read_text())
        body["weight_map"] = {k: v for k, v in body["weight_map"].items() if k in _all_names(d)}
        for n in t:
            body["weight_map"][n] = shard
        idx.write_text(json.dumps(body))


def _all_names(d: Path) -> set[str]:
    names: set[str] = set()
    for p in d.glob("*.safetensors"):
        with SafetensorsFile(p) as sf:
            names |= set(sf.names())
    return names


def _cfg(d: Path, **kv: object) -> None:
    cfg = json.loads((d / "config.json").read_text())
    for k, v in kv.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))


CASES: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "no weight_scale_2": (
        "nvfp4",
        lambda d: _edit(d, lambda t: t.pop(f"{MOD}.weight_scale_2")),
        "weight_scale_2",
    ),
    "weight_scale as F32": (
        "nvfp4",
        lambda d: _edit(
            d, lambda t: t.update({f"{MOD}.weight_scale": t[f"{MOD}.weight_scale"].astype(np.float32)})
        ),
        "weight_scale",
    ),
    "weight_scale_2 = -1": (
        "nvfp4",
        lambda d: _edit(d, lambda t: t.update({f"{MOD}.weight_scale_2": np.array(-1.0, np.float32)})),
        r"weight_scale_2 = -1\.0: want a finite number > 0",
    ),
    "input_scale on one module": (
        "nvfp4",
        lambda d: _edit(d, lambda t: t.update({f"{MOD}.input_scale": np.array(0.01, np.float32)})),
        r"input_scale on .*up_proj but not on .*gate_proj",
    ),
    "zero row scale": (
        "fp8",
        lambda d: _edit(d, lambda t: t[f"{MOD}.weight_scale"].__setitem__((3, 0), 0.0)),
        r"weight_scale: row 3 scale 0\.0: want a finite number > 0",
    ),
    "negative row scale": (
        "w8a8",
        lambda d: _edit(d, lambda t: t[f"{MOD}.weight_scale"].__setitem__((0, 0), -2.0)),
        r"weight_scale: row 0 scale -2\.0: want a finite number > 0",
    ),
    "config.json missing": ("fp8", lambda d: (d / "config.json").unlink(), r"config\.json"),
    "wrong intermediate_size": ("fp8", lambda d: _cfg(d, intermediate_size=256), r"want gate/up \[256, 64\]"),
    "hidden_act relu": ("w8a8", lambda d: _cfg(d, hidden_act="relu"), r"hidden_act 'relu'"),
    "layer 1 without its FFN": (
        "nvfp4",
        lambda d: _edit(d, lambda t: [t.pop(n) for n in list(t) if ".layers.1.mlp." in n]),
        r"config\.json: num_hidden_layers 2 but layer 1 has no FFN tensors \(.*layers\.1\.mlp\.\*\)",
    ),
    "num_hidden_layers 10 over 2 layers": (
        "nvfp4",
        lambda d: _cfg(d, num_hidden_layers=10),
        r"config\.json: num_hidden_layers 10 but the tensors hold decoder layers 0-1",
    ),
    "hidden_size a string": (
        "fp8",
        lambda d: _cfg(d, hidden_size="64"),
        r"config\.json: hidden_size '64' is a str, want a positive integer",
    ),
    "intermediate_size a bool": (
        "w8a8",
        lambda d: _cfg(d, intermediate_size=True),
        r"config\.json: intermediate_size True is a bool, want a positive integer",
    ),
    "no weight_scale": (
        "nvfp4",
        lambda d: _edit(d, lambda t: t.pop(f"{MOD}.weight_scale")),
        rf"{MOD}: NVFP4 weight \(U8\) without {MOD}\.weight_scale \(F8_E4M3\)",
    ),
    "weight relabelled I8": (
        "nvfp4",
        lambda d: _edit(d, lambda t: t.update({f"{MOD}.weight": t[f"{MOD}.weight"].view(np.int8)})),
        rf"{MOD}\.weight: I8, but weight_scale F8_E4M3, weight_scale_2 F32 are NVFP4's \(want U8\)",
    ),
    "fp8 weight relabelled U8": (
        "fp8",
        lambda d: _edit(d, lambda t: t.update({f"{MOD}.weight": t[f"{MOD}.weight"].view(np.uint8)})),
        rf"{MOD}\.weight: U8, but weight_scale F32 is FP8's or W8A8's \(want F8_E4M3 or I8\)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_verify_and_loader_refuse_alike(built: dict[str, Path], tmp_path: Path, case: str) -> None:
    fmt, mutate, match = CASES[case]
    d = tmp_path / "c"
    shutil.copytree(built[fmt], d)
    mutate(d)
    with pytest.raises(MetraleError, match=match):
        load_ffn_layer(d, layer=1, backend="reference")
    res = verify_path(d)
    assert not res.ok and any(__import__("re").search(match, v) for v in res.violations), res.violations
    res = verify_path(d, built["src"], exact=True)
    assert not res.ok


def test_inf_in_a_fused_source_weight_names_that_tensor(built: dict[str, Path], tmp_path: Path) -> None:
    """NVFP4 siblings share one amax: an Inf in q_proj is q_proj's error, not k_proj's."""
    src = tmp_path / "s"
    shutil.copytree(built["src"], src)
    q = "model.layers.0.self_attn.q_proj.weight"
    with HfFolder(src) as f:
        shard = f.where[q]
    with SafetensorsFile(src / shard) as sf:
        t = {n: np.array(sf.tensor(n)) for n in sf.names()}
    t[q][3, 5] = np.inf
    save_tensors(src / shard, t, metadata={"format": "pt"})
    want = rf"{q}: non-finite weight inf at \[3, 5\] \(1 in all\)"
    with pytest.raises(MetraleError, match=want):
        convert_checkpoint(src, tmp_path / "o", ConvertOptions("nvfp4"))
    with pytest.raises(MetraleError, match=want):
        verify_path(built["nvfp4"], src, exact=True)


def test_against_fails_when_a_source_ffn_weight_has_no_output(built: dict[str, Path], tmp_path: Path) -> None:
    d = tmp_path / "c"
    shutil.copytree(built["fp8"], d)
    src = tmp_path / "s"
    shutil.copytree(built["src"], src)
    # SRC grows a third layer's FFN that DST never got
    with HfFolder(src) as f:
        shard = f.where["model.layers.1.mlp.down_proj.weight"]
    with SafetensorsFile(src / shard) as sf:
        t = {n: np.array(sf.tensor(n)) for n in sf.names()}
    t["model.layers.2.mlp.down_proj.weight"] = t["model.layers.1.mlp.down_proj.weight"]
    save_tensors(src / shard, t, metadata={"format": "pt"})
    body = json.loads((src / "model.safetensors.index.json").read_text())
    body["weight_map"]["model.layers.2.mlp.down_proj.weight"] = shard
    (src / "model.safetensors.index.json").write_text(json.dumps(body))
    res = verify_path(d, src)
    assert any(
        "model.layers.2.mlp.down_proj.weight: SRC FFN weight without a counterpart" in v
        for v in res.violations
    )


# ---- the rule as a property: verify fails exactly when loading some layer's FFN fails ----
def _drop(mod: str, suffix: str) -> Callable[[Path], None]:
    return lambda d: _edit_any(d, lambda t: t.pop(f"{mod}.{suffix}", None))


def _relabel(mod: str, dtype: type) -> Callable[[Path], None]:
    def go(t: dict[str, np.ndarray]) -> None:
        if f"{mod}.weight" in t:
            t[f"{mod}.weight"] = t[f"{mod}.weight"].view(dtype)

    return lambda d: _edit_any(d, go)


def _scale(mod: str, suffix: str, value: float) -> Callable[[Path], None]:
    """The first element of a scale set to ``value`` (0, negative, NaN, Inf) or, for a
    positive finite ``value``, multiplied by it (still a valid scale)."""

    def go(t: dict[str, np.ndarray]) -> None:
        a = t.get(f"{mod}.{suffix}")
        if a is not None:
            b = a.astype(np.float32)
            flat = b.reshape(-1)
            flat[0] = flat[0] * value if np.isfinite(value) and value > 0 else value
            t[f"{mod}.{suffix}"] = b.astype(a.dtype)

    return lambda d: _edit_any(d, go)


def _edit_any(d: Path, fn: Callable[[dict[str, np.ndarray]], None]) -> None:
    """``fn`` over every shard's tensors (the index follows)."""
    where = {}
    for shard in sorted(d.glob("*.safetensors")):
        with SafetensorsFile(shard) as sf:
            t = {n: np.array(sf.tensor(n)) for n in sf.names()}
        fn(t)
        save_tensors(shard, t, metadata={"format": "pt"})
        where.update(dict.fromkeys(t, shard.name))
    idx = d / "model.safetensors.index.json"
    if idx.exists():
        body = json.loads(idx.read_text())
        body["weight_map"] = where
        idx.write_text(json.dumps(body))


def _input_scale(mod: str) -> dict[str, np.ndarray]:
    return {f"{mod}.input_scale": np.array(0.01, np.float32)}


def _tamperings(layer: int, proj: str) -> list[Callable[[Path], None]]:
    mod = f"model.layers.{layer}.mlp.{proj}"
    return [
        _drop(mod, "weight"),
        _drop(mod, "weight_scale"),
        _drop(mod, "weight_scale_2"),
        _relabel(mod, np.int8),
        _relabel(mod, np.uint8),
        _scale(mod, "weight_scale_2", float("inf")),
        _scale(mod, "weight_scale_2", float("nan")),
        _scale(mod, "weight_scale_2", -1.0),
        _scale(mod, "weight_scale", 0.0),
        _scale(mod, "weight_scale", float("nan")),
        _scale(mod, "weight_scale", 2.0),  # a valid scale (down_proj's alone: no sibling rule)
        lambda d: _edit_any(d, lambda t: [t.pop(n) for n in list(t) if f".layers.{layer}.mlp." in n]),
        lambda d: _edit_any(d, lambda t: [t.pop(n) for n in list(t) if f".layers.{layer}." in n]),
        lambda d: _edit_any(
            d,
            lambda t: t.update(
                {f"{mod}.input_scale": np.array(0.01, np.float32)} if f"{mod}.weight" in t else {}
            ),
        ),
        lambda d: _cfg(d, num_hidden_layers=layer + 1),
        lambda d: _cfg(d, num_hidden_layers=2),  # harmless: what it was
        lambda d: _cfg(d, num_hidden_layers=None),  # harmless: optional
        lambda d: _cfg(d, num_hidden_layers=str(2)),
        lambda d: _cfg(d, hidden_size="64"),
        lambda d: _cfg(d, hidden_size=64.0),
        lambda d: _cfg(d, hidden_size=None),
        lambda d: _cfg(d, intermediate_size=False),
        lambda d: _cfg(d, intermediate_size=256),
        lambda d: _cfg(d, hidden_act="relu"),
        lambda d: _cfg(d, hidden_act="gelu"),  # harmless
        lambda d: _cfg(d, bos_token_id=7),  # harmless
    ]


def _loads_every_layer(d: Path) -> bool:
    cfg = json.loads((d / "config.json").read_text())
    n = cfg.get("num_hidden_layers")
    count = max(2, n) if isinstance(n, int) and not isinstance(n, bool) else 2
    try:
        for i in range(count):
            load_ffn_layer(d, layer=i, backend="reference")
    except MetraleError:
        return False
    return True


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fmt=st.sampled_from(["nvfp4", "fp8", "w8a8"]),
    layer=st.integers(0, 1),
    proj=st.sampled_from(["down_proj", "gate_proj"]),
    which=st.integers(0, len(_tamperings(0, "gate_proj")) - 1),
)
def test_verify_fails_exactly_when_loading_fails(
    built: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    fmt: str,
    layer: int,
    proj: str,
    which: int,
) -> None:
    if proj == "gate_proj" and which == 10:
        proj = "down_proj"  # a gate scale changed alone breaks the fused-sibling rule (verify only)
    d = tmp_path_factory.mktemp("t") / "c"
    shutil.copytree(built[fmt], d)
    _tamperings(layer, proj)[which](d)
    res = verify_path(d)
    assert res.ok == _loads_every_layer(d), res.violations
