"""The "pairs" section of the fleet report: the pair matrix of a pairwise NCCL run and its blame list,
and the inline-SVG heat map the HTML report shows (one cell per pair tested, coloured by the fraction
of the floor its slowest rail reached).

Takes plain dicts (Outcome.to_dict and Blame.to_dict of verify/fleet/pairing.py and blame.py), since
reports sit below the fleet layer. Pure: no I/O.
"""
from __future__ import annotations

from html import escape
from typing import Iterable, Optional

from verify.bounded_load import finite_number

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


def evidence_text(outcome: dict) -> str:
    """One pair outcome as a person reads it in the blame list: 'a - b, eth2, round 2: fail, 0.006 GB/s
    (floor 0.03)'; the outcome's reason when nothing was measured."""
    figure = outcome.get("busbw_gbps")
    floor = outcome.get("floor_gbps")
    measured = (f"{figure:.3g} GB/s" + (f" (floor {floor:.3g})" if isinstance(floor, (int, float)) else "")
                if isinstance(figure, (int, float)) else str(outcome.get("reason") or "nothing measured")[:160])
    return (f"{outcome.get('a')} - {outcome.get('b')}, {outcome.get('rail')}, round {outcome.get('round')}: "
            f"{outcome.get('status')}, {measured}")


def _number_or_none(value) -> bool:
    return value is None or finite_number(value) is not None


_TEXT_OR_NONE = (str, type(None))


def _bad_rail(entry) -> str:
    if not isinstance(entry, dict):
        return "is not an object"
    if not isinstance(entry.get("status"), str):
        return "has no status text"
    wrong = next((k for k in ("busbw_gbps", "floor_gbps", "fraction") if not _number_or_none(entry.get(k))), None)
    return f"{wrong} is not a finite number" if wrong else ""


def _bad_cell(cell) -> tuple:
    """(field, message) of the first thing heat_map_svg could not draw in one cell, ("", "") when none."""
    if not isinstance(cell, dict):
        return "", "is not an object"
    for key in ("a", "b", "status"):
        if not isinstance(cell.get(key), str):
            return key, "is not text"
    if not _number_or_none(cell.get("worst_fraction")):
        return "worst_fraction", "is not a finite number"
    rails = cell.get("rails")
    if not isinstance(rails, dict):
        return "rails", "is not an object"
    for rail, entry in rails.items():
        problem = _bad_rail(entry)
        if problem:
            return f"rails.{rail}", problem
    return "", ""


def _bad_blame(entry) -> tuple:
    if not isinstance(entry, dict):
        return "", "is not an object"
    for key in ("kind", "status", "reason"):
        if not isinstance(entry.get(key), str):
            return key, "is not text"
    for key in ("hosts", "rails"):
        if not isinstance(entry.get(key), list) or not all(isinstance(v, str) for v in entry[key]):
            return key, "is not a list of names"
    if not isinstance(entry.get("remediation", ""), _TEXT_OR_NONE):
        return "remediation", "is not text"
    evidence = entry.get("evidence", [])
    if not isinstance(evidence, list):
        return "evidence", "is not a list"
    for index, outcome in enumerate(evidence):
        figures = (outcome.get("busbw_gbps"), outcome.get("floor_gbps")) if isinstance(outcome, dict) else ("?",)
        if not all(_number_or_none(v) for v in figures):
            return f"evidence[{index}]", "is not an outcome with finite figures"
    return "", ""


def checked_section(data) -> tuple:
    """(the pairs section, [(field, message)]) from a pairs section read back from a file (the run's
    nccl-pairs/summary.json "pairs"): cells and blame entries this module could not draw are left out,
    each named; (None, [("", why)]) when it is no pairs section at all."""
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or not isinstance(data.get("blame"), list):
        return None, [("", "no 'cells' and 'blame' lists")]
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        return None, [("hosts", "is not a list of host names")]
    problems: list = []
    cells, blame = [], []
    for index, cell in enumerate(data["cells"]):
        field, message = _bad_cell(cell)
        if message:
            problems.append((f"cells[{index}]" + (f".{field}" if field else ""), message))
        else:
            cells.append(cell)
    for index, entry in enumerate(data["blame"]):
        field, message = _bad_blame(entry)
        if message:
            problems.append((f"blame[{index}]" + (f".{field}" if field else ""), message))
        else:
            blame.append(entry)
    return {"hosts": list(hosts), "cells": cells, "blame": blame}, problems
