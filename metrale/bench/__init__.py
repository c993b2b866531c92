"""The FFN benchmark (``metrale bench``): every format and mode metrale serves, timed on the
CUDA backend through the layer's own entry points, with torch peers and bandwidth ceilings
measured in the same run, and no figure reported unless its bits equal the reference's.

Modules: ``cases`` (shapes, formats, weights), ``measure`` (clocks, L2 policy, ceilings),
``peers`` (torch), ``gate`` (exactness), ``kernels`` (single-kernel timings), ``report``
(JSON, Markdown, targets), ``plot`` (PNG), ``options`` and ``run`` (the command).
Needs CuPy and torch on a GPU; ``--dry-run`` runs everything on the CPU (reference backend,
tiny shape, host timers).
"""

from __future__ import annotations

from metrale.bench.run import main

__all__ = ["main"]
