"""The PNG of the benchmark's JSON: µs per FFN against m, one panel per format (rows) and
shape (columns), with the format's memory floor and the torch peers of the same run.

    python -m metrale.bench.plot bench_ffn.json docs/bench_ffn.png

Needs matplotlib (``pip install matplotlib``); the benchmark calls ``render`` itself where
matplotlib imports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PEER_STYLE = {"bf16": "o", "bf16-2": "s", "int4": "^", "int8": "v", "fp8": "D"}


def _series(rows: dict[Any, Any]) -> tuple[list[int], list[float]]:
    pts = sorted((int(m), r["us"]) for m, r in rows.items() if isinstance(r, dict) and r.get("us"))
    return [p[0] for p in pts], [p[1] for p in pts]


def render(res: dict[str, Any], path: Path) -> None:
    """Write the plot of benchmark result ``res`` (the JSON document) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    shapes = list(res["shapes"].items())
    fmts = list(dict.fromkeys(f for _, sd in shapes for f in sd["formats"]))
    fig, axes = plt.subplots(
        len(fmts), len(shapes), figsize=(5.2 * len(shapes), 2.9 * len(fmts)), squeeze=False, sharex=True
    )
    for j, (shape, sd) in enumerate(shapes):
        for i, fmt in enumerate(fmts):
            ax = axes[i][j]
            fd = sd["formats"].get(fmt)
            for kind, p in sd["peers"].items():
                ms, us = _series(p.get("times", {}))
                if ms:
                    ax.plot(
                        ms,
                        us,
                        ls="--",
                        lw=1,
                        marker=PEER_STYLE.get(kind, "x"),
                        ms=3,
                        color="0.55",
                        alpha=0.8,
                        label=p["label"],
                    )
            if fd is not None:
                ms, us = _series(fd["rows"])
                ax.plot(
                    ms, us, lw=2, marker="o", ms=4, color="C0", label=f"metrale {fd['label']} (bit-exact)"
                )
                if fd.get("floor_us"):
                    ax.axhline(
                        fd["floor_us"],
                        color="C3",
                        lw=1,
                        ls=":",
                        label=f"memory floor {fd['floor_us']:.1f} µs",
                    )
                failed = [int(m) for m, r in fd["rows"].items() if "us" not in r]
                if failed:
                    ax.text(0.02, 0.92, f"FAILED m={failed}", transform=ax.transAxes, color="red", fontsize=7)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_title(
                f"{shape} ({sd['hidden']}×{sd['intermediate']}): {fd['label'] if fd else fmt}", fontsize=9
            )
            ax.grid(True, which="both", lw=0.3, alpha=0.5)
            ax.tick_params(labelsize=7)
            if i == len(fmts) - 1:
                ax.set_xlabel("m (rows)", fontsize=8)
                ticks = sorted(
                    {int(m) for _, sd in shapes for fd in sd["formats"].values() for m in fd["rows"]}
                )
                ax.set_xticks(ticks)
                ax.set_xticklabels([str(t) for t in ticks], rotation=90)
            if j == 0:
                ax.set_ylabel("µs per FFN", fontsize=8)
            if i == 0 and j == 0:
                ax.legend(fontsize=6, loc="upper left")
            elif fd is not None:
                h, lab = ax.get_legend_handles_labels()
                keep = [k for k, s in enumerate(lab) if s.startswith(("metrale", "memory"))]
                ax.legend([h[k] for k in keep], [lab[k] for k in keep], fontsize=6, loc="upper left")
    fig.suptitle(
        f"FFN µs vs m — {res['gpu']}, {res['date']}\nmetrale blue (bit-exact), torch peers dashed grey",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """``python -m metrale.bench.plot JSON PNG``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__)
        return 2
    render(json.loads(Path(args[0]).read_text()), Path(args[1]))
    print(f"wrote {args[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
