"""The README's Python example runs as written (on the reference backend here)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs(monkeypatch) -> None:
    monkeypatch.setenv("METRALE_BACKEND", "reference")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "README has no python example"
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # its asserts are the checks
    assert namespace["y"].shape == (5, 64)


def test_readme_hf_recipe_runs(monkeypatch) -> None:
    """The three-line transformers recipe, with from_pretrained handing back a tiny local model."""
    import transformers

    from metrale.torch import MetraleFfn
    from tests.torch_models import tiny_model

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    block = next(b for b in blocks if "replace_mlps" in b)
    assert len(block.strip().splitlines()) == 3
    fake = lambda *a, **k: tiny_model("qwen3")  # noqa: E731
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake)
    namespace: dict[str, object] = {}
    exec(compile(block, str(README), "exec"), namespace)
    model = namespace["model"]
    assert all(isinstance(layer.mlp, MetraleFfn) for layer in model.model.layers)
