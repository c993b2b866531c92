"""``ForwardContext``: the backend, the FFN config and the step's buffers (CONTRACT §7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metrale.backend import Backend, get_backend
from metrale.errors import MetraleError


@dataclass(frozen=True)
class FfnConfig:
    """The layer's shape: ``hidden_size`` (K of gate/up) and ``intermediate_size``."""

    hidden_size: int
    intermediate_size: int

    def __post_init__(self) -> None:
        for nm in ("hidden_size", "intermediate_size"):
            v = getattr(self, nm)
            if not isinstance(v, int) or v <= 0 or v % 16:
                raise MetraleError(f"FfnConfig.{nm}={v!r}: want a positive multiple of 16")


class FfnBuffers:
    """bf16 buffers for up to ``max_rows`` rows: ``moe_output`` [rows, hidden],
    ``expert_gate_out`` / ``expert_up_out`` [rows, inter]; plus kernel scratch."""

    def __init__(self, backend: Backend, config: FfnConfig, max_rows: int) -> None:
        if max_rows < 1:
            raise MetraleError(f"FfnBuffers: max_rows={max_rows} must be >= 1")
        self.max_rows = max_rows
        self._moe_output = backend.empty_bf16((max_rows, config.hidden_size))
        self._gate = backend.empty_bf16((max_rows, config.intermediate_size))
        self._up = backend.empty_bf16((max_rows, config.intermediate_size))
        self.scratch: dict[str, Any] = {}

    def moe_output(self) -> Any:
        return self._moe_output

    def expert_gate_out(self) -> Any:
        return self._gate

    def expert_up_out(self) -> Any:
        return self._up


@dataclass
class ForwardContext:
    """What a forward step runs with: ``backend``, ``config`` and ``buffers``."""

    config: FfnConfig
    backend: Backend = field(default_factory=get_backend)
    max_rows: int = 64
    buffers: FfnBuffers = field(init=False)

    def __post_init__(self) -> None:
        self.buffers = FfnBuffers(self.backend, self.config, self.max_rows)
