"""metrale inside PyTorch: ``MetraleFfn`` (one device), ``TpMetraleFfn`` (a tensor-parallel
rank's module) and the ``metrale::dense_ffn`` operator both run through (docs/torch.md).

The floor above the single-device module (``metrale.ffn_module``) and the tensor-parallel one
(``metrale.distributed.module``): importing it installs ``TpMetraleFfn.from_module`` as
``MetraleFfn.tensor_parallel``'s factory, so neither module imports the other's floor upward.
"""

from __future__ import annotations

from metrale.distributed.module import TpMetraleFfn
from metrale.ffn_module import PROJS, MetraleFfn, check_input, dense_ffn, torch_allocator

__all__ = ["PROJS", "MetraleFfn", "TpMetraleFfn", "check_input", "dense_ffn", "torch_allocator"]
