"""Fused siblings: Linears that serving engines run as one layer (vLLM's ``gate_up_proj`` and
``qkv_proj``) and that therefore share NVFP4's global scale, as ModelOpt exports them
(docs/arithmetic.md, "NVFP4 fused siblings")."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from metrale.errors import MetraleError

#: Module-name tails fused into one layer, per parent module.
FUSED = (("gate_proj", "up_proj"), ("q_proj", "k_proj", "v_proj"))
_ROWS = 256


def sibling_groups(modules: Iterable[str]) -> list[tuple[str, ...]]:
    """Groups (two or more, in FUSED order) of ``modules`` with one parent and tails from one
    FUSED tuple: ``model.layers.0.mlp.gate_proj`` + ``...up_proj``."""
    present = set(modules)
    out = []
    for m in sorted(present):
        parent, _, tail = m.rpartition(".")
        for tails in FUSED:
            if tail == tails[0]:
                group = tuple(f"{parent}.{t}" for t in tails if f"{parent}.{t}" in present)
                if len(group) > 1:
                    out.append(group)
    return out


def abs_max(w: np.ndarray, name: str | None = None) -> float:
    """max |w| in f32 (exact for bf16/f16/f32 sources), read in row chunks. With ``name``, a
    NaN or Inf is a MetraleError naming tensor ``name`` and the first place holding one."""
    m = np.float32(0.0)
    for r0 in range(0, w.shape[0], _ROWS):
        chunk = np.asarray(w[r0 : r0 + _ROWS]).astype(np.float32)
        if not chunk.size:
            continue
        if name is not None:
            bad = ~np.isfinite(chunk)
            if bad.any():
                r, *c = np.argwhere(bad)[0]
                at = ", ".join(str(int(x)) for x in (r0 + r, *c))
                total = int(bad.sum()) + sum(
                    int((~np.isfinite(np.asarray(w[q : q + _ROWS]).astype(np.float32))).sum())
                    for q in range(r0 + _ROWS, w.shape[0], _ROWS)
                )
                raise MetraleError(f"{name}: non-finite weight {chunk[bad][0]} at [{at}] ({total} in all)")
        m = max(m, np.float32(np.abs(chunk).max()))
    return float(m)


def shared_amax(modules: Iterable[str], tensor: Callable[[str], np.ndarray]) -> dict[str, float]:
    """module -> the amax its sibling group shares (the group's largest), for grouped modules;
    ``tensor(module)`` returns the module's source weight."""
    out: dict[str, float] = {}
    for group in sibling_groups(modules):
        a = max(abs_max(tensor(m), f"{m}.weight") for m in group)
        out.update(dict.fromkeys(group, a))
    return out
