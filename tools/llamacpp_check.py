"""Run metrale's GGUF Q2_0 output in llama.cpp itself (CPU; not part of CI: it builds llama.cpp).

    python tools/llamacpp_check.py [--work DIR] [--source LLAMA_CPP_PYTHON_SDIST_DIR] [--jobs N]

1. Source: the llama-cpp-python 0.3.36 source distribution from the package index
   (``pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36``), whose
   ``vendor/llama.cpp`` has ``GGML_TYPE_Q2_0 = 42``; its Python bindings drive the library.
2. Layout: ggml.h declares type 42, ggml-common.h's ``block_q2_0`` is ``ggml_half d`` +
   ``uint8_t qs[QK2_0/4]`` with ``QK2_0 = 64`` (metrale/reference/formats/q2_0.py).
3. Build: ``libllama`` (shared, CPU, with ``libggml-base``/``libggml-cpu``) with CMake + Ninja.
4. Bytes: ggml's ``quantize_row_q2_0_ref`` / ``dequantize_row_q2_0`` (ctypes) against metrale's
   Q2_0 quantizer and dequantizer on seeded rows and the named edge cases: equal bytes / bits.
5. Models: a tiny random Llama (Llama-3 tokenizer, ``llama3`` RoPE scaling) and a tiny Qwen3
   (head_dim 128 != hidden/heads, RoPE theta 1e6), each with a BPE tokenizer trained here
   (``metrale.checkpoint.example.make_hf_model``), converted with ``metrale convert -f q2_0``;
   where ``sentencepiece`` is installed also the Llama with a SentencePiece ``tokenizer.model``
   trained here with Llama 2's settings (``llama-spm``).
6. llama.cpp loads each GGUF; its token ids for a few strings must equal the HF tokenizer's
   (sentencepiece's, with BOS, for ``llama-spm``; its strings carry no chat markup).
7. Logits of llama.cpp against transformers (float32, eager attention) on the dequantized
   weights of the same GGUF file, and against the same with llama.cpp's activation rounding
   emulated: the input of every Q2_0 matmul quantized to Q8_0 blocks of 32 as ggml-cpu does
   (``vec_dot_type`` of Q2_0; x86 ``quantize_row_q8_0``), that of the BF16 output matmul rounded
   to bf16. llama.cpp runs with an F32 KV cache and without flash attention (whose CPU path
   rounds Q to f16), so that nothing else rounds. Per position: max |llama.cpp − emulated|.
   Pass: the first ``EXACT_PREFIX`` positions within ``FLOAT_BOUND`` (float32 summation order,
   derived in ``check_model``), and no position beyond the whole effect of the activation
   roundings, max |plain − emulated| (an empirical yardstick, not a derived bound).

Exit status 0 when every check passes (token ids equal, bytes equal, logits within the stated
bounds), 1 otherwise.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VERSION = "0.3.36"
FLOAT_BOUND = 1e-4
EXACT_PREFIX = 8
STRINGS = [
    "Hello world! It's 2026; we've 12345 tokens.",
    "The quick brown fox jumps over the lazy dog.\n\n  Indented   spaces\tand tabs.",
    "Les modèles découpent le texte: über, naïve, café — 東京 🦙",
    "<|im_start|>user\nQuantized feed-forward layers?<|im_end|>\n<|im_start|>assistant\n",
]


def log(msg: str) -> None:
    print(msg, flush=True)


def get_source(work: Path, source: Path | None) -> Path:
    """The llama-cpp-python source tree (downloaded and unpacked into ``work`` if not given)."""
    if source is not None:
        return source
    tree = work / f"llama_cpp_python-{VERSION}"
    if tree.is_dir():
        return tree
    sdist = work / f"llama_cpp_python-{VERSION}.tar.gz"
    if not sdist.is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={VERSION}",
                "-d",
                str(work),
            ],
            check=True,
        )
    with tarfile.open(sdist) as tf:
        tf.extractall(work, filter="data")
    return tree


def check_layout(vendor: Path) -> dict[str, Any]:
    """ggml's declaration of type 42 and of block_q2_0, as metrale's format has them."""
    ggml_h = (vendor / "ggml/include/ggml.h").read_text()
    common = (vendor / "ggml/src/ggml-common.h").read_text()
    t42 = re.search(r"GGML_TYPE_Q2_0\s*=\s*(\d+)", ggml_h)
    qk = re.search(r"#define\s+QK2_0\s+(\d+)", common)
    block = re.search(
        r"typedef struct \{\s*ggml_half d;[^}]*uint8_t qs\[QK2_0 / 4\];[^}]*\} block_q2_0;", common
    )
    out = {
        "GGML_TYPE_Q2_0": int(t42[1]) if t42 else None,
        "QK2_0": int(qk[1]) if qk else None,
        "block_q2_0 = {ggml_half d; uint8_t qs[QK2_0/4]}": block is not None,
    }
    out["ok"] = out["GGML_TYPE_Q2_0"] == 42 and out["QK2_0"] == 64 and bool(block)
    return out


def build(vendor: Path, build_dir: Path, jobs: int) -> tuple[Path, float]:
    """libllama.so (CPU) and its ggml libraries; returns their folder and the build seconds."""
    lib = build_dir / "bin" / "libllama.so"
    if lib.is_file():
        return lib.parent, 0.0
    t0 = time.perf_counter()
    subprocess.run(
        [
            "cmake",
            "-S",
            str(vendor),
            "-B",
            str(build_dir),
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DBUILD_SHARED_LIBS=ON",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_SERVER=OFF",
            "-DLLAMA_BUILD_TOOLS=OFF",
            "-DLLAMA_BUILD_COMMON=OFF",
            "-DLLAMA_CURL=OFF",
            "-DGGML_OPENMP=OFF",
            "-DGGML_NATIVE=ON",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(["cmake", "--build", str(build_dir), "--target", "llama", "-j", str(jobs)], check=True)
    return lib.parent, time.perf_counter() - t0


def check_bytes(libdir: Path) -> dict[str, Any]:
    """ggml's Q2_0 reference quantizer/dequantizer against metrale's, bytes and bits."""
    from metrale.reference.formats.q2_0 import BLOCK_BYTES, QK, Q2_0Weight

    lib = ctypes.CDLL(str(libdir / "libggml-base.so"))
    fp = ctypes.POINTER(ctypes.c_float)
    lib.quantize_row_q2_0_ref.argtypes = [fp, ctypes.c_void_p, ctypes.c_int64]
    lib.dequantize_row_q2_0.argtypes = [ctypes.c_void_p, fp, ctypes.c_int64]
    rng = np.random.default_rng(42)
    tiny = np.float32(2.0**-140)
    rows = [
        rng.standard_normal((64, 512)).astype(np.float32),
        (rng.standard_normal((8, 256)) * 1e-30).astype(np.float32),
        np.zeros((2, 64), np.float32),
        np.array([[-0.0] * 64, [tiny] * 32 + [-tiny] * 32], np.float32),  # ±0 and subnormal blocks
        np.tile(np.array([1.0, 0.5, -0.5, 1.5, -1.0, 2.0, -2.0, 0.25], np.float32), (2, 8)),  # ties
        np.array(
            [[65504.0, -65504.0, 1e-8, 3.0] * 16], np.float32
        ),  # the f16 scale at its max (metrale refuses beyond)
    ]
    bad = 0
    cases = 0
    for x in rows:
        x = np.ascontiguousarray(x)
        n, k = x.shape
        ours = Q2_0Weight.quantize(x, name="check").blocks.reshape(n, -1)
        theirs = np.zeros((n, k // QK * BLOCK_BYTES), np.uint8)
        for r in range(n):
            lib.quantize_row_q2_0_ref(x[r].ctypes.data_as(fp), theirs[r].ctypes.data, k)
        bad += int((ours != theirs).any(axis=1).sum())
        deq = np.zeros((n, k), np.float32)
        for r in range(n):
            lib.dequantize_row_q2_0(theirs[r].ctypes.data, deq[r].ctypes.data_as(fp), k)
        ref = Q2_0Weight(blocks=theirs.reshape(n, -1, BLOCK_BYTES), name="check").dequantize()
        bad += int((deq.view(np.uint32) != np.asarray(ref, np.float32).view(np.uint32)).any(axis=1).sum())
        cases += 2 * n
    return {"rows_compared": cases, "rows_differing": bad, "ok": bad == 0}


def _llama_cpp(sdist: Path, libdir: Path) -> Any:
    os.environ["LLAMA_CPP_LIB_PATH"] = str(libdir)
    sys.path.insert(0, str(sdist))
    if "diskcache" not in sys.modules:  # the bindings import it for a cache class not used here
        stub = types.ModuleType("diskcache")
        stub.Cache = object  # type: ignore[attr-defined]
        sys.modules["diskcache"] = stub
    import llama_cpp

    return llama_cpp


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k row permutation (metrale.checkpoint.gguf_q2.permute_rows)."""
    n = w.shape[0]
    return w.reshape(heads, n // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def dequantized_model(src: Path, gguf_path: Path) -> Any:
    """The transformers model of ``src`` in float32 with every Q2_0 tensor of the GGUF file
    dequantized in place of its source weight."""
    import gguf as _gguf
    import torch
    import transformers

    from metrale.checkpoint.gguf_q2 import NameMapper, q2_weight, rope_heads

    model = transformers.AutoModelForCausalLM.from_pretrained(
        src, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    cfg = json.loads((src / "config.json").read_text())
    mapper = NameMapper(cfg)
    tensors = {t.name: t for t in _gguf.GGUFReader(gguf_path).tensors}
    replaced = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = tensors.get(mapper(name))
            if t is None or int(t.tensor_type) != 42:
                continue
            w = np.asarray(q2_weight(t, name).dequantize(), np.float32)
            heads = rope_heads(name, cfg)
            if heads is not None:
                w = _unpermute(w, heads)
            p.copy_(torch.from_numpy(w))
            replaced += 1
    model.metrale_replaced = replaced
    return model


def emulate_llamacpp_rounding(model: Any) -> list[Any]:
    """Forward pre-hooks: Q8_0 (blocks of 32, codes round(x·127/amax) ties to even, fp16 scale
    amax/127) on the input
    of every Linear whose weight was Q2_0, bf16 on the input of lm_head (BF16 weight)."""
    import torch

    def q8_0(x: torch.Tensor) -> torch.Tensor:  # ggml-cpu's x86 quantize_row_q8_0
        shp = x.shape
        b = x.reshape(-1, 32)
        amax = b.abs().amax(-1, keepdim=True)
        inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
        q = torch.round(b * inv)  # _mm256_round_ps(_MM_ROUND_NEAREST): ties to even, as torch.round
        return (q * (amax / 127.0).to(torch.float16).to(torch.float32)).reshape(shp)

    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            f = (
                (lambda mod, a: (a[0].to(torch.bfloat16).to(torch.float32),))
                if name == "lm_head"
                else (lambda mod, a: (q8_0(a[0]),))
            )
            hooks.append(m.register_forward_pre_hook(f))
    return hooks


def sentencepiece_tokenizer(src: Path) -> Any:
    """Replace the tokenizer of model folder ``src`` by a SentencePiece BPE model trained here
    with Llama 2's settings (byte fallback, identity normalization, whitespace kept, <unk> <s>
    </s> = 0 1 2), written as ``tokenizer.model``; returns the processor."""
    import io

    import sentencepiece as spm

    from metrale.checkpoint.example import EXAMPLE_TEXT

    for f in ("tokenizer.json", "tokenizer_config.json"):
        (src / f).unlink()
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(EXAMPLE_TEXT.splitlines() * 4),
        model_writer=buf,
        vocab_size=316,
        hard_vocab_limit=False,
        model_type="bpe",
        byte_fallback=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        character_coverage=1.0,
        add_dummy_prefix=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        minloglevel=2,
    )
    (src / "tokenizer.model").write_bytes(buf.getvalue())
    tc = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
    }
    (src / "tokenizer_config.json").write_text(json.dumps(tc))
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(
        json.dumps({**cfg, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None})
    )
    return spm.SentencePieceProcessor(model_file=str(src / "tokenizer.model"))


def spm_vocab_equal(sp: Any, gguf_path: Path) -> bool:
    """The GGUF's token list and scores equal the SentencePiece model's, piece by piece."""
    import gguf as _gguf

    from metrale.checkpoint.gguf_q2 import field_value

    r = _gguf.GGUFReader(gguf_path)
    toks, scores = field_value(r, "tokenizer.ggml.tokens"), field_value(r, "tokenizer.ggml.scores")
    n = sp.vocab_size()
    return toks[:n] == [sp.id_to_piece(i) for i in range(n)] and all(
        np.float32(scores[i]) == np.float32(sp.get_score(i)) for i in range(n)
    )


def check_model(llama_cpp: Any, family: str, work: Path) -> dict[str, Any]:
    import torch
    import transformers

    from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
    from metrale.checkpoint.example import make_hf_model

    src, dst = work / family, work / f"{family}-q2_0"
    for p in (src, dst):
        shutil.rmtree(p, ignore_errors=True)
    make_hf_model(src, family.removesuffix("-spm"))
    sp = None
    if family == "llama-spm":
        sp = sentencepiece_tokenizer(src)
        encode = lambda s: [1, *sp.encode(s)]  # noqa: E731
    else:
        tok = transformers.AutoTokenizer.from_pretrained(src)
        encode = lambda s: tok(s)["input_ids"]  # noqa: E731
    convert_checkpoint(src, dst, ConvertOptions("q2_0"))
    gguf_path = dst / "model.gguf"
    vocab_ok = sp is None or spm_vocab_equal(sp, gguf_path)
    llm = llama_cpp.Llama(
        model_path=str(gguf_path),
        n_ctx=128,
        n_batch=128,
        logits_all=True,
        verbose=False,
        n_threads=2,
        type_k=0,
        type_v=0,  # GGML_TYPE_F32 KV cache
        flash_attn=False,  # ggml-cpu's flash attention rounds Q to f16
    )
    tokens = []
    for s in STRINGS if family != "llama-spm" else STRINGS[:3]:
        hf = encode(s)
        ours = llm.tokenize(s.encode(), add_bos=True, special=family != "llama-spm")
        tokens.append({"text": s, "hf": hf, "llama.cpp": ours, "equal": hf == ours})
    ids = encode(STRINGS[0] + " " + STRINGS[1])
    llm.reset()
    llm.eval(ids)
    got = np.array(llm.scores[: len(ids)], dtype=np.float64)
    model = dequantized_model(src, gguf_path)
    with torch.no_grad():
        plain = model(torch.tensor([ids])).logits[0].double().numpy()
        hooks = emulate_llamacpp_rounding(model)
        emulated = model(torch.tensor([ids])).logits[0].double().numpy()
        for h in hooks:
            h.remove()
    scale = float(np.abs(plain).max())
    per_pos = np.abs(got - emulated).max(-1)
    rounding_effect = float(np.abs(plain - emulated).max())
    # FLOAT_BOUND: float32 sums over K <= 256 terms (K·2^-24 ≈ 1.5e-5 relative) of logits up to
    # ~4 in size: 6e-5, rounded up to 1e-4. Beyond it a position differs when one Q8_0 activation
    # code rounds the other way (a near-tie flipped by a last-bit difference upstream, e.g. RoPE
    # angles ggml computes by repeated multiplication); that difference then persists through the
    # KV cache. The yardstick for it is the whole effect of the activation roundings,
    # max |plain - emulated| (empirical, not derived).
    within = int((per_pos <= FLOAT_BOUND).sum())
    prefix_ok = bool((per_pos[:EXACT_PREFIX] <= FLOAT_BOUND).all())
    ok_logits = prefix_ok and float(per_pos.max()) <= rounding_effect
    return {
        "family": family,
        "gguf_bytes": gguf_path.stat().st_size,
        "q2_0_tensors_dequantized": model.metrale_replaced,
        "tokens": tokens,
        "tokens_equal": all(t["equal"] for t in tokens) and vocab_ok,
        "positions": len(ids),
        "max_abs_logit": scale,
        "max_abs_diff_vs_transformers_f32": float(np.abs(got - plain).max()),
        "max_abs_diff_vs_emulated": float(per_pos.max()),
        "positions_within_1e-4_of_emulated": within,
        "first_position_beyond_1e-4": int(np.argmax(per_pos > FLOAT_BOUND)) if within < len(ids) else None,
        "median_abs_diff_vs_emulated": float(np.median(per_pos)),
        "max_abs_diff_transformers_f32_vs_emulated": rounding_effect,
        "argmax_agree_with_emulated": int((got.argmax(-1) == emulated.argmax(-1)).sum()),
        "logits_ok": ok_logits,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/metrale-llamacpp"))
    ap.add_argument("--source", type=Path, default=None, help="unpacked llama-cpp-python sdist")
    ap.add_argument("--build-dir", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    sdist = get_source(a.work, a.source)
    vendor = sdist / "vendor" / "llama.cpp"
    res: dict[str, Any] = {"llama_cpp_python": VERSION}
    commit = subprocess.run(["git", "-C", str(vendor), "rev-parse", "HEAD"], capture_output=True, text=True)
    res["llama_cpp_commit"] = commit.stdout.strip() or None
    res["layout"] = check_layout(vendor)
    log(f"layout: {res['layout']}")
    libdir, secs = build(vendor, a.build_dir or a.work / "build", a.jobs)
    res["build_seconds"] = round(secs, 1)
    res["bytes"] = check_bytes(libdir)
    log(f"bytes: {res['bytes']}")
    llama_cpp = _llama_cpp(sdist, libdir)
    res["models"] = []
    families = ["llama", "qwen3"]
    try:
        import sentencepiece  # noqa: F401

        families.append("llama-spm")
    except ImportError:
        log("sentencepiece not installed: the tokenizer.model (llama-spm) case is skipped")
    for family in families:
        r = check_model(llama_cpp, family, a.work)
        res["models"].append(r)
        log(json.dumps({k: v for k, v in r.items() if k != "tokens"}))
        for t in r["tokens"]:
            if not t["equal"]:
                log(f"  token ids differ for {t['text']!r}: hf {t['hf']} llama.cpp {t['llama.cpp']}")
    ok = (
        res["layout"]["ok"]
        and res["bytes"]["ok"]
        and all(m["tokens_equal"] and m["logits_ok"] for m in res["models"])
    )
    res["ok"] = ok
    if a.json is not None:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    log("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
