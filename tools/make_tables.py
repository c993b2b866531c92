"""Regenerate the SiLU/GELU tables shipped in metrale/reference/data (arithmetic.md § tables)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from metrale.reference.tables import ACTIVATIONS, TABLE_FILES, compute_table

DATA = Path(__file__).resolve().parents[1] / "metrale" / "reference" / "data"


def main() -> None:
    for name in ACTIVATIONS:
        raw = compute_table(name).astype("<f4").tobytes()
        (DATA / TABLE_FILES[name]).write_bytes(raw)
        print(TABLE_FILES[name], hashlib.sha256(raw).hexdigest())


if __name__ == "__main__":
    main()
