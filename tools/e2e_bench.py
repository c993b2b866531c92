"""End-to-end decode speed of a Llama-3-8B-shaped model with metrale FFNs (GPU, CUDA graphs).

A random-weight ``LlamaForCausalLM`` (hidden 4096, intermediate 14336, 32 layers, 32/8 heads,
vocabulary 128256, SDPA attention, bf16) with a StaticCache of ``--context`` prompt positions.
For each MLP variant -- the model's bf16 MLPs, metrale NVFP4 (W4A16) / W8A8 / W4A4, and torchao
int4 weight-only where torchao imports -- one decode step (1 token) and one speculative verify
step (4 tokens) are captured as CUDA graphs and replayed; the FFNs alone (the 32 MLP calls on a
fixed input) are captured too, so the FFN's share and the time outside it come from the same
run. metrale's weights are one layer's quantized weights copied into every layer (the numpy
quantizer takes seconds per matrix); W4A4's input scales come from a fixed amax (speed only).

    python tools/e2e_bench.py --out bench-e2e      # writes e2e.json and e2e.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from metrale.checkpoint.work import quantize_array  # noqa: E402
from metrale.hf import rewind_static_cache  # noqa: E402
from metrale.reference.context import FfnConfig  # noqa: E402
from metrale.reference.elements import BF16  # noqa: E402
from metrale.reference.layer import FfnActivation  # noqa: E402
from metrale.torch import PROJS, MetraleFfn  # noqa: E402

#: W4A4 input amax per projection (gate/up see the normed hidden state, down the SiLU product).
W4A4_AMAX = (8.0, 8.0, 2.0)


def build_model(layers: int) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    return model.to(torch.bfloat16).eval()


def metrale_mlps(model: nn.Module, fmt: str) -> list[MetraleFfn]:
    """One layer's MLP quantized to ``fmt`` on the host, uploaded once per layer."""
    mlp = model.model.layers[0].mlp
    ws = []
    for j, p in enumerate(PROJS):
        w = getattr(mlp, p).weight.detach().cpu().view(torch.int16).numpy().view(BF16)
        if fmt == "w4a4":
            ws.append(quantize_array("nvfp4", w, p, input_amax=W4A4_AMAX[j]))
        else:
            ws.append(quantize_array(fmt, w, p))
    inter, hidden = mlp.gate_proj.weight.shape
    out = []
    for _ in model.model.layers:
        m = MetraleFfn.from_weights(FfnConfig(int(hidden), int(inter)), ws, FfnActivation.SiLU).to("cuda")
        out.append(m)
    return out


def time_graph(fn: Any, iters: int) -> float:
    """Capture ``fn`` as a CUDA graph (after two warm-up calls on a side stream) and return the
    median of ``iters`` replay times, in ms."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del g
    return sorted(times)[len(times) // 2]


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written), 1 GiB buffers."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = time_graph(lambda: b.copy_(a), 10)
    return 2 * a.numel() / (ms * 1e-3) / 1e9


def measure(model: nn.Module, name: str, context: int, iters: int) -> dict[str, Any]:
    from transformers import StaticCache

    out: dict[str, Any] = {"variant": name}
    vocab = model.config.vocab_size
    cache = StaticCache(config=model.config, max_cache_len=context + 8)
    prompt = torch.randint(0, vocab, (1, context), device="cuda")
    with torch.no_grad():
        model(
            prompt, past_key_values=cache, use_cache=True, cache_position=torch.arange(context, device="cuda")
        )
        for m, key in ((1, "decode"), (4, "verify4")):
            tok = torch.randint(0, vocab, (1, m), device="cuda")
            pos = torch.arange(context, context + m, device="cuda")

            def fwd(tok: torch.Tensor = tok, pos: torch.Tensor = pos) -> Any:
                rewind_static_cache(cache, pos[:1])  # every replay writes the same cache positions
                return model(tok, past_key_values=cache, use_cache=True, cache_position=pos)

            step = time_graph(fwd, iters)
            x = torch.randn(1, m, model.config.hidden_size, device="cuda", dtype=torch.bfloat16)
            mlps = [layer.mlp for layer in model.model.layers]
            ffn = time_graph(lambda x=x, mlps=mlps: [mlp(x) for mlp in mlps], iters)
            out[key] = {
                "step_ms": step,
                "tokens_per_s": m / (step * 1e-3),
                "ffn_ms": ffn,
                "ffn_share": ffn / step,
                "outside_ffn_ms": step - ffn,
            }
    return out


def weight_bytes(model: nn.Module) -> dict[str, int]:
    """bf16 weight bytes read per step: the MLPs, the rest of the decoder, the LM head."""
    mlp = sum(p.numel() * 2 for layer in model.model.layers for p in layer.mlp.parameters())
    head = model.lm_head.weight.numel() * 2
    total = sum(p.numel() * 2 for p in model.parameters()) - model.model.embed_tokens.weight.numel() * 2
    return {"mlp_bf16": mlp, "lm_head": head, "attention_and_norms": total - mlp - head}


def torchao_int4(model: nn.Module) -> str | None:
    """Quantize the MLP Linears in place to torchao int4 weight-only; None, or why it could not."""
    try:
        from torchao.quantization import Int4WeightOnlyConfig, quantize_
    except Exception as e:
        return f"torchao not importable ({type(e).__name__}: {e})"
    try:
        quantize_(
            model,
            Int4WeightOnlyConfig(group_size=128),
            filter_fn=lambda mod, fqn: isinstance(mod, nn.Linear) and ".mlp." in fqn,
        )
    except Exception as e:
        return f"torchao int4 failed ({type(e).__name__}: {e})"
    return None


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"GPU: {res['gpu']}; {res['date']}; `{res['command']}`",
        f"Model: Llama-3-8B shape, {res['layers']} layers, context {res['context']}, bf16 SDPA attention, "
        f"CUDA graphs; copy bandwidth {res['copy_gb_s']:.0f} GB/s.",
        "",
        "| MLPs | decode ms/step | decode tok/s | decode FFN ms (share) | verify-4 ms/step | "
        "verify-4 tok/s | verify-4 FFN ms (share) | outside FFN ms (decode / verify-4) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["variants"]:
        if "error" in r:
            lines.append(f"| {r['variant']} | {r['error']} |||||||")
            continue
        d, v = r["decode"], r["verify4"]
        lines.append(
            f"| {r['variant']} | {d['step_ms']:.3f} | {d['tokens_per_s']:.1f} | {d['ffn_ms']:.3f} "
            f"({100 * d['ffn_share']:.0f} %) | {v['step_ms']:.3f} | {v['tokens_per_s']:.1f} | "
            f"{v['ffn_ms']:.3f} ({100 * v['ffn_share']:.0f} %) | "
            f"{d['outside_ffn_ms']:.3f} / {v['outside_ffn_ms']:.3f} |"
        )
    wb = res["weight_bytes"]
    floor = {k: v / (res["copy_gb_s"] * 1e9 / 2) * 1e3 for k, v in wb.items()}
    lines += [
        "",
        "Outside the FFN each step reads the bf16 attention projections and norms "
        f"({wb['attention_and_norms'] / 1e9:.2f} GB, {floor['attention_and_norms']:.3f} ms at the read "
        f"bandwidth) and the LM head ({wb['lm_head'] / 1e9:.2f} GB, {floor['lm_head']:.3f} ms), plus "
        "SDPA over the cache and the small elementwise kernels; the bf16 MLPs are "
        f"{wb['mlp_bf16'] / 1e9:.2f} GB ({floor['mlp_bf16']:.3f} ms).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for e2e.json and e2e.md")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--context", type=int, default=256, help="prompt positions in the cache")
    ap.add_argument("--iters", type=int, default=50, help="graph replays per measurement")
    ap.add_argument("--formats", default="nvfp4,w8a8,w4a4", help="metrale formats, comma-separated")
    ap.add_argument("--no-torchao", action="store_true", help="skip the torchao int4 variant")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("error: tools/e2e_bench.py needs a CUDA build of torch and a GPU", file=sys.stderr)
        return 1
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("error: tools/e2e_bench.py needs transformers (pip install 'metrale[hf]')", file=sys.stderr)
        return 1
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    model = build_model(args.layers)
    original = [layer.mlp for layer in model.model.layers]
    res: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python", *sys.argv]),
        "layers": args.layers,
        "context": args.context,
        "copy_gb_s": copy_bandwidth(),
        "weight_bytes": weight_bytes(model),
        "variants": [],
    }

    def log(msg: str) -> None:
        print(f"[{time.time() - t0:6.1f} s] {msg}", flush=True)

    def run(name: str) -> None:
        try:
            res["variants"].append(measure(model, name, args.context, args.iters))
        except Exception as e:  # a capture failure is a result: say which variant and why
            res["variants"].append({"variant": name, "error": f"{type(e).__name__}: {e}"})

    log(f"model built on {res['gpu']}")
    run("bf16 (torch)")
    log("bf16 done")
    for fmt in [f for f in args.formats.split(",") if f]:
        mlps = metrale_mlps(model, fmt)
        for layer, m in zip(model.model.layers, mlps, strict=True):
            layer.mlp = m
        run(f"metrale {fmt}")
        for layer, m in zip(model.model.layers, original, strict=True):
            layer.mlp = m
        del mlps
        torch.cuda.empty_cache()
        log(f"metrale {fmt} done")
    if not args.no_torchao:
        why = torchao_int4(model)
        if why is None:
            run("torchao int4 weight-only")
        else:
            res["variants"].append({"variant": "torchao int4 weight-only", "error": why})
        log("torchao done")
    res["seconds"] = time.time() - t0
    (args.out / "e2e.json").write_text(json.dumps(res, indent=2))
    (args.out / "e2e.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
