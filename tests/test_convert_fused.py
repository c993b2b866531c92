"""NVFP4 fused siblings (vLLM's gate_up_proj and qkv_proj) share one weight_scale_2, as ModelOpt
writes them; verify refuses siblings that do not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.io import HfFolder, SafetensorsFile, save_tensors
from metrale.checkpoint.verify import verify_path


def _amax(src: Path, name: str) -> float:
    with HfFolder(src) as f:
        return float(torch.from_numpy(np.array(f.tensor(name)).astype(np.float32)).abs().max())


def test_siblings_share_the_global_scale_and_verify_checks_it(tmp_path: Path) -> None:
    src = make_example_checkpoint(tmp_path / "src", hidden=64, intermediate=128, layers=2, shards=2)
    dst = tmp_path / "q"
    convert_checkpoint(src, dst, ConvertOptions("nvfp4"))
    got: dict[str, np.float32] = {}
    with HfFolder(dst) as f:
        for n in f.names():
            if n.endswith(".weight_scale_2"):
                got[n[: -len(".weight_scale_2")]] = np.float32(np.array(f.tensor(n)))
    for layer in (0, 1):
        p = f"model.layers.{layer}"
        for group in (
            ("mlp.gate_proj", "mlp.up_proj"),
            ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        ):
            shared = max(_amax(src, f"{p}.{m}.weight") for m in group)
            want = np.float32(torch.tensor(shared, dtype=torch.float32) / (6.0 * 448.0))
            for m in group:
                assert got[f"{p}.{m}"].view(np.uint32) == want.view(np.uint32), (p, m)
        down = np.float32(torch.tensor(_amax(src, f"{p}.mlp.down_proj.weight")) / (6.0 * 448.0))
        assert got[f"{p}.mlp.down_proj"].view(np.uint32) == down.view(np.uint32)
    res = verify_path(dst, src, exact=True)
    assert res.ok, res.violations
    # one sibling re-quantized alone: verify names the pair
    with HfFolder(dst) as f:
        shard = f.where["model.layers.1.mlp.up_proj.weight_scale_2"]
    with SafetensorsFile(dst / shard) as sf:
        t = {n: np.array(sf.tensor(n)) for n in sf.names()}
    t["model.layers.1.mlp.up_proj.weight_scale_2"] = np.float32(
        t["model.layers.1.mlp.up_proj.weight_scale_2"] * np.float32(0.5)
    )
    save_tensors(dst / shard, t, metadata={"format": "pt"})
    res = verify_path(dst)
    want = "model.layers.1.mlp.gate_proj, model.layers.1.mlp.up_proj: fused siblings have different "
    assert any(want + "weight_scale_2" in v for v in res.violations), res.violations
