"""Backend selection and the kernel registry (arithmetic.md § layer): ``get_backend`` by argument or
``METRALE_BACKEND``, errors that name what is missing, ``Backend.without`` and the launch log."""

from __future__ import annotations

import numpy as np
import pytest

from metrale.backend import BACKEND_CHOICES, get_backend
from metrale.cuda import cuda_unavailable_reason
from metrale.errors import BackendUnavailable, KernelMissing, MetraleError
from metrale.reference.backend import KERNEL_NAMES, Backend
from metrale.reference.kernels import REFERENCE_KERNELS, ReferenceBackend

CUDA_REASON = cuda_unavailable_reason()


@pytest.fixture(autouse=True)
def _no_backend_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("METRALE_BACKEND", raising=False)


def test_choices() -> None:
    assert BACKEND_CHOICES == ("auto", "reference", "cuda")


def test_reference_has_every_kernel() -> None:
    b = get_backend("reference")
    assert isinstance(b, ReferenceBackend) and b.name == "reference"
    assert b.kernels == KERNEL_NAMES
    assert set(REFERENCE_KERNELS) == set(KERNEL_NAMES)
    assert all(b.has(k) for k in KERNEL_NAMES) and not b.has("nope")


@pytest.mark.parametrize("how", ["argument", "env"])
@pytest.mark.parametrize("name", ["reference", " Reference ", "REFERENCE"])
def test_reference_by_argument_or_env(name: str, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "env":
        monkeypatch.setenv("METRALE_BACKEND", name)
        b = get_backend()
    else:
        b = get_backend(name)
    assert b.name == "reference"


def test_argument_wins_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRALE_BACKEND", "cuda")
    assert get_backend("reference").name == "reference"


def test_env_overrides_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """backend="auto" (the layer's default) defers to METRALE_BACKEND."""
    monkeypatch.setenv("METRALE_BACKEND", "reference")
    assert get_backend("auto").name == "reference"


@pytest.mark.parametrize("env", [None, "auto", ""])
def test_auto(env: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto (the default) takes CUDA where it can run, else the reference."""
    if env is not None:
        monkeypatch.setenv("METRALE_BACKEND", env)
    assert get_backend().name == ("reference" if CUDA_REASON else "cuda")
    assert get_backend("auto").name == ("reference" if CUDA_REASON else "cuda")


@pytest.mark.parametrize("how", ["argument", "env"])
def test_unknown_backend(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MetraleError) as e:
        if how == "env":
            monkeypatch.setenv("METRALE_BACKEND", "rocm")
            get_backend()
        else:
            get_backend("rocm")
    given = "METRALE_BACKEND='rocm'" if how == "env" else "backend='rocm'"
    assert str(e.value) == f"{given}: unknown backend, want one of auto, reference, cuda"


@pytest.mark.skipif(CUDA_REASON is None, reason="CUDA can run here")
@pytest.mark.parametrize("how", ["argument", "env"])
def test_cuda_unavailable_names_what_is_missing(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendUnavailable) as e:
        if how == "env":
            monkeypatch.setenv("METRALE_BACKEND", "cuda")
            get_backend()
        else:
            get_backend("cuda")
    given = "METRALE_BACKEND='cuda'" if how == "env" else "backend='cuda'"
    assert str(e.value) == f"{given}: the CUDA backend cannot run here: {CUDA_REASON}"
    assert any(word in CUDA_REASON for word in ("CuPy", "CUDA device", "CUDA kernels"))
    assert isinstance(e.value, MetraleError) and isinstance(e.value, RuntimeError)


def test_cuda_reason_is_text_or_none() -> None:
    assert CUDA_REASON is None or (isinstance(CUDA_REASON, str) and CUDA_REASON)


def test_without_builds_a_copy_lacking_kernels() -> None:
    b = ReferenceBackend()
    b.launch("act_mul_silu", *[np.zeros((1, 16), dtype=np.dtype("bfloat16"))] * 3)
    c = b.without(["w4a16_gemv", "q2_0_gemm"])
    assert isinstance(c, ReferenceBackend)
    assert not c.has("w4a16_gemv") and not c.has("q2_0_gemm") and c.has("w4a16_gemm")
    assert c.kernels == tuple(k for k in KERNEL_NAMES if k not in ("w4a16_gemv", "q2_0_gemm"))
    assert b.kernels == KERNEL_NAMES, "the original keeps its kernels"
    assert c.launches == [] and b.launches == ["act_mul_silu"]
    c.launch("act_mul_silu", *[np.zeros((1, 16), dtype=np.dtype("bfloat16"))] * 3)
    assert b.launches == ["act_mul_silu"], "the copy keeps its own launch log"
    assert c.without([]).kernels == c.kernels


def test_without_unknown_kernel() -> None:
    with pytest.raises(MetraleError) as e:
        ReferenceBackend().without(["w4a16_gemv", "w5a16_gemv"])
    assert str(e.value) == "unknown kernel names ['w5a16_gemv']"


def test_registry_refuses_unknown_kernels() -> None:
    with pytest.raises(MetraleError, match=r"unknown kernel names \['mystery'\]"):
        Backend({"mystery": lambda: None})


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_missing_kernel_wording(kernel: str) -> None:
    b = ReferenceBackend().without([kernel])
    with pytest.raises(KernelMissing) as e:
        b.launch(kernel)
    assert str(e.value) == f"{kernel} kernel missing in this target build"
    assert isinstance(e.value, MetraleError) and isinstance(e.value, ValueError)
    assert b.launches == [], "a refused launch is not logged"


def test_launch_log_in_order() -> None:
    calls: list[tuple[object, ...]] = []
    b = Backend({"w4a16_gemv": lambda *a: calls.append(a) or "r1", "dense_gemv": lambda *a: "r2"})
    assert b.launch("w4a16_gemv", 1, 2) == "r1"
    assert b.launch("dense_gemv") == "r2"
    assert b.launch("w4a16_gemv") == "r1"
    assert b.launches == ["w4a16_gemv", "dense_gemv", "w4a16_gemv"]
    assert calls == [(1, 2), ()]
    assert b.kernels == ("w4a16_gemv", "dense_gemv")


def test_base_backend_memory_helpers_are_abstract() -> None:
    b = Backend({})
    assert b.upload("w") == "w"
    for call in (lambda: b.empty_bf16((1, 16)), lambda: b.rows(None, 16), lambda: b.to_numpy(None)):
        with pytest.raises(NotImplementedError):
            call()
