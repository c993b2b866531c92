"""Tensor parallelism on ``torch.distributed`` with the single-device bits for every TP size.

gate/up split by output columns in whole 16-element blocks; the down projection split by K
(``"k"``, reference backend: the ranks exchange the roots of their aligned subtrees and finish
the same tree) or by output rows (``"n"``, any backend, the CUDA one's: the ranks all-gather h,
run the single-device kernel over the full K for their rows and all-gather y), arithmetic.md
§ tp. ``tp_layer`` builds a rank's ``DenseFfnLayer``; ``TpMetraleFfn`` (from
``metrale.distributed.module``, imported on first use since it needs torch) is a rank's
``MetraleFfn``.
"""

from typing import Any

from metrale.distributed.backend import TpBackend
from metrale.distributed.layer import sliced_tp_layer, tp_layer
from metrale.distributed.shard import (
    KShard,
    LoraKShard,
    LoraNShard,
    NShard,
    block_ranges,
    default_split,
    k_slice,
    n_slice,
    row_ranges,
    rows_slice,
)

__all__ = [
    "KShard",
    "LoraKShard",
    "LoraNShard",
    "NShard",
    "TpBackend",
    "TpMetraleFfn",
    "block_ranges",
    "default_split",
    "k_slice",
    "n_slice",
    "row_ranges",
    "rows_slice",
    "sliced_tp_layer",
    "tp_layer",
]


def __getattr__(name: str) -> Any:
    if name == "TpMetraleFfn":
        from metrale.distributed.module import TpMetraleFfn  # torch only when used

        return TpMetraleFfn
    raise AttributeError(f"module 'metrale.distributed' has no attribute {name!r}")
