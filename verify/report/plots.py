"""Inline SVG plots for the fleet page: no plotting library, no scripts, so the page stays one file.

busbw_curves: busbw against message size (log2 axis), one line per host, the slowest hosts drawn
on top in a warning colour and the fleet median as a thick line. distribution: a histogram of one
metric across the fleet, the median and the outliers marked.
"""
from __future__ import annotations

import math
from html import escape
from typing import Optional

from verify.bounded_load import finite_number

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 20, 45
# A curve per host stops being readable long before 10,000 hosts: draw the slowest ones and the median.
MAX_CURVES = 40
CURVE_SIZE_KEYS = ("size_bytes", "bytes", "size")
CURVE_BW_KEYS = ("busbw_gbps", "busbw")


def curve_points(details: dict) -> list:
    """[(size_bytes, busbw_gbps)] from a benchmark result's details, sorted by size; [] if none."""
    if not isinstance(details, dict):
        return []
    raw = details.get("curve") or details.get("points") or []
    points = []
    if not isinstance(raw, list):
        return points
    for item in raw:
        if not isinstance(item, dict):
            continue
        size = next((item[k] for k in CURVE_SIZE_KEYS if k in item), None)
        busbw = next((item[k] for k in CURVE_BW_KEYS if k in item), None)
        if _number(size) and _number(busbw) and size > 0:
            points.append((float(size), float(busbw)))
    return sorted(points)


def busbw_curves(curves: dict, title: str, highlight: frozenset = frozenset()) -> str:
    """curves: host -> [(size_bytes, busbw_gbps)]. Returns an <svg> element (empty string if no data)."""
    curves = {h: pts for h, pts in curves.items() if pts}
    if not curves:
        return ""
    all_points = [p for pts in curves.values() for p in pts]
    x_lo, x_hi = math.log2(min(p[0] for p in all_points)), math.log2(max(p[0] for p in all_points))
    y_ticks = nice_ticks(max(p[1] for p in all_points))
    y_hi = y_ticks[-1]
    peak = {h: max(b for _, b in pts) for h, pts in curves.items()}
    shown = sorted(curves, key=lambda h: (h not in highlight, peak[h], h))[:MAX_CURVES]

    def xy(size: float, busbw: float) -> tuple:
        span = (x_hi - x_lo) or 1.0
        x = LEFT + (math.log2(size) - x_lo) / span * (WIDTH - LEFT - RIGHT)
        y = HEIGHT - BOTTOM - busbw / y_hi * (HEIGHT - TOP - BOTTOM)
        return x, y

    parts = [_frame(title, "message size (bytes, log2)", "busbw GB/s")]
    parts.extend(_y_ticks(y_ticks))
    parts.extend(_x_size_ticks(x_lo, x_hi, xy))
    for host in reversed(shown):
        colour = "#c0392b" if host in highlight else "#7f8c8d"
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(s, b) for s, b in curves[host]))
        parts.append(
            f'<polyline class="curve" data-host="{escape(host)}" fill="none" stroke="{colour}" '
            f'stroke-width="1.2" points="{path}"><title>{escape(host)}: peak {peak[host]:g} GB/s</title></polyline>'
        )
    median_curve = _median_curve(curves)
    if median_curve:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(s, b) for s, b in median_curve))
        parts.append(f'<polyline class="median" fill="none" stroke="#2471a3" stroke-width="3" points="{path}">'
                     "<title>fleet median</title></polyline>")
    note = f"{len(shown)} of {len(curves)} hosts drawn (slowest first); blue: fleet median; red: outliers"
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 5}" font-size="10">{escape(note)}</text>')
    return _svg(parts, title)


def distribution(values: dict, title: str, unit: str = "", highlight: frozenset = frozenset(), bins: int = 20) -> str:
    """Histogram of host -> value. Returns an <svg> element (empty string if fewer than 2 values)."""
    if len(values) < 2:
        return ""
    lo, hi = min(values.values()), max(values.values())
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    flagged = [0] * bins
    for host, value in values.items():
        index = min(int((value - lo) / width), bins - 1)
        counts[index] += 1
        flagged[index] += host in highlight
    top = max(counts)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    bar_w = plot_w / bins
    parts = [_frame(title, f"value{f' ({unit})' if unit else ''}", "hosts")]
    for i, count in enumerate(counts):
        if not count:
            continue
        height = count / top * plot_h
        colour = "#c0392b" if flagged[i] else "#5d6d7e"
        x = LEFT + i * bar_w
        label = f"{si(lo + i * width)} to {si(lo + (i + 1) * width)}: {count} hosts"
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{HEIGHT - BOTTOM - height:.1f}" width="{bar_w - 1:.1f}" '
                     f'height="{height:.1f}" fill="{colour}"><title>{escape(label)}</title></rect>')
    for value, label in ((lo, si(lo)), (hi, si(hi))):
        x = LEFT + (value - lo) / ((hi - lo) or 1.0) * plot_w
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" font-size="10" text-anchor="middle">{label}</text>')
    parts.append(f'<text x="{LEFT - 6}" y="{TOP + 4}" font-size="10" text-anchor="end">{top}</text>')
    return _svg(parts, title)


def _median_curve(curves: dict) -> list:
    by_size: dict = {}
    for pts in curves.values():
        for size, busbw in pts:
            by_size.setdefault(size, []).append(busbw)
    out = []
    for size in sorted(by_size):
        vals = sorted(by_size[size])
        mid = len(vals) // 2
        out.append((size, vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2))
    return out if len(curves) > 1 else []


def _frame(title: str, x_label: str, y_label: str) -> str:
    return (
        f'<text class="title" x="{WIDTH / 2}" y="14" font-size="13" text-anchor="middle" font-weight="bold">'
        f"{escape(title)}</text>"
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" stroke="#333"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#333"/>'
        f'<text class="axis-label" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 18}" font-size="11" '
        f'text-anchor="middle">{escape(x_label)}</text>'
        f'<text class="axis-label" x="14" y="{(TOP + HEIGHT - BOTTOM) / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2})">{escape(y_label)}</text>'
    )


# SI prefixes for axis labels: "2.5k" fits the 60 px left margin where "2.5e+03" spilled over the axis title.
SI_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))


def si(value: float) -> str:
    """A figure in at most three significant digits with an SI prefix: 2500 -> '2.5k', 0.0042 -> '4.2m'."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    for factor, prefix in SI_PREFIXES:
        if abs(value) >= factor * 0.9995:
            return f"{value / factor:.3g}{prefix}"
    return f"{value:.3g}"


def nice_ticks(top: float, most: int = 6) -> list:
    """0 up to the first round value (1, 2, 2.5 or 5 x 10^k steps) at or above `top`, at most `most` ticks:
    labels that differ in their first digits, never 1.66k beside 2.5k."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / (most - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    count = max(1, math.ceil(top / step - 1e-9))
    return [round(step * i, 12) for i in range(count + 1)]


def _y_ticks(ticks: list) -> list:
    """Labels at the given tick values (nice_ticks); the last one is the top of the plot."""
    out = []
    top = ticks[-1] or 1.0
    for value in ticks:
        y = HEIGHT - BOTTOM - value / top * (HEIGHT - TOP - BOTTOM)
        out.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 3:.1f}" font-size="10" text-anchor="end">'
                   f"{si(value)}</text>")
    return out


def _x_size_ticks(x_lo: float, x_hi: float, xy) -> list:
    ticks = []
    step = max(1, int((x_hi - x_lo) // 6) or 1)
    exponent = math.ceil(x_lo)
    while exponent <= x_hi:
        x, _ = xy(2.0 ** exponent, 0)
        ticks.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" font-size="10" '
                     f'text-anchor="middle">{_size_label(2 ** exponent)}</text>')
        exponent += step
    return ticks


def _size_label(size: int) -> str:
    for unit, factor in (("G", 2 ** 30), ("M", 2 ** 20), ("K", 2 ** 10)):
        if size >= factor:
            return f"{size // factor}{unit}"
    return str(size)


def _svg(parts: list, title: str) -> str:
    return (f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(title)}" '
            f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">' + "".join(parts) + "</svg>")


def _number(value: Optional[object]) -> bool:
    # finite_number: an integer past float range (a damaged saved report) is no figure, not an OverflowError.
    return finite_number(value) is not None
