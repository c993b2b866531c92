"""The benchmark's outputs: the JSON document (every number, device, date, command, verdicts
on the targets) and its Markdown tables. Pure functions of the collected results.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from metrale.bench.cases import FORMATS
from metrale.bench.gate import Cell
from metrale.bench.measure import floor_us
from metrale.reference.formats.spec import FORMAT_ALIASES

#: Targets at the Qwen3-8B shape: a format over an m range against a multiple of a peer's time
#: at the same m, measured in the same run (``peer_ratio``, ``peer``; bf16 = cuBLAS with gate
#: and up fused, gl-* = gemlite), or of a format's memory floor (``floor_ratio``, ``floor_of``).
#: The serving-speed targets: decode and verify rows up to 64, prefill above.
_BLOCK_SCALED = ("nvfp4", "w4a4", "q2_0")
TARGETS: list[dict[str, Any]] = [
    *(
        t
        for f in _BLOCK_SCALED
        for t in (
            {"format": f, "m": (1, 64), "peer_ratio": 1.0, "peer": "bf16"},
            {"format": f, "m": (65, 256), "peer_ratio": 1.5, "peer": "bf16"},
            {"format": f, "m": (257, None), "peer_ratio": 2.5, "peer": "bf16"},
            {"format": f, "m": (1, None), "peer_ratio": 1.0, "peer": "gl-w4"},
            {"format": f, "m": (1, None), "peer_ratio": 1.0, "peer": "gl-w2"},
        )
    ),
    *(
        t
        for f in ("fp8", "bf16")
        for t in (
            {"format": f, "m": (1, 64), "peer_ratio": 1.2, "peer": "bf16"},
            {"format": f, "m": (65, None), "peer_ratio": 3.0, "peer": "bf16"},
            {"format": f, "m": (1, None), "peer_ratio": 1.0, "peer": "gl-w8fp8"},
        )
    ),
    {"format": "w8a8", "m": (1, None), "peer_ratio": 0.75, "peer": "bf16"},
    {"format": "w8a8", "m": (1, None), "peer_ratio": 1.0, "peer": "gl-a8w8"},
]
#: Formats whose FFN the epilogue-rate table reports: every output is a tree over 16-element
#: blocks, 3 m H I / 16 block values per FFN.
EPILOGUE_FORMATS = (*_BLOCK_SCALED, "fp8", "bf16")
TARGET_SHAPE = "qwen3-8b"
#: The performance page whose tables ``metrale bench --report`` regenerates, and the committed
#: result it reads (paths from the checkout's root).
REPORT_PAGE = Path("docs/performance.md")
REPORT_JSON = Path("docs/bench/bench_ffn.json")
#: The lines around the generated block (everything between them is ``markdown(doc)``).
BLOCK_BEGIN = "<!-- begin generated tables: `metrale bench --report` writes them from {json}; do not edit -->"
BLOCK_END = "<!-- end generated tables -->"


def versions() -> dict[str, str]:
    """Python, numpy and (where imported) CuPy and torch versions."""
    v = {"python": sys.version.split()[0], "numpy": np.__version__}
    for mod in ("cupy", "torch"):
        m = sys.modules.get(mod)
        if m is not None:
            v[mod] = getattr(m, "__version__", "?")
    return v


def format_rows(
    cells: list[Cell], weight_bytes: int, ceil: dict[str, Any], fastest: dict[int, float]
) -> dict:
    """Per m: entry, launches, verdict, rows checked and (when exact) the timing with its
    bandwidth, ratio to the floor and speed-up against the fastest peer."""
    read_bw, copy_bw = ceil["read_Bps"], ceil["copy_Bps"]
    floor = floor_us(weight_bytes, read_bw)
    rows: dict[int, Any] = {}
    for c in sorted(cells, key=lambda c: c.m):
        r: dict[str, Any] = {
            "entry": c.entry,
            "launches": c.launches,
            "exact": bool(c.exact),
            "rows_checked": list(c.rows) if c.rows else "all",
            "layers": c.layers,
        }
        if c.exact and c.timing is not None:
            us = c.timing.us
            r.update(c.timing.js())
            r["weight_TBps"] = round(weight_bytes / (us * 1e-6) / 1e12, 3)
            r["of_read_bw"] = round(weight_bytes / (us * 1e-6) / read_bw, 3)
            r["of_copy_bw"] = round(weight_bytes / (us * 1e-6) / copy_bw, 3)
            r["x_floor"] = round(us / floor, 3)
            if c.m in fastest:
                r["speedup_vs_fastest_peer"] = round(fastest[c.m] / us, 3)
        else:
            r["status"] = "FAILED"
            r["error"] = c.error or "not exact"
        rows[c.m] = r
    return rows


def assemble(
    meta: dict[str, Any],
    shapes: dict[str, tuple[int, int]],
    ceil: dict[str, Any],
    cells: dict[tuple[str, str, int], Cell],
    fmt_info: dict[tuple[str, str], dict[str, Any]],
    peer_rows: dict[tuple[str, str], dict[str, Any]],
    kernels: list[dict[str, Any]],
) -> dict[str, Any]:
    """The JSON document. ``meta`` carries gpu, host, command, options, l2_bytes, timing."""
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "host": platform.node(),
        **meta,
        "software": versions(),
        "ceilings": {
            (k[:-4] + "_GBps" if k.endswith("_Bps") else k): (round(v / 1e9, 1) if k.endswith("_Bps") else v)
            for k, v in ceil.items()
        },
        "ceilings_note": "GB/s; copy counts bytes read + written; read_* are read-only streams",
        "shapes": {},
        "kernels": kernels,
    }
    for shape, (hidden, inter) in shapes.items():
        sd: dict[str, Any] = {"hidden": hidden, "intermediate": inter, "formats": {}, "peers": {}}
        sd["run"] = {"date": res["date"], "command": res.get("command", ""), "ceilings": res["ceilings"]}
        fastest: dict[int, float] = {}
        for (s, kind), row in peer_rows.items():
            if s != shape:
                continue
            sd["peers"][kind] = row
            for m, t in row["times"].items():
                if t.get("us"):
                    fastest[m] = min(fastest.get(m, math.inf), t["us"])
        sd["fastest_peer_us"] = fastest
        for (s, fmt), info in fmt_info.items():
            if s != shape:
                continue
            chain = " (chain)" if meta.get("revision") == "chain" else ""
            fd: dict[str, Any] = {"label": FORMATS[fmt].label + chain, **info}
            if "weight_bytes" in info:
                fd["floor_us"] = floor_us(info["weight_bytes"], ceil["read_Bps"])
            mine = [c for (cs, cf, _), c in cells.items() if cs == shape and cf == fmt]
            fd["rows"] = format_rows(mine, info.get("weight_bytes", 0), ceil, fastest)
            sd["formats"][fmt] = fd
        res["shapes"][shape] = sd
    res["targets"] = evaluate_targets(res)
    res["failed"] = [
        f"{c.shape} {FORMATS[c.fmt].label} m={c.m}: {c.error}" for c in cells.values() if not c.exact
    ]
    return res


def load(path: Path) -> dict[str, Any]:
    """A document written by ``json.dumps`` with its row-count keys made ints again (and older
    format names, ``FORMAT_ALIASES``, made the current ones)."""
    doc = json.loads(Path(path).read_text())

    def ints(d: dict[str, Any]) -> dict[int, Any]:
        return {int(k): v for k, v in d.items()}

    for sd in doc["shapes"].values():
        sd["formats"] = {FORMAT_ALIASES.get(k, k): v for k, v in sd["formats"].items()}
        sd["fastest_peer_us"] = ints(sd.get("fastest_peer_us", {}))
        for fd in sd["formats"].values():
            fd["rows"] = ints(fd["rows"])
        for p in [
            *sd["peers"].values(),
            *(q for run in sd.get("run_peers", {}).values() for q in run.values()),
        ]:
            p["times"] = ints(p.get("times", {}))
            if isinstance(p.get("layers"), dict):
                p["layers"] = ints(p["layers"])
    for t in doc.get("targets", []):
        t["per_m"] = ints(t["per_m"])
    return doc


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document from several runs' documents: each row count of each (shape, format) and each
    (shape, peer) from the last run that measured it (a row or time from an earlier run than its
    entry's names its run: ``run_date``), the entry's label, bytes and floor from its last run,
    every run's date, command and ceilings in the shape's ``runs`` (floors, ratios and speed-ups
    stay those of each row's own run; a target is judged where a row and the peer time it names
    come from one run: ``run_peers`` keeps every run's peers as measured); the single-kernel
    timings of every run. A merged document may be merged again: its rows keep their runs, its
    ``merged_from`` its list."""
    if not docs:
        raise ValueError("merge: no documents")
    revisions = {d.get("revision", "contract") for d in docs}
    if len(revisions) > 1:
        raise ValueError("merge: results of the contract and of the chain's preview (--chain) do not merge")
    out = {k: v for k, v in docs[-1].items() if k not in ("shapes", "kernels", "targets", "failed")}
    out["shapes"], out["kernels"], out["merged_from"] = {}, [], []
    for d in docs:
        for shape, sd in d["shapes"].items():
            tgt = out["shapes"].setdefault(
                shape,
                {"hidden": sd["hidden"], "intermediate": sd["intermediate"], "formats": {}, "peers": {}},
            )
            runs = tgt.setdefault("runs", {})
            runs.update(sd.get("runs", {}))
            # every run's peers as measured, for the targets of rows a later run did not measure again
            run_peers = tgt.setdefault("run_peers", {})
            for date, peers in sd.get("run_peers", {}).items():
                run_peers.setdefault(date, {}).update(peers)
            for key, per_m in (("formats", "rows"), ("peers", "times")):
                for name, entry in sd[key].items():  # a merged document's entries keep their run
                    run = entry.get("run") or sd.get("run", {})
                    new = {**entry, "run": run}
                    runs.setdefault(run.get("date", "?"), run)
                    if key == "peers" and "run_peers" not in sd:  # a merged document brought its own
                        run_peers.setdefault(run.get("date", "?"), {})[name] = new
                    tgt[key][name] = _merged_entry(tgt[key].get(name), new, per_m)
        out["kernels"] += d.get("kernels", [])
        out["merged_from"] += d.get("merged_from") or [
            {"date": d["date"], "command": d["command"], "shapes": list(d["shapes"])}
        ]
    for sd in out["shapes"].values():
        fastest: dict[int, float] = {}
        for p in sd["peers"].values():
            for m, t in p.get("times", {}).items():
                if t.get("us"):
                    fastest[m] = min(fastest.get(m, math.inf), t["us"])
        sd["fastest_peer_us"] = fastest
    out["gpu"] = " / ".join(dict.fromkeys(d["gpu"] for d in docs))
    out["command"] = " ; ".join(d["command"] for d in docs)
    out["targets"] = evaluate_targets(out)
    out["skipped"] = [x for d in docs for x in d.get("skipped", [])]
    out["failed"] = [
        f"{shape} {fd['label']} m={m}: {r.get('error', 'not exact')}"
        for shape, sd in out["shapes"].items()
        for fd in sd["formats"].values()
        for m, r in fd["rows"].items()
        if "us" not in r
    ]
    return out


def compare(docs: list[dict[str, Any]], names: list[str]) -> str:
    """Markdown: for every (shape, format, m) the runs ``docs`` (named ``names``) timed, each
    run's µs (with × its own bf16 cuBLAS peer at that m where it timed one; "FAILED" for a cell
    not exact, blank where the run lacks it) and its ratio to the first run's µs: variants
    measured in alternating runs side by side."""

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    heads = [*names, *(f"{n} / {names[0]}" for n in names[1:])]
    lines = [row(["shape", "format", "m", *heads]), row(["---", "---", "---:", *("---:" for _ in heads)])]
    shapes = list(dict.fromkeys(s for d in docs for s in d["shapes"]))
    for shape in shapes:
        sds = [d["shapes"].get(shape) for d in docs]
        fmts = list(dict.fromkeys(f for sd in sds if sd for f in sd["formats"]))
        for fmt in fmts:
            fds = [sd["formats"].get(fmt) if sd else None for sd in sds]
            label = next(fd["label"] for fd in fds if fd)
            ms = sorted({m for fd in fds if fd for m in fd["rows"]})
            for m in ms:
                cells, us = [], []
                for sd, fd in zip(sds, fds, strict=True):
                    r = fd["rows"].get(m) if fd else None
                    if r is None or not r.get("exact") or r.get("us") is None:
                        cells.append("FAILED" if r is not None else "")
                        us.append(None)
                        continue
                    peer = sd["peers"].get("bf16", {}).get("times", {}).get(m) if sd else None
                    ratio = f" ({r['us'] / peer['us']:.2f}×)" if peer and peer.get("us") else ""
                    cells.append(f"{r['us']:,.1f}{ratio}")
                    us.append(r["us"])
                rel = [f"{u / us[0]:.3f}" if u is not None and us[0] else "" for u in us[1:]]
                lines.append(row([shape, label, str(m), *cells, *rel]))
    return "\n".join(lines)


def _merged_entry(old: dict[str, Any] | None, new: dict[str, Any], per_m: str) -> dict[str, Any]:
    """``new`` (a later run's format or peer entry) with the row counts only ``old`` holds kept,
    each naming its run (``run_date``)."""
    if old is None or not old.get(per_m) or per_m not in new:
        return new
    kept = {m: {**r, "run_date": _row_date(old, r)} for m, r in old[per_m].items() if m not in new[per_m]}
    if not kept:
        return new
    rows = {**kept, **new[per_m]}
    return {**new, per_m: {m: rows[m] for m in sorted(rows)}}


def _run_date(entry: dict[str, Any]) -> str | None:
    """The date of the run a merged document took a format or peer from (None: unmerged)."""
    return (entry.get("run") or {}).get("date")


def _row_date(entry: dict[str, Any], row: dict[str, Any]) -> str | None:
    """The date of the run a format row or peer time comes from: its own ``run_date``, else its
    entry's."""
    return row.get("run_date") or _run_date(entry)


def _in(m: int, span: tuple[int, int | None]) -> bool:
    return span[0] <= m and (span[1] is None or m <= span[1])


def evaluate_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with measured rows at ``TARGET_SHAPE``: met, the figure per m, the worst."""
    sd = res["shapes"].get(TARGET_SHAPE)
    if sd is None:
        return []
    out = []
    for t in TARGETS:
        fd = sd["formats"].get(t["format"])
        if fd is None:
            continue
        rows = {m: r for m, r in fd["rows"].items() if _in(int(m), t["m"])}
        peer: dict[int, float] = {}
        if "peer" in t:  # each row against the peer of its own run (a merged document's rows differ)
            peer = {m: us for m, r in rows.items() if (us := _peer_us(sd, t["peer"], fd, m, r))}
            rows = {m: r for m, r in rows.items() if m in peer}
        if not rows:
            continue
        met, figures = True, {}
        for m, r in rows.items():
            if "us" not in r:
                met, figures[m] = False, "FAILED"
                continue
            if "floor_ratio" in t:
                v, limit = r["us"] / sd["formats"].get(t["floor_of"], fd)["floor_us"], t["floor_ratio"]
            else:
                v, limit = r["us"] / peer[m], t["peer_ratio"]
            figures[m] = round(v, 2)
            met &= v <= limit
        nums = [v for v in figures.values() if not isinstance(v, str)]
        lo, hi = min(rows), max(rows)
        span = f"m = {lo}" if lo == hi else f"m = {lo}..{hi}"
        what = (
            f"≤ {t['floor_ratio']}× the {FORMATS[t['floor_of']].label} floor"
            if "floor_ratio" in t
            else f"≤ {t['peer_ratio']}× the time of {sd['peers'].get(t['peer'], {}).get('label', t['peer'])}"
        )
        out.append(
            {
                "format": t["format"],
                "target": f"{FORMATS[t['format']].label}: {what}, {span}",
                "met": met,
                "per_m": figures,
                "worst": max(nums) if nums else None,
            }
        )
    return out


def _peer_us(sd: dict[str, Any], peer: str, fd: dict[str, Any], m: int, r: dict[str, Any]) -> float | None:
    """µs of ``peer`` at m in the run format row r of ``fd`` comes from (None: not measured there)."""
    date = _row_date(fd, r)
    for pd in (sd["peers"].get(peer, {}), sd.get("run_peers", {}).get(date or "?", {}).get(peer, {})):
        pt = pd.get("times", {}).get(m)
        if pt is not None and _row_date(pd, pt) == date:
            return pt.get("us")
    return None


def _us(t: dict[str, Any] | None) -> str:
    if t is None:
        return ""
    if "us" not in t:
        return "FAILED" if "status" in t else "n/a"
    return f"{t['us']:,.1f}" + ("†" if t.get("method") == "loop" else "")


def _runs(sd: dict[str, Any]) -> list[str]:
    """A merged shape's runs: date, command, ceilings and what each measured (floors, ratios
    and speed-ups are within each run)."""
    runs: dict[str, tuple[dict[str, Any], list[str]]] = {}
    known = sd.get("runs", {})
    for entry in (*sd["formats"].values(), *sd["peers"].values()):
        own = _run_date(entry) or "?"
        per_m = entry.get("rows", entry.get("times", {}))
        for date in dict.fromkeys([own, *(_row_date(entry, r) or "?" for r in per_m.values())]):
            run = known.get(date) or (entry.get("run") if date == own else None) or {}
            runs.setdefault(date, (run, []))[1].append(entry["label"])
    out = ["Merged from runs (ratios and speed-ups are within each run):", ""]
    for date, (run, labels) in runs.items():
        c = run.get("ceilings", {})
        bw = f"read-only {c['read_GBps'] / 1e3:.2f} TB/s" if "read_GBps" in c else "ceilings unknown"
        out.append(f"* {date}, `{run.get('command', '?')}` ({bw}): {', '.join(labels)}")
    return out


def _shape_tables(shape: str, sd: dict[str, Any], merged: bool, full_max: int) -> list[str]:
    """One shape's tables: µs per FFN of formats and peers against m; × floor / speed-up."""
    lines: list[str] = []
    ms = sorted(
        {int(m) for fd in sd["formats"].values() for m in fd["rows"]}
        | {int(m) for p in sd["peers"].values() for m in p["times"]}
    )
    head = "| | " + " | ".join(f"m={m}" for m in ms) + " |"
    sep = "| --- | " + " | ".join("---:" for _ in ms) + " |"
    lines += ["", f"### {shape}: hidden {sd['hidden']}, intermediate {sd['intermediate']}", ""]
    if merged:
        lines += [*_runs(sd), ""]
    lines += [
        "µs per FFN (gate + up + silu·mul + down), median; every metrale figure bit-exact against the "
        f"reference (all rows up to m = {full_max}, sampled rows against the one-row result above; FAILED = "
        "not exact, not reported); † = timed as a Python loop (graph capture failed)",
        "",
        head,
        sep,
    ]
    for fd in sd["formats"].values():
        cells = [_us(fd["rows"].get(m)) for m in ms]
        lines.append(
            f"| {fd['label']} ({fd.get('weight_bytes', 0) / 1e6:.1f} MB, floor "
            f"{fd.get('floor_us', 0):.1f}) | " + " | ".join(cells) + " |"
        )
    for p in sd["peers"].values():
        if "error" in p:
            lines.append(f"| peer: {p['label']} | " + " | ".join("n/a" for _ in ms) + " |")
        else:
            lines.append(
                f"| peer: {p['label']} | " + " | ".join(_us(p["times"].get(m, {})) for m in ms) + " |"
            )
    notes = [f"{p['label']}: {p['error']}" for p in sd["peers"].values() if "error" in p]
    notes += [f"{p['label']}: {p['note']}" for p in sd["peers"].values() if p.get("note")]
    if notes:
        lines += ["", "Peer notes: " + "; ".join(notes) + "."]
    lines += [
        "",
        "Ratio to the format's memory floor (× floor) / speed-up against the fastest peer at that m "
        "(fastest peer µs / metrale µs):",
        "",
        head,
        sep,
    ]
    for fd in sd["formats"].values():
        cells = []
        for m in ms:
            r = fd["rows"].get(m)
            if r is None or "us" not in r:
                cells.append("" if r is None else "FAILED")
            else:
                sp = r.get("speedup_vs_fastest_peer")
                cells.append(f"{r['x_floor']:.2f} / " + (f"{sp:.2f}" if sp else "–"))
        lines.append(f"| {fd['label']} | " + " | ".join(cells) + " |")
    fp = sd.get("fastest_peer_us", {})
    lines.append("| fastest peer µs | " + " | ".join(f"{fp[m]:,.1f}" if m in fp else "–" for m in ms) + " |")
    rated = [fd for f, fd in sd["formats"].items() if f in EPILOGUE_FORMATS]
    if rated:
        values = 3 * sd["hidden"] * sd["intermediate"] // 16
        lines += [
            "",
            f"Epilogue rate, T block values per second: 3 m H I / 16 = m × {values:,} block values per FFN "
            "(each a block dot converted, scaled and added into the tree) over the FFN's time, its other "
            "launches included:",
            "",
            head,
            sep,
        ]
        for fd in rated:
            cells = []
            for m in ms:
                r = fd["rows"].get(m)
                ok = r is not None and "us" in r
                cells.append(
                    f"{m * values / (r['us'] * 1e-6) / 1e12:.2f}" if ok else "" if r is None else "FAILED"
                )
            lines.append(f"| {fd['label']} | " + " | ".join(cells) + " |")
    return lines


def markdown(res: dict[str, Any]) -> str:
    """Per shape: µs per FFN (formats and peers against m), × floor / speed-up against the
    fastest peer; the targets; the single-kernel timings."""
    c = res["ceilings"]
    reads = (
        ("read_kernel_GBps", "uint4-load kernel over 2 GiB"),
        ("read_torch_sum_GBps", "torch.sum over int32"),
        ("read_host_sum_GBps", "numpy sum"),
    )
    lines = [f"GPU: {res['gpu']}; date {res['date']}; command `{res['command']}`", ""]
    if res.get("merged_from"):
        lines.append("Merged from several runs: each shape lists its runs and their ceilings.")
    else:
        lines.append(
            f"Ceilings in the same run: copy {c['copy_GBps'] / 1e3:.2f} TB/s "
            "(1 GiB device-to-device, read + write); "
            f"read-only streaming {c['read_GBps'] / 1e3:.2f} TB/s ("
            + "; ".join(f"{what} {c[k] / 1e3:.2f} TB/s" for k, what in reads if k in c)
            + "). Floor = FFN weight bytes / read-only streaming bandwidth."
        )
    for shape, sd in res["shapes"].items():
        full_max = res.get("options", {}).get("full_max", 64)
        lines += _shape_tables(shape, sd, bool(res.get("merged_from")), full_max)
    targets = evaluate_targets(res)
    if targets:
        lines += [
            "",
            f"Targets ({TARGET_SHAPE}):",
            "",
            "| target | met | worst | per m |",
            "| --- | --- | ---: | --- |",
        ]
        for t in targets:
            per = ", ".join(f"{m}: {v}" for m, v in t["per_m"].items())
            lines.append(f"| {t['target']} | {'yes' if t['met'] else 'no'} | {t['worst']} | {per} |")
    if res.get("skipped"):
        lines += ["", "Not measured (the run's --deadline): " + "; ".join(res["skipped"]) + "."]
    if res.get("kernels"):
        lines += [
            "",
            "Single kernels (weights rotating over copies; bit-exact on the checked rows):",
            "",
            "| kernel | m | µs | TB/s | × floor |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for k in res["kernels"]:
            if "us" in k:
                tb = k["bytes"] / (k["us"] * 1e-6) / 1e12
                lines.append(f"| {k['label']} | {k['m']} | {k['us']:.2f} | {tb:.2f} | {k['x_floor']:.2f} |")
            else:
                lines.append(f"| {k['label']} | {k['m']} | {k.get('error', 'FAILED')} | | |")
    return "\n".join(lines)


def regenerate(page: str, doc: dict[str, Any], json_name: str) -> str:
    """``page`` with the lines between its generated-block markers replaced by ``markdown(doc)``
    (the begin marker naming ``json_name``); the rest of the page as it was. ValueError where the
    page lacks the markers (one of each, begin first)."""
    begin, end = BLOCK_BEGIN.format(json=json_name), BLOCK_END
    lines = page.split("\n")
    starts = [i for i, ln in enumerate(lines) if ln.startswith(BLOCK_BEGIN.split("{json}")[0])]
    ends = [i for i, ln in enumerate(lines) if ln == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"want one line starting {begin.split('{')[0]!r} and one {end!r} after it")
    return "\n".join([*lines[: starts[0]], begin, "", markdown(doc), "", *lines[ends[0] :]])
