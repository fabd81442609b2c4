"""The "pairs" section of the fleet report: the pair matrix of a pairwise NCCL run and its blame list,
and the inline-SVG heat map the HTML report shows (one cell per pair tested, coloured by the fraction
of the floor its slowest rail reached).

Takes plain dicts (Outcome.to_dict and Blame.to_dict of verify/fleet/pairing.py and blame.py), since
reports sit below the fleet layer. Pure: no I/O.
"""
from __future__ import annotations

from html import escape
from typing import Iterable, Optional

CELL = 12
MAX_HOSTS_DRAWN = 256  # a bigger fleet's matrix is unreadable as cells: the blame list says what matters


def _fraction(outcome: dict) -> Optional[float]:
    busbw, floor = outcome.get("busbw_gbps"), outcome.get("floor_gbps")
    if isinstance(busbw, (int, float)) and isinstance(floor, (int, float)) and floor > 0:
        return busbw / floor
    return None


def pairs_section(outcomes: Iterable[dict], findings: Iterable[dict]) -> dict:
    """{"hosts", "cells": [{a, b, rails: {rail: {status, busbw_gbps, floor_gbps, fraction, round}},
    worst_fraction, status}], "blame": [...]} - the JSON the fleet report embeds as "pairs"."""
    cells: dict = {}
    hosts: dict = {}
    for o in outcomes:
        a, b = sorted((str(o["a"]), str(o["b"])))
        hosts[a] = hosts[b] = None
        cell = cells.setdefault((a, b), {"a": a, "b": b, "rails": {}})
        previous = cell["rails"].get(o["rail"])
        if previous is None or o.get("round", 1) >= previous["round"]:  # the latest test of a rail counts
            cell["rails"][o["rail"]] = {"status": o["status"], "busbw_gbps": o.get("busbw_gbps"),
                                        "floor_gbps": o.get("floor_gbps"), "fraction": _fraction(o),
                                        "round": o.get("round", 1)}
    for cell in cells.values():
        fractions = [r["fraction"] for r in cell["rails"].values() if r["fraction"] is not None]
        statuses = {r["status"] for r in cell["rails"].values()}
        cell["worst_fraction"] = min(fractions) if fractions else None
        cell["status"] = "fail" if "fail" in statuses else "error" if "error" in statuses else "pass"
    return {"hosts": sorted(hosts), "cells": [cells[k] for k in sorted(cells)], "blame": list(findings)}


def _colour(cell: dict) -> str:
    if cell["status"] == "error":
        return "#9e9e9e"
    fraction = cell["worst_fraction"]
    if fraction is None:
        return "#1a9850" if cell["status"] == "pass" else "#d73027"
    if fraction >= 1.0:
        return "#1a9850"
    if fraction >= 0.9:
        return "#fee08b"
    if fraction >= 0.7:
        return "#fc8d59"
    return "#d73027"


def heat_map_svg(section: dict) -> str:
    """The pair matrix as an inline <svg>: a cell per pair tested (both triangles), grey for errors;
    each cell's <title> gives the pair, its rails and figures. Empty string when nothing was tested."""
    hosts = section["hosts"][:MAX_HOSTS_DRAWN]
    if not section["cells"] or not hosts:
        return ""
    index = {h: i for i, h in enumerate(hosts)}
    label = 8 * min(24, max(len(h) for h in hosts)) + 4
    size = label + CELL * len(hosts)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pair-matrix" width="{size}" height="{size}" '
             f'viewBox="0 0 {size} {size}" role="img" aria-label="pair matrix: fraction of the inter-node floor">']
    for host, i in index.items():
        y = label + CELL * i + CELL - 2
        parts.append(f'<text x="{label - 4}" y="{y}" font-size="9" text-anchor="end">{escape(host[:24])}</text>')
    for cell in section["cells"]:
        if cell["a"] not in index or cell["b"] not in index:
            continue
        rails = "; ".join(f"{rail}: {r['status']} {r['busbw_gbps'] if r['busbw_gbps'] is not None else '-'} GB/s"
                          f" (floor {r['floor_gbps'] if r['floor_gbps'] is not None else '-'})"
                          for rail, r in sorted(cell["rails"].items()))
        title = escape(f"{cell['a']} - {cell['b']}: {rails}")
        for row, col in ((cell["a"], cell["b"]), (cell["b"], cell["a"])):
            x, y = label + CELL * index[col], label + CELL * index[row]
            parts.append(f'<rect x="{x}" y="{y}" width="{CELL - 1}" height="{CELL - 1}" fill="{_colour(cell)}">'
                         f"<title>{title}</title></rect>")
    parts.append("</svg>")
    return "".join(parts)
