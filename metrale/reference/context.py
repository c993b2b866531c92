"""``ForwardContext``: the backend, the FFN config and the step's buffers (arithmetic.md § layer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metrale.errors import MetraleError, a_kind
from metrale.reference.backend import Backend, resolve_backend
from metrale.reference.formats._checks import shown


@dataclass(frozen=True)
class FfnConfig:
    """The layer's shape: ``hidden_size`` (K of gate/up) and ``intermediate_size``."""

    hidden_size: int
    intermediate_size: int

    def __post_init__(self) -> None:
        for nm in ("hidden_size", "intermediate_size"):
            v = getattr(self, nm)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise MetraleError(f"FfnConfig.{nm}={shown(v)} is {a_kind(v)}: want an int")
            if v <= 0 or v % 16:
                raise MetraleError(f"FfnConfig.{nm}={v!r}: want a positive multiple of 16")
            object.__setattr__(self, nm, int(v))  # numpy integers become ints


class FfnBuffers:
    """bf16 buffers for up to ``max_rows`` rows, the same meaning after every route:
    ``output`` [rows, hidden] = y; ``gate_out`` [rows, inter] = h = bf16(act(gate)·up) (the
    down projection's input); ``up_out`` [rows, inter] = the up projection; plus ``scratch``
    for kernels. The seed engine's names stay as aliases: ``moe_output`` = ``output``,
    ``expert_gate_out`` = ``gate_out``, ``expert_up_out`` = ``up_out``."""

    def __init__(self, backend: Backend, config: FfnConfig, max_rows: int) -> None:
        if max_rows < 1:
            raise MetraleError(f"FfnBuffers: max_rows={max_rows} must be >= 1")
        self.max_rows = max_rows
        h, i = config.hidden_size, config.intermediate_size
        try:
            self._output = backend.empty_bf16((max_rows, h))
            self._gate = backend.empty_bf16((max_rows, i))
            self._up = backend.empty_bf16((max_rows, i))
        except (MemoryError, ValueError):
            need = max_rows * (h + 2 * i) * 2
            raise MetraleError(
                f"FfnBuffers: max_rows={max_rows}: the buffers need {need / 2**30:,.1f} GiB, "
                f"more than {backend.name} can allocate"
            ) from None
        self.scratch: dict[str, Any] = {}

    def output(self) -> Any:
        return self._output

    def gate_out(self) -> Any:
        return self._gate

    def up_out(self) -> Any:
        return self._up

    moe_output = output
    expert_gate_out = gate_out
    expert_up_out = up_out


@dataclass
class ForwardContext:
    """What a forward step runs with: ``backend`` (a Backend or its name; None: automatic
    choice), ``config`` and ``buffers`` for up to ``max_rows`` rows."""

    config: FfnConfig
    backend: Backend | str | None = None
    max_rows: int = 64
    buffers: FfnBuffers = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.config, FfnConfig):
            raise MetraleError(f"ForwardContext: config is {a_kind(self.config)}, want an FfnConfig")
        if isinstance(self.max_rows, (bool, np.bool_)) or not isinstance(self.max_rows, (int, np.integer)):
            raise MetraleError(f"ForwardContext: max_rows={shown(self.max_rows)}, want an int >= 1")
        self.max_rows = int(self.max_rows)
        self.backend = resolve_backend(self.backend, "ForwardContext")
        self.buffers = FfnBuffers(self.backend, self.config, self.max_rows)
