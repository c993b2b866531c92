"""metrale.torch / metrale.hf on CUDA: MetraleFfn gives the reference's bits, on torch's current
stream, under torch.compile and inside a CUDA graph of a whole decoder step."""

from __future__ import annotations

import pytest
import torch

from metrale.checkpoint.example import TINY, tiny_model
from metrale.errors import MetraleError
from metrale.reference.context import FfnConfig
from metrale.torch import MetraleFfn
from tests.helpers import kv_cache
from tests.test_torch_ffn import _weights

if not torch.cuda.is_available():  # pragma: no cover - the GPU machine has CUDA torch
    pytest.skip("torch has no CUDA here (install a CUDA build of torch)", allow_module_level=True)

H, INTER = 64, 128
FORMATS = ["nvfp4", "w4a4", "w8a8", "q2_0", "fp8", "bf16"]
ROWS = [1, 2, 3, 4, 5, 8, 16, 31, 33, 64, 70]


def _i16(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def _x(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(torch.bfloat16)


@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_bit_equal_to_cpu_reference(fmt: str) -> None:
    mod = MetraleFfn.from_weights(FfnConfig(H, INTER), _weights(fmt, 11), "silu")
    xs = [_x((m, H), m) for m in ROWS] + [_x((2, 3, H), 99)]
    want = [_i16(mod(x)) for x in xs]  # CPU: the numpy reference
    mod.cuda()
    for x, w in zip(xs, want, strict=True):
        y = mod(x.cuda())
        assert y.device.type == "cuda" and y.shape == x.shape
        assert torch.equal(_i16(y).cpu(), w), (fmt, tuple(x.shape))
    with pytest.raises(MetraleError, match="the module's weights on cuda"):
        mod(xs[0])


def test_non_default_stream() -> None:
    """x is produced by slow work on a side stream and consumed there: metrale must launch on that
    stream (a launch on another stream would read x before the work wrote it)."""
    mod = MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("w4a4", 12), "silu")
    x0 = _x((5, H), 3)
    want = _i16(mod(x0))
    mod.cuda()
    mod(x0.cuda())  # build and compile outside the timed stream
    torch.cuda.synchronize()
    big = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # big exists before s uses it
    with torch.cuda.stream(s):
        acc = big
        for _ in range(30):  # ~ms of work before x exists
            acc = (acc @ big) * 0.0
        x = acc[:5, :H] + x0.cuda()
        y = mod(x)
        z = y.clone()
    s.synchronize()
    assert torch.equal(_i16(z).cpu(), want)


def test_cupy_stream_is_torchs_stream() -> None:
    """The CuPy stream metrale launches on is torch's current stream itself (the CUDA stream
    protocol on CuPy 14 with this torch, no deprecated ``ExternalStream``)."""
    import warnings

    import cupy

    from metrale.cuda.torch_stream import cupy_stream

    s = torch.cuda.Stream()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        cs = cupy_stream(s, torch.cuda.current_device())
    assert cs.ptr == s.cuda_stream
    with cupy.cuda.Device(torch.cuda.current_device()), cs:
        assert cupy.cuda.get_current_stream().ptr == s.cuda_stream


def test_compile_fullgraph_equals_eager_cuda() -> None:
    """Inductor around the op, and the whole model traced in one graph (aot_eager keeps torch's
    eager kernels for the non-FFN ops, whose inductor fusions change their bits)."""
    pytest.importorskip("transformers")
    from metrale.hf import replace_mlps

    torch._dynamo.reset()
    mod = MetraleFfn.from_weights(FfnConfig(H, INTER), _weights("w4a4", 13), "silu").cuda()

    def f(x: torch.Tensor) -> torch.Tensor:
        return mod(x * 2) + x

    cf = torch.compile(f, fullgraph=True, dynamic=False)
    for shape in ((1, 1, H), (1, 4, H), (2, 40, H)):
        x = _x(shape, shape[1]).cuda()
        assert torch.equal(_i16(cf(x)), _i16(f(x))), shape
    model = tiny_model("llama").cuda()
    replace_mlps(model, "nvfp4")
    ids = torch.randint(0, TINY["vocab_size"], (1, 6), device="cuda")
    with torch.no_grad():
        eager = model(ids).logits
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(ids).logits
        torch.compile(model, fullgraph=True)(ids)  # inductor: traces and runs without a graph break
    assert torch.equal(_i16(eager), _i16(compiled))


@pytest.mark.parametrize("fmt", ["nvfp4", "w4a4", "w8a8"])
def test_cuda_mlps_equal_cpu_and_prefill_equals_decode(fmt: str) -> None:
    """Every MLP call of a CUDA prefill and token-by-token decode gives the CPU reference's bits
    for its recorded input, and the decode rows equal the prefill rows for the same input."""
    pytest.importorskip("transformers")
    from transformers import DynamicCache

    from metrale.hf import replace_mlps

    n = 12
    model = tiny_model("qwen3").cuda()
    ids = torch.randint(0, TINY["vocab_size"], (1, n), device="cuda")
    replace_mlps(model, fmt, calibration=ids)
    rec: list[tuple[int, torch.Tensor, torch.Tensor]] = []
    hooks = [
        layer.mlp.register_forward_hook(lambda m, a, o, i=i: rec.append((i, a[0].clone(), o.clone())))
        for i, layer in enumerate(model.model.layers)
    ]
    with torch.no_grad():
        model(ids)
        cache = DynamicCache()
        for t in range(n):
            model(ids[:, t : t + 1], **kv_cache(model, cache), use_cache=True)
    for h in hooks:
        h.remove()
    cpu_mlps = [  # CPU copies of the CUDA modules' weights: the numpy reference
        MetraleFfn.from_weights(m.config, m.host_weights(), m.activation)
        for m in (layer.mlp for layer in model.model.layers)
    ]
    for i, x, y in rec:
        assert torch.equal(_i16(cpu_mlps[i](x.cpu())), _i16(y).cpu())
    # the prefill rows, each run alone through the CUDA module, keep their bits
    for i, x, y in rec[: len(model.model.layers)]:
        mlp = model.model.layers[i].mlp
        for t in range(n):
            assert torch.equal(_i16(mlp(x[:, t : t + 1])), _i16(y[:, t : t + 1]))


@pytest.mark.parametrize("fmt", ["nvfp4", "w4a4", "w8a8"])
def test_cuda_graph_of_a_decoder_step(fmt: str) -> None:
    """A whole decode step (all layers, StaticCache, SDPA) captured once and replayed gives the
    eager step's logits bit for bit, step after step."""
    pytest.importorskip("transformers")
    from transformers import StaticCache

    from metrale.hf import replace_mlps, rewind_static_cache

    model = tiny_model("llama").cuda()
    prompt = torch.randint(0, TINY["vocab_size"], (1, 5), device="cuda")
    replace_mlps(model, fmt, calibration=prompt)
    caches = [StaticCache(config=model.config, max_cache_len=32) for _ in range(2)]
    with torch.no_grad():
        for c in caches:
            model(prompt, **kv_cache(model, c), use_cache=True, cache_position=torch.arange(5, device="cuda"))
        tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")
        pos = torch.tensor([5], device="cuda")

        def step() -> torch.Tensor:
            rewind_static_cache(caches[1], pos)
            return model(tok, **kv_cache(model, caches[1]), use_cache=True, cache_position=pos).logits

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step()  # warm up (builds buffers, compiles kernels) off the default stream
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = step()
        for t in range(5, 12):
            nxt = torch.randint(0, TINY["vocab_size"], (1, 1), device="cuda")
            at = torch.tensor([t], device="cuda")
            eager = model(nxt, **kv_cache(model, caches[0]), use_cache=True, cache_position=at)
            tok.copy_(nxt)
            pos.fill_(t)
            g.replay()
            assert torch.equal(_i16(out), _i16(eager.logits)), t


def test_generate_cli_on_cuda(tmp_path) -> None:
    pytest.importorskip("transformers")
    from typer.testing import CliRunner

    from metrale.cli import app
    from tests.test_cli_generate import _model_dir

    d = _model_dir(tmp_path)
    args = ["generate", str(d), "--format", "nvfp4", "--prompt", "the capital of", "-n", "6", "--compare"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, (r.output[-2000:], repr(r.exception))
    text = " ".join(r.output.split())
    assert "6 tokens on cuda, FFNs nvfp4" in text and "--compare:" in text
