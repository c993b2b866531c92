"""metrale.hf on tiny random Llama / Qwen3 / Gemma models built from configs (no downloads)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import TINY, tiny_model
from metrale.errors import MetraleError
from metrale.hf import replace_mlps
from metrale.torch import MetraleFfn
from tests.helpers import kv_cache
from tests.layer_cases import A4_FFN


def _ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (1, n), generator=torch.Generator().manual_seed(seed))


def _record(model: torch.nn.Module) -> tuple[dict[int, list], list]:
    rec: dict[int, list] = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):

        def f(mod, args, out, i=i):
            rec.setdefault(i, []).append((args[0].detach().clone(), out.detach().clone()))

        hooks.append(layer.mlp.register_forward_hook(f))
    return rec, hooks


def _i16(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize(
    ("family", "fmt", "n"),
    [("llama", "nvfp4", 40), ("llama", "w8a8", 9), ("qwen3", "w4a4", 7), ("gemma", "nvfp4", 7)],
)
def test_prefill_mlps_equal_token_by_token_decode(family: str, fmt: str, n: int) -> None:
    """End-to-end batch invariance: every MLP output of an n-token prefill has the bits of the
    same position's MLP output when the prompt is decoded one token at a time.

    torch's bf16 attention is not batch-invariant (the MLP inputs of the two runs can differ in
    the last bit), so the decode run's MLP input hook checks its input is the same position's
    (close to the prefill's) and hands the MLP the prefill's exact row."""
    from transformers import DynamicCache

    model = tiny_model(family)
    ids = _ids(n, 3)
    replace_mlps(model, fmt, calibration=ids)
    mlps = [layer.mlp for layer in model.model.layers]
    assert all(isinstance(m, MetraleFfn) for m in mlps)
    rec, hooks = _record(model)
    with torch.no_grad():
        model(ids, use_cache=True)
    prefill = {i: v[0] for i, v in rec.items()}
    rec.clear()
    step = [0]

    def pin(mod, args, i):
        x = prefill[i][0][:, step[0] : step[0] + 1]
        assert (args[0].float() - x.float()).abs().max() <= 0.02 * x.float().abs().max()
        return (x.clone(),)

    hooks += [m.register_forward_pre_hook(lambda mod, a, i=i: pin(mod, a, i)) for i, m in enumerate(mlps)]
    cache = DynamicCache()
    with torch.no_grad():
        for t in range(n):
            step[0] = t
            model(ids[:, t : t + 1], **kv_cache(model, cache), use_cache=True)
    for h in hooks:
        h.remove()
    for i, (xp, yp) in prefill.items():
        assert xp.shape == (1, n, TINY["hidden_size"]) and len(rec[i]) == n
        for t in range(n):
            xd, yd = rec[i][t]
            assert torch.equal(_i16(xp[0, t]), _i16(xd[0, 0]))
            assert torch.equal(_i16(yp[0, t]), _i16(yd[0, 0])), f"layer {i} position {t}: MLP output differs"


@pytest.mark.parametrize("fmt", ["nvfp4", "w8a8", "fp8", "q2_0"])
def test_checkpoint_equals_on_the_fly(tmp_path, fmt: str) -> None:
    model = tiny_model("llama", seed=1)
    src, dst = tmp_path / "src", tmp_path / "dst"
    model.save_pretrained(src)
    convert_checkpoint(src, dst, ConvertOptions(format=fmt))
    a = replace_mlps(tiny_model("llama", seed=1), fmt)
    b = replace_mlps(model, dst)
    sa, sb = a.state_dict(), b.state_dict()
    mlp_keys = [k for k in sa if ".mlp." in k]
    assert mlp_keys and sorted(sa) == sorted(sb)
    for k in mlp_keys:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k
    ids = _ids(5, 4)
    with torch.no_grad():
        assert torch.equal(_i16(a(ids).logits), _i16(b(ids).logits))


def test_quantized_model_tracks_bf16() -> None:
    """The W8A8 model's logits stay near the bf16 model's (a sanity bound, not the contract)."""
    model = tiny_model("qwen3")
    ids = _ids(6, 5)
    with torch.no_grad():
        ref = model(ids).logits.float()
        out = replace_mlps(model, "w8a8")(ids).logits.float()
    assert (out - ref).abs().max() < 0.05 * ref.abs().max()
    assert not torch.equal(out, ref)


def test_replace_mlps_errors(tmp_path) -> None:
    model = tiny_model("llama")
    with pytest.raises(MetraleError, match=r"not a format .* and no such checkpoint"):
        replace_mlps(model, "nvfp5")
    with pytest.raises(MetraleError, match="w4a4 needs calibration"):
        replace_mlps(model, "w4a4")
    other = tiny_model("gemma")
    other.save_pretrained(tmp_path / "g")
    convert_checkpoint(tmp_path / "g", tmp_path / "gq", ConvertOptions(format="nvfp4"))
    with pytest.raises(MetraleError, match="activation gelu, the model's is silu"):
        replace_mlps(model, tmp_path / "gq")
    model.config.hidden_act = "relu"
    with pytest.raises(MetraleError, match="activation 'relu' is not supported"):
        replace_mlps(model, "nvfp4")
    model.config.hidden_act = "silu"
    replace_mlps(model, "bf16")
    with pytest.raises(MetraleError, match="already a MetraleFfn"):
        replace_mlps(model, "bf16")


def test_whole_model_compiles_fullgraph() -> None:
    """The custom op traces: the whole model under torch.compile(fullgraph=True) (aot_eager, so
    the ops around the FFN stay torch's eager kernels) gives the eager logits' bits."""
    torch._dynamo.reset()
    model = replace_mlps(tiny_model("llama"), "w4a4", calibration=_ids(6, 7))
    ids = _ids(6, 8)
    with torch.no_grad():
        eager = model(ids).logits
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(ids).logits
    assert torch.equal(_i16(eager), _i16(compiled))


def test_rewound_static_cache_step_repeats_bits() -> None:
    """What a replayed CUDA graph of a decode step does, on CPU: the same step (rewound to its
    position each time) gives the bits of the eager step on a cache that advanced normally."""
    from transformers import StaticCache

    from metrale.hf import rewind_static_cache

    model = replace_mlps(tiny_model("llama"), "nvfp4")
    prompt = _ids(5, 9)
    caches = [StaticCache(config=model.config, max_cache_len=16) for _ in range(2)]
    tok = torch.zeros(1, 1, dtype=torch.long)
    pos = torch.tensor([5])
    with torch.no_grad():
        for c in caches:
            model(prompt, **kv_cache(model, c), use_cache=True, cache_position=torch.arange(5))
        for _ in range(3):  # warm-up calls of the "graph" advance nothing once rewound
            rewind_static_cache(caches[1], pos)
            model(tok, **kv_cache(model, caches[1]), use_cache=True, cache_position=pos)
        for t in range(5, 12):
            nxt = _ids(1, t)
            at = torch.tensor([t])
            eager = model(nxt, **kv_cache(model, caches[0]), use_cache=True, cache_position=at).logits
            tok.copy_(nxt)
            pos.fill_(t)
            rewind_static_cache(caches[1], pos)
            out = model(tok, **kv_cache(model, caches[1]), use_cache=True, cache_position=pos).logits
            assert torch.equal(_i16(out), _i16(eager)), t


def test_w4a4_replacement_runs_a4_at_every_row_count() -> None:
    """replace_mlps(..., "w4a4") gives MetraleFfn modules on the ``w4a4-all`` tier: a 65-row
    prefill of one runs the A4 kernels, as its decode rows do."""
    model = replace_mlps(tiny_model("qwen3"), "w4a4", calibration=_ids(6, 7))
    mlps = [m for m in model.modules() if isinstance(m, MetraleFfn)]
    assert mlps and all(m.weight_quant == "w4a4-all" for m in mlps)
    h = mlps[0].config.hidden_size
    x = torch.randn(65, h, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    mlps[0](x)
    layer = mlps[0].layer_for(x.device, 65)[0]
    assert layer.backend.launches[-6:] == A4_FFN
