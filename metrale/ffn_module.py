"""``MetraleFfn(nn.Module)`` and the ``metrale::dense_ffn`` operator (import them from
``metrale.torch``, which also plugs in the tensor-parallel module).

``MetraleFfn`` takes and returns torch bfloat16 tensors ``[..., hidden]``. CPU tensors run the
numpy reference (the input viewed zero-copy); CUDA tensors run the CUDA kernels, the input viewed
zero-copy through DLPack and every launch on torch's current stream (CuPy launches on a CuPy
stream that is it, ``metrale.cuda.torch_stream``: no synchronisation, no host round trip), so the
module works inside ``torch.cuda.graph`` capture. While the operator runs, CuPy allocates from torch's caching
allocator on that stream (``torch_allocator``): under capture the kernels' temporary buffers (the
A4/A8 activation codes, grown workspaces) come from the graph's private pool, so replays find
them where the capture put them and no eager allocation can take them. The operator has a fake
implementation, so ``torch.compile(fullgraph=True)`` traces through it. Inference only: backward raises.

The weights are integer buffers holding the format's raw bytes (``<proj>_<field>``), so
``.to()``, ``state_dict()`` and ``load_state_dict()`` behave and ``model.to(torch.float16)``
leaves them alone; the ``DenseFfnLayer`` of a device is built from them on first use.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from metrale.checkpoint.load import build_ffn_layer
from metrale.errors import MetraleError, a_kind
from metrale.reference.context import FfnConfig, ForwardContext
from metrale.reference.elements import BF16
from metrale.reference.formats.spec import FORMATS, spec_of
from metrale.reference.layer import DenseFfnLayer, FfnActivation
from metrale.reference.tiers import ALL_ROWS_TIER, layer_tier

PROJS = ("gate_proj", "up_proj", "down_proj")
#: Integer torch dtype carrying the raw bytes of a numpy element of each size.
_CARRIER = {1: (np.uint8, torch.uint8), 2: (np.int16, torch.int16), 4: (np.int32, torch.int32)}

_MODULES: weakref.WeakValueDictionary[int, MetraleFfn] = weakref.WeakValueDictionary()
_NEXT = itertools.count(1)

#: ``MetraleFfn.tensor_parallel``'s factory (ffn, group, split) -> rank's module: the
#: tensor-parallel module above this one installs it (``metrale.torch`` imports it); this
#: module never imports it.
_tensor_parallel: Callable[[MetraleFfn, Any, str], Any] | None = None


def set_tensor_parallel(factory: Callable[[MetraleFfn, Any, str], Any]) -> None:
    """Install the factory ``MetraleFfn.tensor_parallel`` calls (``TpMetraleFfn.from_module``)."""
    global _tensor_parallel
    _tensor_parallel = factory


def _to_carrier(a: np.ndarray, name: str) -> torch.Tensor:
    """A CPU integer tensor holding a copy of ``a``'s bytes (the module owns its buffers)."""
    c = _CARRIER.get(a.dtype.itemsize)
    if c is None:
        raise MetraleError(f"{name}: element type {a.dtype} has no torch carrier")
    return torch.from_numpy(np.array(a, order="C", copy=True, ndmin=1).view(c[0]))


def activation_of(activation: Any, where: str) -> FfnActivation:
    """``activation`` (an ``FfnActivation`` or its value) as an FfnActivation, else MetraleError."""
    try:
        return FfnActivation(activation)
    except (ValueError, TypeError):
        want = ", ".join(repr(a.value) for a in FfnActivation)
        raise MetraleError(f"{where}: activation {activation!r} is not supported (want {want})") from None


def check_weights(config: Any, weights: Any, where: str) -> None:
    """``config`` an FfnConfig and ``weights`` three metrale weight containers, else MetraleError."""
    if not isinstance(config, FfnConfig):
        raise MetraleError(f"{where}: config is {a_kind(config)}, want a metrale.FfnConfig")
    if not isinstance(weights, (list, tuple)) or len(weights) != 3:
        got = f"{len(weights)}" if isinstance(weights, (list, tuple)) else f"a {type(weights).__name__}"
        raise MetraleError(f"{where}: want 3 weights [gate, up, down], got {got}")
    kinds = ", ".join(f.weight_type.__name__ for f in FORMATS.values())
    for proj, w in zip(PROJS, weights, strict=True):
        if not any(isinstance(w, f.weight_type) for f in FORMATS.values()):
            raise MetraleError(
                f"{where}: {proj} is a {type(w).__module__}.{type(w).__name__}, want one of {kinds}"
            )


def _from_carrier(t: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    """The numpy array of ``dtype`` a CPU carrier tensor holds (zero-copy)."""
    return t.detach().numpy().view(dtype)


def _weights_of(layer: DenseFfnLayer) -> list[Any]:
    """gate, up and down host weight containers of a reference-backed layer (one format)."""
    if layer.lora is not None:
        raise MetraleError("MetraleFfn: a layer with LoRA adapters is not supported")
    slots = [
        ws.all() if ws is not None else None
        for ws in (layer.weights, layer.bf16_weights, layer.fp8_weights, layer.q2_weights)
    ]
    if layer.w8a8 is not None:
        slots.append(layer.w8a8.all())
    held = [s for s in slots if s is not None]
    if len(held) != 1:
        raise MetraleError(f"MetraleFfn: the layer holds {len(held)} weight sets, want exactly one format")
    ws = list(held[0])
    for w in ws:
        if not any(isinstance(w, f.weight_type) for f in FORMATS.values()):
            raise MetraleError(
                f"MetraleFfn: weight {type(w).__name__} is not a host container "
                "(load the layer with backend='reference')"
            )
    return ws


class MetraleFfn(nn.Module):
    """A dense FFN ``down(act(gate(x)) * up(x))`` of one metrale format, for bf16 ``[..., hidden]``.

    Build with ``MetraleFfn.from_weights(config, [gate, up, down], activation)`` (reference
    weight containers), ``from_layer(layer)`` or ``from_checkpoint(path, layer)``.
    ``weight_quant``: its layers' weight-quantization tier, ``w4a4-all`` (A4 at every row count
    for weights that declare it, so row r of a prefill has its one-row decode's bits); None:
    ``METRALE_WEIGHT_QUANT`` (arithmetic.md § tier).
    """

    def __init__(
        self,
        config: FfnConfig,
        weights: Sequence[Any],
        activation: FfnActivation | str,
        weight_quant: str | None = ALL_ROWS_TIER,
    ) -> None:
        super().__init__()
        layer_tier(weight_quant)  # a clear error for an unknown tier, before anything is built
        self.weight_quant = weight_quant
        check_weights(config, weights, type(self).__name__)
        self.config = config
        self.activation = activation_of(activation, type(self).__name__)
        # Validate shapes and formats once (the reference layer checks them).
        self._layer_of(list(weights), "reference")
        self.format = spec_of(weights[0]).stem
        self._fields: dict[str, dict[str, Any]] = {}
        for proj, w in zip(PROJS, weights, strict=True):
            meta: dict[str, Any] = {}
            for f in dataclasses.fields(w):
                v = getattr(w, f.name)
                if isinstance(v, (np.ndarray, np.generic)):
                    a = np.asarray(v)
                    meta[f.name] = ("array", a.dtype, a.ndim == 0)
                    self.register_buffer(f"{proj}_{f.name}", _to_carrier(a, f"{proj}.{f.name}"))
                else:
                    meta[f.name] = ("value", v, False)
            self._fields[proj] = meta
        self._handle = next(_NEXT)
        _MODULES[self._handle] = self
        self._built: dict[str, tuple[DenseFfnLayer, ForwardContext]] = {}

    # ---- construction ----
    @classmethod
    def from_weights(
        cls,
        config: FfnConfig,
        weights: Sequence[Any],
        activation: FfnActivation | str = "silu",
        weight_quant: str | None = ALL_ROWS_TIER,
    ) -> MetraleFfn:
        return cls(config, weights, activation, weight_quant)

    @classmethod
    def from_layer(cls, layer: DenseFfnLayer) -> MetraleFfn:
        """The module of a reference-backed ``DenseFfnLayer`` (its host weights, shared)."""
        return cls(layer.config, _weights_of(layer), layer.activation)

    @classmethod
    def from_checkpoint(cls, path: Any, layer: int = 0) -> MetraleFfn:
        """Decoder layer ``layer``'s FFN of a checkpoint ``load_ffn_layer`` reads."""
        from metrale.checkpoint.load import load_ffn_layer

        return cls.from_layer(load_ffn_layer(path, layer=layer, backend="reference"))

    def tensor_parallel(self, group: Any = None, split: str = "n") -> Any:
        """This FFN's tensor-parallel module for this process's rank of ``group`` (a
        ``torch.distributed`` process group or a 1-D ``DeviceMesh``; None: the default group):
        a ``metrale.distributed.TpMetraleFfn`` holding only the rank's weight slices, on this
        module's device, with this module's output bits (arithmetic.md § tp)."""
        if _tensor_parallel is None:  # only reachable if metrale.torch was bypassed
            raise MetraleError("MetraleFfn.tensor_parallel: import metrale.torch (it installs TpMetraleFfn)")
        return _tensor_parallel(self, group, split)

    # ---- the weights of a device ----
    def host_weights(self) -> list[Any]:
        """gate, up and down as reference containers (views of CPU buffers, else copies)."""
        out = []
        cls = FORMATS[self.format].weight_type
        for proj in PROJS:
            kw: dict[str, Any] = {}
            for nm, (kind, v, scalar) in self._fields[proj].items():
                if kind == "value":
                    kw[nm] = v
                    continue
                a = _from_carrier(getattr(self, f"{proj}_{nm}").cpu(), v)
                kw[nm] = a.dtype.type(a.reshape(-1)[0]) if scalar else a
            out.append(cls(**kw))
        return out

    def __getstate__(self) -> dict[str, Any]:
        # The built device layers hold kernels and device memory: a pickle or copy rebuilds them.
        return {**self.__dict__, "_built": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A copy (copy.deepcopy, pickle) is a new module: it gets its own operator handle.
        super().__setstate__(state)
        self._handle = next(_NEXT)
        _MODULES[self._handle] = self
        self._built = {}

    def _apply(self, fn: Any, recurse: bool = True) -> MetraleFfn:
        self._built.clear()
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._built.clear()
        super()._load_from_state_dict(*args, **kwargs)

    def layer_for(self, device: torch.device, rows: int) -> tuple[DenseFfnLayer, ForwardContext]:
        """The ``DenseFfnLayer`` and a context of >= ``rows`` rows for ``device`` (built once)."""
        key = str(device)
        got = self._built.get(key)
        if got is not None and got[1].buffers.max_rows >= rows:
            return got
        if got is not None:
            layer = got[0]
        elif device.type == "cpu":
            layer = self._layer_of(self.host_weights(), "reference")
        else:
            import cupy

            with cupy.cuda.Device(device.index):
                layer = self._layer_of(self.host_weights(), "cuda")
        layer.set_weight_quant(self.weight_quant)
        ctx = ForwardContext(layer.config, backend=layer.backend, max_rows=max(64, rows))
        self._built[key] = (layer, ctx)
        return layer, ctx

    def _layer_of(self, weights: list[Any], backend: str) -> DenseFfnLayer:
        """The ``DenseFfnLayer`` of gate, up and down containers on ``backend``."""
        return build_ffn_layer(self.config, self.activation, weights, backend, "MetraleFfn")

    def _buffer_device(self) -> torch.device:
        return next(iter(self.buffers())).device

    # ---- forward ----
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            check_input(x, self.config.hidden_size, "MetraleFfn input")
        # Under torch.compile the operator's body checks x when the graph runs: an error raised
        # while tracing would reach the caller wrapped in Dynamo's report.
        return torch.ops.metrale.dense_ffn(x, self._handle)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """The operator's body: y [..., hidden] bf16 on x's device (see the module docstring)."""
        check_input(x, self.config.hidden_size, "MetraleFfn input")
        dev = self._buffer_device()
        if dev != x.device:
            raise MetraleError(f"MetraleFfn: input on {x.device}, the module's weights on {dev} (use .to())")
        h = self.config.hidden_size
        x2 = x.detach().reshape(-1, h)
        m = x2.shape[0]
        if m == 0:
            return x.new_empty(x.shape)
        layer, ctx = self.layer_for(x.device, m)
        if x.device.type == "cpu":
            xn = x2.contiguous().view(torch.int16).numpy().view(BF16)
            layer.route(m)[1](xn, ctx)
            y = np.ascontiguousarray(ctx.buffers.output()[:m])
            return torch.from_numpy(y.view(np.int16).copy()).view(torch.bfloat16).reshape(x.shape)
        import cupy

        from metrale.cuda.torch_stream import cupy_stream

        if not x2.is_contiguous() or x2.data_ptr() % 16:
            x2 = x2.clone(memory_format=torch.contiguous_format)  # torch's allocator: graph-safe
        out = torch.empty((m, h), dtype=torch.bfloat16, device=x.device)
        stream = torch.cuda.current_stream(x.device)
        with (
            cupy.cuda.Device(x.device.index),
            cupy_stream(stream, x.device.index),
            cupy.cuda.using_allocator(torch_allocator()),
        ):
            layer.route(m)[1](x2, ctx)
            dst = cupy.from_dlpack(out.view(torch.int16)).view(cupy.uint16)
            cupy.copyto(dst, ctx.buffers.output()[:m])
        return out.reshape(x.shape)

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"hidden={c.hidden_size}, intermediate={c.intermediate_size}, "
            f"format={self.format}, activation={self.activation.value}"
        )


def _torch_malloc(size: int, device: int) -> int:
    return int(torch.cuda.caching_allocator_alloc(size, device, torch.cuda.current_stream(device)))


def _torch_free(ptr: int, device: int, _finalizing: Any = sys.is_finalizing) -> None:
    # bound at import: CuPy frees persistent buffers while the interpreter shuts down, after
    # torch's modules are cleared; the process exit returns that memory to the driver
    if not _finalizing():
        torch.cuda.caching_allocator_delete(ptr)


@functools.cache
def torch_allocator() -> Any:
    """A CuPy allocator (``cupy.cuda.using_allocator``) drawing from torch's caching allocator
    on torch's current stream: capture-aware, so CuPy buffers made inside ``torch.cuda.graph``
    live in the graph's pool."""
    import cupy

    return cupy.cuda.memory.PythonFunctionAllocator(_torch_malloc, _torch_free).malloc


def check_input(x: torch.Tensor, hidden: int, name: str) -> None:
    """bf16 ``[..., hidden]`` on a CPU or CUDA device, else MetraleError naming ``name``."""
    if not isinstance(x, torch.Tensor):
        raise MetraleError(f"{name}: expected a torch tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise MetraleError(f"{name}: layout {x.layout}, want a dense (strided) tensor")
    if x.dtype != torch.bfloat16:
        raise MetraleError(f"{name}: dtype {x.dtype}, want torch.bfloat16")
    if x.device.type not in ("cpu", "cuda"):
        raise MetraleError(f"{name}: device {x.device} is not supported (want cpu or cuda)")
    if x.dim() < 1 or x.shape[-1] != hidden:
        raise MetraleError(f"{name}: shape {list(x.shape)}, want [..., {hidden}]")


#: Handles are positive int64 (the operator's ``int`` argument).
_MAX_HANDLE = 2**63 - 1


def dense_ffn(x: torch.Tensor, handle: int) -> torch.Tensor:
    """``metrale::dense_ffn(x, handle)``: the FFN of the ``MetraleFfn`` registered as ``handle``
    over bf16 ``x [..., hidden]``, arguments checked (MetraleError) before the dispatcher sees them."""
    if not isinstance(x, torch.Tensor):
        raise MetraleError(f"metrale::dense_ffn: x is {a_kind(x)}, want a torch tensor")
    if isinstance(handle, bool) or not isinstance(handle, int) or not 0 < handle <= _MAX_HANDLE:
        raise MetraleError(
            f"metrale::dense_ffn: handle {handle!r} is not a module handle (an int in 1..2**63-1)"
        )
    return torch.ops.metrale.dense_ffn(x, handle)


@torch.library.custom_op("metrale::dense_ffn", mutates_args=())
def _dense_ffn_op(x: torch.Tensor, handle: int) -> torch.Tensor:
    """The operator's body: the FFN of the ``MetraleFfn`` registered as ``handle``."""
    mod = _MODULES.get(handle)
    if mod is None:
        raise MetraleError(f"metrale::dense_ffn: no live MetraleFfn with handle {handle}")
    return mod.run(x)


@_dense_ffn_op.register_fake
def _dense_ffn_fake(x: torch.Tensor, handle: int) -> torch.Tensor:
    return x.new_empty(x.shape)


_NO_BACKWARD = "metrale::dense_ffn is inference only: it has no backward (run under torch.no_grad())"


@torch.library.custom_op("metrale::dense_ffn_no_backward", mutates_args=())
def _no_backward_op(grad: torch.Tensor) -> torch.Tensor:
    """The backward of ``metrale::dense_ffn``: raises when it runs. An operator (not a raise in
    the formula) so that tracing the backward, as AOTAutograd does for a compiled forward with
    grad enabled, succeeds and only running it fails."""
    raise MetraleError(_NO_BACKWARD)


@_no_backward_op.register_fake
def _no_backward_fake(grad: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(grad)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    return _no_backward_op(grad), None


def _setup_context(ctx: Any, inputs: Any, output: Any) -> None:
    return None


torch.library.register_autograd("metrale::dense_ffn", _backward, setup_context=_setup_context)
