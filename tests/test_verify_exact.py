"""``metrale verify --exact`` against SRC: a converted folder passes; one flipped byte in a scale
or in a code of one tensor (edited in the safetensors file, past the loader's checks) makes it
fail naming that tensor."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from metrale.checkpoint.convert import ConvertOptions, convert_checkpoint
from metrale.checkpoint.example import make_example_checkpoint
from metrale.checkpoint.verify import verify_path

MOD = "model.layers.1.mlp.up_proj"


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_example_checkpoint(tmp_path_factory.mktemp("src") / "llama", layers=2, seed=4)


def flip_byte(folder: Path, tensor: str, index: int, mask: int) -> None:
    """XOR byte ``index`` of ``tensor``'s data with ``mask``, in whichever shard holds it
    (the safetensors layout: u64 header size, JSON header, data at the header's offsets)."""
    for f in folder.glob("*.safetensors"):
        raw = bytearray(f.read_bytes())
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        if tensor in header:
            start, end = header[tensor]["data_offsets"]
            assert 0 <= index < end - start
            raw[8 + n + start + index] ^= mask
            f.write_bytes(bytes(raw))
            return
    raise AssertionError(f"{tensor} in no shard of {folder}")


CASES = [
    # NVFP4: the e4m3 block scale 1 step up (mantissa bit); one packed byte's low nibble
    ("nvfp4", "weight_scale", 3, 0x01),
    ("nvfp4", "weight", 5, 0x01),
    # FP8: the f32 row scale's lowest mantissa bit; one e4m3 code's lowest bit
    ("fp8", "weight_scale", 0, 0x01),
    ("fp8", "weight", 7, 0x01),
    # W8A8: the row scale; one int8 code
    ("w8a8", "weight_scale", 4, 0x01),
    ("w8a8", "weight", 9, 0x02),
]


@pytest.mark.parametrize(("fmt", "suffix", "index", "mask"), CASES)
def test_verify_exact_names_the_tampered_tensor(
    src: Path, tmp_path: Path, fmt: str, suffix: str, index: int, mask: int
) -> None:
    out = tmp_path / fmt
    convert_checkpoint(src, out, ConvertOptions(fmt, ffn_only=True))
    clean = verify_path(out, src, exact=True)
    assert clean.ok, clean.violations
    assert all(s.bit_exact for s in clean.stats)
    flip_byte(out, f"{MOD}.{suffix}", index, mask)
    res = verify_path(out, src, exact=True)
    want = f"{MOD}: differs from metrale's {fmt} quantization of SRC"
    assert want in res.violations, res.violations
    # only the tampered tensor is reported as inexact
    assert [s.name for s in res.stats if not s.bit_exact] == [MOD]
