"""The benchmark table every human-facing report opens with: what was measured, against which floor and
which physical peak, and the verdict, with an inline SVG bar per figure (no library, no script).

A benchmark result carries its figure in `observed`, the bound it was checked against in
`details["physical_peak"]` (always in the figure's own unit: verify.judging.thresholds.broken_measurement
compares the two) and its floor in `details["threshold"]`; a saved report may lack any of them, so every
field is read by its type and a missing one is shown as "—".
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from typing import Optional

from verify.bounded_load import finite_number
from verify.report import action_label, results_of, section, status_label
from verify.report.plots import si
from verify.result import CheckResult, sort_for_people

BENCH_ROLE = "bench"
FLEET_ROLE = "fleet"
# The figure's unit as the benchmark wrote it in its expected or reason text ("300 GB/s", "12.5 TFLOPS").
_UNIT = re.compile(r"\d\s*(GB/s|Gb/s|TB/s|TFLOPS|us|ms)\b")
BAR_WIDTH, BAR_HEIGHT = 240, 18
COLOURS = {"PASS": "#067647", "WARN": "#b54708", "FAIL": "#b42318", "ERROR": "#7a2e98", "SKIP": "#98a2b3",
           "RECORDED": "#175cd3"}


@dataclass
class BenchRow:
    """One benchmark figure as the table shows it; None where the report does not say."""

    check_id: str
    status: str  # PASS, WARN, FAIL, SKIP, ERROR or RECORDED (a figure no floor judges)
    verdict: str  # "FAIL [reboot]" for a result with an action class, else the status
    value: Optional[float]
    unit: str
    floor: Optional[float]
    floor_kind: str  # "min" (a floor: at least) or "max" (a ceiling: a latency at most)
    peak: Optional[float]
    peak_source: str
    reason: str

    @property
    def percent_of_peak(self) -> Optional[float]:
        if self.value is None or not self.peak:
            return None
        return self.value / self.peak * 100

    def cells(self) -> dict:
        """Every cell as text, for Markdown and the terminal."""
        bound = "≤ " if self.floor_kind == "max" else ""
        percent = self.percent_of_peak
        return {"figure": self.check_id, "value": _figure(self.value), "unit": self.unit or "—",
                "floor": f"{bound}{_figure(self.floor)}" if self.floor is not None else "—",
                "peak": _figure(self.peak), "percent": f"{percent:.0f} %" if percent is not None else "—",
                "verdict": self.verdict}


def rows(report: dict) -> list:
    """A BenchRow per benchmark result of a node report, failures first."""
    return rows_of(results_of(report))


def rows_of(results: list) -> list:
    return [row_of(r) for r in sort_for_people(r for r in results if is_benchmark(r))]


def is_benchmark(result: CheckResult) -> bool:
    """A benchmark's result, or a figure a fleet run measured across nodes (role fleet with details["value"]:
    the cross-node all-reduce); the fleet's own findings (outliers, drift) carry no value of their own."""
    details = result.details if isinstance(result.details, dict) else {}
    return result.role == BENCH_ROLE or (result.role == FLEET_ROLE and "value" in details)


def row_of(result: CheckResult) -> BenchRow:
    details = result.details if isinstance(result.details, dict) else {}
    value = finite_number(result.observed)
    value = value if value is not None else finite_number(details.get("value"))
    # The peak the figure is shown against: what its algorithm can reach on that node where the benchmark
    # says (the all-reduce's reachable_peak), else the link's physical peak. A fallback bound
    # (verify.judging.peaks: the link could not be read) judged the figure but is not this node's peak: no
    # "% of peak" of it, and the table says bound, not peak.
    peak_record = section(details, "reachable_peak") or section(details, "physical_peak")
    fallback = peak_record.get("fallback") is True
    peak = None if fallback else finite_number(peak_record.get("gbps"))
    threshold = section(details, "threshold")
    limit = finite_number(threshold.get("limit"))
    kind = threshold.get("kind") if threshold.get("kind") in ("min", "max") else "min"
    ratio_of = finite_number(details.get("theoretical_gbps"))
    if limit is not None and "ratio" in details and ratio_of:
        limit = limit * ratio_of  # a share of the link (hostcopy): shown as the rate it stands for
    elif limit is not None and limit <= 1e-6:
        limit = None  # "no floor": only the physical bounds judged this figure
    unit = str(details.get("unit") or "") or _unit_in(result.expected) or _unit_in(result.reason)
    source = str(peak_record.get("source") or "")
    return BenchRow(result.check_id, status_label(result), action_label(result), value, unit, limit, kind,
                    peak, f"not this node's peak (its link could not be read): {source}" if fallback else source,
                    result.reason)


def bar_svg(row: BenchRow) -> str:
    """The figure as a bar on a scale to its physical peak (or past the floor and figure where no peak is
    known): the floor a dark tick, the peak the end of the grey track. '' when there is no figure, or nothing
    to scale it against (a RECORDED figure with no floor and no peak: a bar would be a length of nothing)."""
    if row.value is None or (row.floor is None and not row.peak):
        return ""
    scale = max(v for v in (row.peak, row.floor, row.value) if v is not None) or 1.0
    if not row.peak:
        scale *= 1.1  # no physical end: leave room to see the bar ends before the frame
    width = BAR_WIDTH - 2

    def x(v: float) -> float:
        return 1 + min(max(v / scale, 0.0), 1.0) * width

    colour = COLOURS.get(row.status, COLOURS["SKIP"])
    parts = [f'<rect x="1" y="4" width="{width}" height="10" fill="#eaecf0"/>',
             f'<rect class="value" x="1" y="4" width="{x(row.value) - 1:.1f}" height="10" fill="{colour}"/>']
    if row.floor is not None:
        parts.append(f'<line class="floor" x1="{x(row.floor):.1f}" y1="1" x2="{x(row.floor):.1f}" y2="17" '
                     f'stroke="#101828" stroke-width="2"/>')
    cells = row.cells()
    title = f"{cells['value']} {row.unit}; floor {cells['floor']}; physical peak {cells['peak']}"
    return (f'<svg class="bar" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(title)}" '
            f'width="{BAR_WIDTH}" height="{BAR_HEIGHT}" viewBox="0 0 {BAR_WIDTH} {BAR_HEIGHT}">'
            f"<title>{escape(title)}</title>{''.join(parts)}</svg>")


def markdown_lines(report: dict) -> list:
    """The table in Markdown ([] when the run measured nothing)."""
    table = rows(report)
    if not table:
        return []
    out = ["| figure | value | unit | floor | physical peak | % of peak | verdict |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in table:
        c = row.cells()
        out.append(f"| `{c['figure']}` | {c['value']} | {c['unit']} | {c['floor']} | {c['peak']} | {c['percent']} "
                   f"| {c['verdict']} |")
    return out


def _figure(value: Optional[float]) -> str:
    if value is None:
        return "—"
    return si(value) if abs(value) >= 1000 else f"{value:.3g}"


def _unit_in(text: object) -> str:
    match = _UNIT.search(text) if isinstance(text, str) else None
    return match.group(1) if match else ""
