"""The launcher helpers the FP8/BF16, Q2_0 and W8A8 modules share (CPU: no kernel runs): the GEMV
tier's name and launch shape, the K limit of a projection, and the launchers offered only where
every kernel of their file built."""

from __future__ import annotations

import numpy as np
import pytest

from metrale.cuda import configs, runtime
from metrale.cuda.launch_args import built_launchers, projection_operands, tier_launch
from metrale.cuda.weights import DeviceWeight
from metrale.errors import MetraleError
from metrale.reference.elements import BF16
from metrale.reference.formats import DenseWeight


@pytest.mark.parametrize(
    ("m", "want"),
    [
        (1, ("q2_0_gemv_r1", (768, 1), (128,))),  # 12288 columns / (4 warps x 4 columns)
        (3, ("q2_0_gemv_r4", (768, 1), (128,))),  # the smallest tier >= m
        (8, ("q2_0_gemv_r8", (1536, 1), (128,))),  # the 8-row tier has 2 columns per warp
        (20, ("q2_0_gemv_r8", (1536, 3), (128,))),  # above the largest tier: row groups along y
    ],
)
def test_tier_launch_names_the_tier_and_its_grid(m: int, want: tuple) -> None:
    assert tier_launch("q2_0_gemv", configs.Q2_0_TIERS, 12288, m, 4) == want


def test_tier_launch_rounds_columns_up() -> None:
    assert tier_launch("w8a8_gemv", {1: 4}, 17, 1, 4)[1] == (2, 1)


def _weight(k: int) -> DeviceWeight:
    """A BF16 weight [2, k] named down_proj, as uploaded (no device arrays needed here)."""
    return DeviceWeight(host=DenseWeight(weight=np.zeros((2, k), dtype=BF16), name="down_proj"), arrays={})


def test_projection_operands_names_the_weight_over_the_k_limit() -> None:
    with pytest.raises(
        MetraleError, match=r"dense_gemm: down_proj has K=128, above this kernel's limit of 64"
    ):
        projection_operands(None, _weight(128), None, 1, "bf16", "dense_gemm", 64)


def test_projection_operands_name_a_weight_of_another_format() -> None:
    with pytest.raises(MetraleError, match=r"w8a16_gemm: weight down_proj .*want an uploaded fp8 weight"):
        projection_operands(None, _weight(64), None, 1, "fp8", "w8a16_gemm", 64)


def test_projection_operands_launch_nothing_for_no_rows() -> None:
    assert projection_operands(None, _weight(64), None, 0, "bf16", "dense_gemm", 64) is None


def dense_gemv() -> None: ...


def dense_gemm() -> None: ...


def test_built_launchers_need_every_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    missing: set[str] = set()
    monkeypatch.setattr(runtime, "get_kernel", lambda cu, name: None if name in missing else (cu, name))
    got = built_launchers("f.cu", ("a", "b"), (dense_gemv, dense_gemm))
    assert got == {"dense_gemv": dense_gemv, "dense_gemm": dense_gemm}
    missing.add("b")
    assert built_launchers("f.cu", ("a", "b"), (dense_gemv, dense_gemm)) == {}
