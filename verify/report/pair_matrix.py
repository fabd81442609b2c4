"""The "pairs" section of the fleet report: the pair matrix of a pairwise NCCL run and its blame list,
and the inline-SVG heat map the HTML report shows (one cell per pair tested, coloured by the fraction
of the floor its slowest rail reached).

Takes plain dicts (Outcome.to_dict and Blame.to_dict of verify/fleet/pairing.py and blame.py), since
reports sit below the fleet layer. Pure: no I/O.
"""
from __future__ import annotations

from html import escape
from typing import Iterable, Optional

from verify.payload_schema import ListOf, Maybe, schema_problems
from verify.report.schemas import FIGURE_OR_NULL, FiniteNumber, filled, split_problem

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


# ---- what a pairs section read back from a file must hold (nccl-pairs/summary.json "pairs") ----------
# Declarative, as verify.engine checks an engine's payload: a cell or blame entry that differs is left
# out and named, so the writers above meet only these shapes (every key present, numbers finite).
# pairs_section and Outcome.to_dict write every figure's key, null when nothing was measured: a key
# missing is damage (FIGURE_OR_NULL), where Maybe would let it pass as "not measured".
RAIL_SCHEMA = {"status": str, "busbw_gbps": FIGURE_OR_NULL, "floor_gbps": FIGURE_OR_NULL,
               "fraction": FIGURE_OR_NULL, "round": Maybe(FiniteNumber)}
CELL_SCHEMA = {"a": str, "b": str, "status": str, "worst_fraction": FIGURE_OR_NULL, "rails": dict}
OUTCOME_SCHEMA = {"a": str, "b": str, "rail": str, "status": str, "round": Maybe(FiniteNumber),
                  "busbw_gbps": FIGURE_OR_NULL, "floor_gbps": FIGURE_OR_NULL, "reason": Maybe(str)}
BLAME_SCHEMA = {"kind": str, "status": str, "reason": str, "hosts": ListOf(str, may_be_empty=True),
                "rails": ListOf(str, may_be_empty=True), "remediation": Maybe(str),
                "evidence": Maybe(ListOf(OUTCOME_SCHEMA, may_be_empty=True))}
SECTION_SCHEMA = {"hosts": ListOf(str, may_be_empty=True), "cells": list, "blame": list}


def _checked_cell(cell, where: str) -> tuple:
    problems = schema_problems(cell, CELL_SCHEMA, where)
    if problems:
        return None, problems
    rails = {}
    for rail, entry in cell["rails"].items():
        problems += schema_problems(entry, RAIL_SCHEMA, f"{where}.rails.{rail}")
        rails[str(rail)] = filled(entry, RAIL_SCHEMA) if isinstance(entry, dict) else None
    return (None if problems else dict(filled(cell, CELL_SCHEMA), rails=rails)), problems


def _checked_blame(entry, where: str) -> tuple:
    problems = schema_problems(entry, BLAME_SCHEMA, where)
    if problems:
        return None, problems
    evidence = [filled(o, OUTCOME_SCHEMA) for o in entry.get("evidence") or []]
    return dict(filled(entry, BLAME_SCHEMA), remediation=entry.get("remediation") or "", evidence=evidence), []


def checked_section(data) -> tuple:
    """(the pairs section, [(field, message)]) from a pairs section read back from a file (the run's
    nccl-pairs/summary.json "pairs"): cells and blame entries that differ from their schema are left out,
    each problem named; (None, [("", why)]) when it is no pairs section at all."""
    problems = schema_problems(data, SECTION_SCHEMA, "")
    if problems:
        return None, [("", "; ".join(problems[:3]))]
    found: list = []
    cells, blame = [], []
    for index, cell in enumerate(data["cells"]):
        kept, wrong = _checked_cell(cell, f"cells[{index}]")
        found += wrong
        if kept is not None:
            cells.append(kept)
    for index, entry in enumerate(data["blame"]):
        kept, wrong = _checked_blame(entry, f"blame[{index}]")
        found += wrong
        if kept is not None:
            blame.append(kept)
    return {"hosts": list(data["hosts"]), "cells": cells, "blame": blame}, [split_problem(p) for p in found]
