"""One check's figure over a host's runs as an inline SVG, drawn the way the fleet page draws its plots
(verify.report.plots: same frame, ticks and size), so the history page needs no library or script."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape

from verify.bounded_load import finite_number
from verify.report import fact_text, listed, section
from verify.report import plots as fleet_plots
from verify.result import Status
from verify.stats.outliers import median

W, H = fleet_plots.WIDTH, fleet_plots.HEIGHT
LEFT, RIGHT, TOP, BOTTOM = fleet_plots.LEFT, fleet_plots.RIGHT, fleet_plots.TOP, fleet_plots.BOTTOM


@dataclass
class Point:
    """One run's figure of one check (verify.history.trend builds them from the history store)."""

    started_at: str
    run_key: str
    status: str
    value: object  # float or None (the run could not measure it)


# A trend of one or two runs is a dot or a segment that says nothing the benchmark table does not.
MIN_TREND_RUNS = 3


def report_trends(report: dict) -> list:
    """SVG trends of a node report's "history" section (verify.history.cli.finish_local), [] without one;
    only figures measured in at least MIN_TREND_RUNS runs are drawn."""
    svgs = []
    for check_id, entry in sorted(section(report, "history", "trend").items()):
        # A damaged saved report: a point that is not [time, status, figure] is left out.
        points = [Point(str(p[0]), "", str(p[1]), finite_number(p[2]))
                  for p in listed(entry, "points") if isinstance(p, list) and len(p) == 3]
        if sum(p.value is not None for p in points) < MIN_TREND_RUNS:
            continue
        svgs.append(trend(points, f"{check_id} over the last {len(points)} runs", fact_text(entry, "unit", default="")))
    return [svg for svg in svgs if svg]


def trend(points: list, title: str, unit: str = "") -> str:
    """points: trend.Point oldest first. Returns an <svg> element ('' when no run has a figure)."""
    measured = [(i, p) for i, p in enumerate(points) if isinstance(p.value, (int, float))]
    if not measured:
        return ""
    y_ticks = fleet_plots.nice_ticks(max(p.value for _, p in measured))
    y_hi = y_ticks[-1]
    span = max(len(points) - 1, 1)

    def xy(index: int, value: float) -> tuple:
        return (LEFT + index / span * (W - LEFT - RIGHT), H - BOTTOM - value / y_hi * (H - TOP - BOTTOM))

    parts = [fleet_plots._frame(title, "run (oldest to newest)", unit or "value")]
    parts.extend(fleet_plots._y_ticks(y_ticks))
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, p.value) for i, p in measured))
    parts.append(f'<polyline class="trend" fill="none" stroke="#2471a3" stroke-width="2" points="{line}"/>')
    middle = median([p.value for _, p in measured])
    _, y_mid = xy(0, middle)
    parts.append(f'<line class="median" x1="{LEFT}" y1="{y_mid:.1f}" x2="{W - RIGHT}" y2="{y_mid:.1f}" '
                 f'stroke="#7f8c8d" stroke-dasharray="4 3"><title>median {middle:g}</title></line>')
    for i, p in measured:
        x, y = xy(i, p.value)
        colour = "#067647" if p.status == Status.PASS.value else "#c0392b"
        parts.append(f'<circle class="run" data-status="{escape(p.status)}" cx="{x:.1f}" cy="{y:.1f}" r="3.5" '
                     f'fill="{colour}"><title>{escape(p.started_at)}: {p.value:g} {escape(unit)} '
                     f"{escape(p.status)}</title></circle>")
    # The oldest and newest run's times, once each: with one run both would sit on the same spot.
    ends = ((0, "start"), (len(points) - 1, "end")) if len(points) > 1 else ((0, "start"),)
    for index, anchor in ends:
        x, _ = xy(index, 0)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{H - BOTTOM + 14}" font-size="10" text-anchor="{anchor}">'
                     f"{escape(points[index].started_at[:16])}</text>")
    note = f"{len(measured)} of {len(points)} runs measured; dashed: median; red: not PASS"
    parts.append(f'<text x="{LEFT}" y="{H - 5}" font-size="10">{escape(note)}</text>')
    return fleet_plots._svg(parts, title)
