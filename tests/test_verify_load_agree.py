"""verify and DenseFfnLayer.from_checkpoint apply one set of checks: every checkpoint one of
them refuses, the other refuses too, with the same message."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

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
