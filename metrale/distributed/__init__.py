"""Tensor parallelism on ``torch.distributed`` with the single-device bits for every TP size.

gate/up split by output columns and down by K in whole 16-element blocks; the down projection's
ranks exchange the roots of their aligned subtrees and finish the same tree
(arithmetic.md § tp). ``tp_layer`` builds a rank's ``DenseFfnLayer``.
"""

from metrale.distributed.backend import TpBackend
from metrale.distributed.layer import tp_layer
from metrale.distributed.shard import KShard, LoraKShard, block_ranges, k_slice, rows_slice

__all__ = ["KShard", "LoraKShard", "TpBackend", "block_ranges", "k_slice", "rows_slice", "tp_layer"]
