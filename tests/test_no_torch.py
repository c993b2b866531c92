"""torch is optional: ``import metrale``, the reference, the example checkpoint and
``convert`` / ``inspect`` / ``verify`` run in a Python where ``import torch`` fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

#: Makes ``import torch`` (and ``transformers``, which would pull it in) raise ImportError.
BLOCK = "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import numpy as np
    from typer.testing import CliRunner

    import metrale
    from metrale.checkpoint.example import make_example_checkpoint
    from metrale.cli import app

    out = Path(sys.argv[1])
    src = make_example_checkpoint(out / "src")
    rng = np.random.default_rng(0)
    w = metrale.Nvfp4Weight.quantize(rng.standard_normal((128, 64), dtype=np.float32))
    y = metrale.project(rng.standard_normal((3, 64), dtype=np.float32).astype(metrale.BF16), w)
    assert y.shape == (3, 128), y.shape
    runner = CliRunner()
    for fmt in ("nvfp4", "fp8", "w8a8", "q2_0"):
        dst = out / fmt
        for args in (["convert", str(src), str(dst), "--format", fmt], ["inspect", str(dst)],
                     ["verify", str(dst)]):
            r = runner.invoke(app, args)
            assert r.exit_code == 0, (args, r.output)
        layer = metrale.load_ffn_layer(dst, layer=1, backend="reference")
        assert layer(np.ones((2, 64), metrale.BF16)).shape == (2, 64)
    import ml_dtypes
    from metrale.checkpoint.io import SafetensorsFile, save_tensors

    small = {"b": np.arange(6, dtype=np.float32).reshape(2, 3).astype(metrale.BF16),
             "f8": np.linspace(-4, 4, 8, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn),
             "s": np.array(5.0, np.float32)}
    save_tensors(out / "small.safetensors", small)
    back = SafetensorsFile(out / "small.safetensors")
    for k, v in small.items():
        assert back.tensor(k).dtype == v.dtype and back.tensor(k).tobytes() == v.tobytes(), k
    r = runner.invoke(app, ["demo"])
    assert r.exit_code == 0, r.output
    assert "torch" not in sys.modules or sys.modules["torch"] is None
    print("no-torch OK")
    """
)


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code, *args], capture_output=True, text=True, timeout=300
    )


def test_the_shim_blocks_torch() -> None:
    """The shim works (so the test below can fail): ``import torch`` raises under it."""
    r = _run("import torch")
    assert r.returncode != 0 and "import of torch halted" in r.stderr


def test_convert_inspect_verify_without_torch(tmp_path: Path) -> None:
    r = _run(SCRIPT, str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no-torch OK" in r.stdout
