"""One host's figures over time, for `tunefleet history`: a table, CSV, JSON or a self-contained HTML page
with one SVG trend per check (verify.report.trend_plots)."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from html import escape

from verify.report.trend_plots import Point
from verify.result import Status


@dataclass
class Trend:
    host: str
    checks: dict = field(default_factory=dict)  # check_id -> [Point], oldest first
    units: dict = field(default_factory=dict)  # check_id -> unit

    @property
    def runs(self) -> list:
        """(started_at, run_key) of every run shown, oldest first."""
        seen: dict = {}
        for points in self.checks.values():
            for p in points:
                seen.setdefault((p.started_at, p.run_key), None)
        return sorted(seen)


def build(store, host: str, checks=None, last=None) -> Trend:
    trend = Trend(host)
    units = store.checks()
    for started_at, run_key, check_id, status, value in store.trend(host, checks, last):
        trend.checks.setdefault(check_id, []).append(Point(started_at, run_key, status, value))
        trend.units[check_id] = units.get(check_id, ("", True))[0]
    return trend


def to_table(trend: Trend) -> str:
    if not trend.checks:
        return f"{trend.host}: no recorded run with a benchmark figure\n"
    names = sorted(trend.checks)
    cells = {(p.started_at, p.run_key, name): p for name in names for p in trend.checks[name]}
    head = ["run started"] + [f"{n} ({trend.units[n]})" if trend.units.get(n) else n for n in names]
    rows = []
    for started_at, run_key in trend.runs:
        row = [started_at]
        for name in names:
            p = cells.get((started_at, run_key, name))
            row.append("" if p is None else _cell(p))
        rows.append(row)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = [f"{trend.host}: {len(rows)} runs"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + rows]
    return "\n".join(lines) + "\n"


def _cell(p: Point) -> str:
    text = f"{p.value:g}" if isinstance(p.value, (int, float)) else "-"
    return text if p.status == Status.PASS.value else f"{text} {p.status}"


def to_csv(trend: Trend) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["host", "started_at", "run_key", "check_id", "status", "value", "unit"])
    for name in sorted(trend.checks):
        for p in trend.checks[name]:
            writer.writerow([trend.host, p.started_at, p.run_key, name, p.status,
                             "" if p.value is None else repr(float(p.value)), trend.units.get(name, "")])
    return out.getvalue()


def to_json(trend: Trend) -> str:
    document = {"schema": "tunefleet.history_trend/v1", "host": trend.host, "checks": {
        name: {"unit": trend.units.get(name, ""), "points": [
            {"started_at": p.started_at, "run_key": p.run_key, "status": p.status, "value": p.value}
            for p in trend.checks[name]]}
        for name in sorted(trend.checks)}}
    return json.dumps(document, indent=1) + "\n"


def to_html(trend: Trend, regressions: list = ()) -> str:
    from verify.report import trend_plots as plots

    svgs = [plots.trend(trend.checks[name], f"{trend.host}: {name}", trend.units.get(name, ""))
            for name in sorted(trend.checks)]
    flagged = "".join(f"<li>{escape(r.reason())}</li>" for r in regressions)
    table = escape(to_table(trend))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>tunefleet history: {escape(trend.host)}</title>"
        "<style>body{font:14px/1.45 system-ui,sans-serif;margin:2rem;color:#101828}"
        "svg{display:block;margin:1rem 0}pre{background:#f9fafb;padding:.5rem;overflow:auto}</style></head><body>"
        f"<h1>tunefleet history: {escape(trend.host)}</h1>"
        + (f"<h2>Regressions in the latest run</h2><ul id=\"regressions\">{flagged}</ul>" if flagged else "")
        + "<h2>Figures over time</h2><div id=\"trends\">" + "".join(s for s in svgs if s) + "</div>"
        + f"<h2>Table</h2><pre id=\"table\">{table}</pre></body></html>\n"
    )


RENDERERS = {"table": to_table, "csv": to_csv, "json": to_json, "html": to_html}
