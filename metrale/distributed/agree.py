"""The ranks of a tensor-parallel group agree before they exchange data.

At construction every rank enters one ``all_gather_object`` over the group with what its layer
is (``facts``: the whole config, TP size, split, formats, activation, a weights fingerprint)
or, if its own construction failed, the error; every rank then raises the same
``TpDisagreement`` when a rank failed or a fact differs, so no rank is left waiting in a
collective for one that gave up. Per call, host (gloo) groups all-gather the row count
(``agree_rows``) before the first collective of a forward (and ``TpMetraleFfn`` whether each
rank holds its built layer, before that).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from metrale.distributed.shard import KShard, NShard
from metrale.errors import MetraleError, TpDisagreement

#: The prefix of every agreement error (the same on every rank whichever step failed).
WHERE = "tensor parallel"


def process_group(group: Any) -> Any:
    """A process group from a group, a 1-D ``DeviceMesh`` or None (the default group)."""
    return group.get_group() if hasattr(group, "get_group") else group


def _initialized() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def agree(group: Any, where: str, facts: dict[str, Any] | None, error: str | None = None) -> None:
    """One collective over ``group``: every rank's ``facts`` (or its construction ``error``).
    Raises the same TpDisagreement on every rank if a rank failed or the facts differ."""
    import torch.distributed as dist

    size = dist.get_world_size(group)
    got: list[Any] = [None] * size
    dist.all_gather_object(got, {"error": error, "facts": facts}, group=group)
    failed = [(r, g["error"]) for r, g in enumerate(got) if g["error"] is not None]
    if failed:
        ranks = ", ".join(str(r) for r, _ in failed)
        raise TpDisagreement(f"{where}: rank {ranks} of {size} failed to build its part: {failed[0][1]}")
    for key in got[0]["facts"]:
        vals = [g["facts"].get(key) for g in got]
        if any(v != vals[0] for v in vals):
            each = "; ".join(f"rank {r}: {v}" for r, v in enumerate(vals))
            raise TpDisagreement(f"{where}: the ranks disagree on {key} ({each})")


@contextlib.contextmanager
def failing_together(group: Any, where: str) -> Iterator[None]:
    """Run a rank's construction; an error inside it is sent to the other ranks' agreement
    (``agree``) and raised as the same TpDisagreement on every rank. Errors raised by an
    agreement itself pass through (their collective has run)."""
    try:
        yield
    except TpDisagreement:
        raise
    except Exception as e:
        if not _initialized() or _group_rank(group) < 0:
            raise  # no group to tell: the error stays this process's
        msg = str(e) if isinstance(e, MetraleError) else f"{type(e).__name__}: {e}"
        agree(group, where, None, msg.splitlines()[0] if msg else type(e).__name__)
        raise  # unreachable: agree raised


def _group_rank(group: Any) -> int:
    import torch.distributed as dist

    try:
        return int(dist.get_rank(group))
    except (RuntimeError, ValueError):
        return -1


def fingerprint(weights: list[Any], whole: bool) -> str:
    """A hash of gate, up and down: every array's bytes (``whole``: every rank holds the whole
    weights), else only what every rank's slices share (scalars: per-tensor scales, input
    scales), as the slices themselves differ by rank."""
    h = hashlib.blake2b(digest_size=12)
    for w in weights:
        w = w.weight if isinstance(w, (KShard, NShard)) else w
        for f in dataclasses.fields(w) if dataclasses.is_dataclass(w) else ():
            if f.name == "name":
                continue
            v = getattr(w, f.name)
            if isinstance(v, (np.ndarray, np.generic)):
                a = np.asarray(v)
                if whole or a.size == 1:
                    h.update(f"{f.name}{a.dtype}{a.shape}".encode())
                    h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
            elif isinstance(v, (int, float, str, bool)) or v is None:
                h.update(f"{f.name}={v!r}".encode())
    return h.hexdigest()


def all_gather_into(out: Any, t: Any, group: Any) -> None:
    """``dist.all_gather_into_tensor(out, t, group)``, the collective the contract names, without
    the FutureWarning torch versions that prefer ``all_gather_single`` print on every call."""
    import torch.distributed as dist

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        dist.all_gather_into_tensor(out, t, group=group)


def agree_rows(group: Any, m: int, where: str, error: str | None = None) -> None:
    """All-gather this rank's row count ``m`` (a CPU int64, gloo) and raise the same
    TpDisagreement on every rank when they differ. A rank whose input was refused passes its
    ``error`` (sent as row count -1); every rank then gathers the errors (one more collective,
    on the error path only) and raises the same TpDisagreement naming that rank and its error."""
    import torch
    import torch.distributed as dist

    size = dist.get_world_size(group)
    out = torch.empty(size, dtype=torch.int64)
    all_gather_into(out, torch.tensor([-1 if error is not None else m], dtype=torch.int64), group)
    rows = [int(v) for v in out.tolist()]
    if any(r < 0 for r in rows):
        got: list[Any] = [None] * size
        dist.all_gather_object(got, error, group=group)
        bad = [r for r, v in enumerate(rows) if v < 0]
        raise TpDisagreement(
            f"{where}: rank {', '.join(map(str, bad))} of {size} refused its input: {got[bad[0]]}"
        )
    if any(r != rows[0] for r in rows):
        each = ", ".join(f"rank {r}: {v}" for r, v in enumerate(rows))
        raise TpDisagreement(
            f"{where}: the ranks run different row counts ({each}); every rank takes the same x"
        )
