"""The fleet comparison as one self-contained HTML page: inline CSS and SVG, no script, no external resource,
like the fleet report. Each figure that moved is drawn as the two distributions over shared bins (before in
blue, after in orange, each median a line) with the shift and its interval written beside, so a person sees at a
glance whether the fleet moved or one node fell off. Reads only verify.fleet.compare's document.
"""
from __future__ import annotations

from html import escape

from verify.report.compare_text import differences_text, figure_name, label, number, pct, verdict_line, with_fleet

WIDTH, HEIGHT = 420, 150
LEFT, RIGHT, TOP, BOTTOM = 10, 10, 22, 30
PLOTS = 24  # figures drawn (regressions and significant shifts first); every one is in the tables and JSON
TABLE_ROWS = 300
BEFORE_COLOUR, AFTER_COLOUR = "#3b6fb6", "#e07b00"
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#1d1d1d;max-width:1400px}
h1{font-size:1.4em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0} td,th{border:1px solid #ddd;padding:.25em .5em;
text-align:left;vertical-align:top} th{background:#f3f3f3}
.verdict{font-size:1.1em;padding:.6em .8em;border-radius:4px;margin:.6em 0}
.bad{background:#fde2e1;border:1px solid #e0a09c} .good{background:#e3f4e1;border:1px solid #9cc99a}
.health{display:flex;gap:2em;margin:.8em 0} .health div{padding:.5em 1em;border:1px solid #ddd;border-radius:4px}
.health b{font-size:1.8em;display:block}
.plots{display:flex;flex-wrap:wrap;gap:1em} .plot{border:1px solid #e3e3e3;padding:.3em;border-radius:4px}
.REGRESSION{color:#b00020;font-weight:bold} .better{color:#1b7a1b} .shifted{color:#8a5a00}
.legend span{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:middle}
.small{color:#555;font-size:.85em}
"""


def page(document: dict) -> str:
    before, after, method = document["before"], document["after"], document["method"]
    verdict = document["verdict"]
    title = f"tunefleet compare: {before['source']} -> {after['source']}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{escape(title)}</h1>",
             f'<p class="small">generated {escape(str(document["generated_at"]))} by tunefleet '
             f'{escape(str(document["tool_version"]))}; {before["hosts"]} hosts before ({escape(before["kind"])}), '
             f'{after["hosts"]} after ({escape(after["kind"])}), {document["hosts"]["both"]} on both</p>',
             f'<div class="verdict {"bad" if verdict["exit_code"] == 1 else "good"}">{escape(verdict_line(document))}'
             "</div>", _health(before["health"], after["health"]),
             f'<p class="small">{escape(method["health"])}.</p>',
             "<h2>Distributions before and after</h2>",
             f'<p class="legend small">each plot: the fleet\'s values of one figure over shared bins'
             f'<span style="background:{BEFORE_COLOUR}"></span>before<span style="background:{AFTER_COLOUR}">'
             "</span>after; vertical lines: the medians; the title gives the shift and its interval</p>",
             '<div class="plots">']
    for entry in document["figures"][:PLOTS]:
        parts.append(f'<div class="plot">{distribution(entry)}</div>')
    parts.append("</div>")
    if len(document["figures"]) > PLOTS:
        parts.append(f'<p class="small">{len(document["figures"]) - PLOTS} more figures in the table below '
                     "(no plot).</p>")
    parts += ["<h2>Figures</h2>",
              f'<p class="small">{escape(method["shift"])}; {escape(method["interval"])}; {escape(method["test"])}; '
              f'{escape(method["correction"])}.</p>', _figures_table(document["figures"]),
              "<h2>Nodes beyond their own noise or apart from the fleet</h2>",
              f'<p class="small">{escape(method["node_noise"])}.</p>', _nodes_table(document["nodes"]),
              "<h2>What changed across the fleet</h2>", _changes_table(document["changes"])]
    if document["notes"]:
        parts += ["<h2>Notes</h2><ul>"] + [f"<li>{escape(str(n))}</li>" for n in document["notes"]] + ["</ul>"]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _health(a: dict, b: dict) -> str:
    def box(name: str, h: dict) -> str:
        return (f"<div>{name}<b>{escape(pct(h.get('value'), False))}</b>"
                f"<span class=\"small\">{h['good']} good, {h['failed']} FAIL (cost {h['fail_cost']}), "
                f"{h['errors']} ERROR</span></div>")

    change = ""
    if a.get("value") is not None and b.get("value") is not None:
        change = f"<div>change<b>{b['value'] - a['value']:+.2f}</b><span class=\"small\">points</span></div>"
    return f'<div class="health">{box("fleet health before", a)}{box("after", b)}{change}</div>'


def distribution(entry: dict) -> str:
    """An <svg> of the two histograms of one figure, the medians marked; '' without bins."""
    hist = entry.get("histogram") or {}
    edges = hist.get("edges") or []
    if len(edges) < 2:
        return ""
    bins = len(edges) - 1
    tallest = max(max(hist["before"] or [0]), max(hist["after"] or [0]), 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    low, high = edges[0], edges[-1]
    span = (high - low) or 1.0

    def x_of(value: float) -> float:
        return LEFT + (min(max(value, low), high) - low) / span * plot_w

    unit = f" {entry['unit']}" if entry.get("unit") else ""
    head = f"{label(entry)} {figure_name(entry)}"
    sub = (f"shift {pct(entry.get('shift_percent'))} [{pct(entry.get('low_percent'))}, "
           f"{pct(entry.get('high_percent'))}]" if entry.get("shift_percent") is not None else entry.get("note", ""))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT + 28}" '
             f'role="img" aria-label="{escape(head)}">',
             f'<text x="{LEFT}" y="12" font-size="11" class="{escape(label(entry))}" '
             f'font-weight="bold">{escape(head[:70])}</text>',
             f'<text x="{LEFT}" y="{HEIGHT + 12}" font-size="10" fill="#333">{escape(sub)}</text>']
    bar_w = plot_w / bins
    for name, colour in (("before", BEFORE_COLOUR), ("after", AFTER_COLOUR)):
        for index, count in enumerate(hist[name]):
            if not count:
                continue
            bar_h = count / tallest * plot_h
            parts.append(f'<rect x="{LEFT + index * bar_w:.1f}" y="{TOP + plot_h - bar_h:.1f}" width="{bar_w:.1f}" '
                         f'height="{bar_h:.1f}" fill="{colour}" fill-opacity="0.5"/>')
    for name, colour in (("before", BEFORE_COLOUR), ("after", AFTER_COLOUR)):
        centre = entry[name].get("median")
        if centre is not None:
            x = x_of(centre)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="{colour}" '
                         'stroke-width="2"/>')
    axis_y = TOP + plot_h
    parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{axis_y}" y2="{axis_y}" stroke="#555"/>')
    for value, anchor in ((low, "start"), ((low + high) / 2, "middle"), (high, "end")):
        parts.append(f'<text x="{x_of(value):.1f}" y="{axis_y + 13}" font-size="10" text-anchor="{anchor}" '
                     f'fill="#333">{escape(number(value))}{escape(unit) if anchor == "end" else ""}</text>')
    outside = _outside(hist)
    if outside:
        parts.append(f'<text x="{LEFT}" y="{HEIGHT + 24}" font-size="9" '
                     f'fill="#b00020">{escape(outside)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _outside(hist: dict) -> str:
    below, above = hist.get("below") or [0, 0], hist.get("above") or [0, 0]
    words = []
    if any(below):
        words.append(f"below the axis: {below[0]} before, {below[1]} after")
    if any(above):
        words.append(f"above: {above[0]} before, {above[1]} after")
    return "; ".join(words)


def _figures_table(figures: list) -> str:
    rows = ["<table><tr><th>verdict</th><th>figure</th><th>before median (n)</th><th>after median (n)</th>"
            "<th>shift</th><th>interval</th><th>p (Holm)</th></tr>"]
    for entry in figures[:TABLE_ROWS]:
        unit = f" {entry['unit']}" if entry.get("unit") else ""
        interval = (f"{pct(entry['low_percent'])} .. {pct(entry['high_percent'])}"
                    if entry.get("low_percent") is not None else "")
        p_adj = f"{entry['p_adjusted']:.2g}" if entry.get("p_adjusted") is not None else entry.get("note", "")
        rows.append(f'<tr><td class="{escape(label(entry))}">{escape(label(entry))}</td>'
                    f"<td>{escape(figure_name(entry))}</td>"
                    f"<td>{escape(number(entry['before']['median']))}{escape(unit)} ({entry['before']['samples']})</td>"
                    f"<td>{escape(number(entry['after']['median']))}{escape(unit)} ({entry['after']['samples']})</td>"
                    f"<td>{escape(pct(entry.get('shift_percent')))}</td><td>{escape(interval)}</td>"
                    f"<td>{escape(str(p_adj))}</td></tr>")
    rows.append("</table>")
    if len(figures) > TABLE_ROWS:
        rows.append(f'<p class="small">{len(figures) - TABLE_ROWS} more figures in compare.json.</p>')
    return "".join(rows)


def _nodes_table(nodes: list) -> str:
    if not nodes:
        return "<p>None.</p>"
    rows = ["<table><tr><th>host</th><th>direction</th><th>figure</th><th>before</th><th>after</th><th>change</th>"
            "<th>noise</th><th>z</th><th>fleet</th><th>what differs on it</th></tr>"]
    for node in nodes[:TABLE_ROWS]:
        for index, move in enumerate(node["figures"]):
            colour = "REGRESSION" if move["direction"].startswith("worse") else "better"
            differs = escape(differences_text(node, limit=8)) if index == 0 else ""
            rows.append(f"<tr><td>{escape(node['host']) if index == 0 else ''}</td>"
                        f'<td class="{colour}">{escape(move["direction"])}</td><td>{escape(move["figure"])}</td>'
                        f"<td>{escape(number(move['before']))}</td><td>{escape(number(move['after']))}</td>"
                        f"<td>{escape(pct(move['change_percent']))}</td>"
                        f"<td>{escape(pct(move['noise_percent'], False))} ({escape(move['noise_source'])})</td>"
                        f"<td>{move['z']:.1f}</td><td>{escape(with_fleet(move))}</td><td>{differs}</td></tr>")
    rows.append("</table>")
    if len(nodes) > TABLE_ROWS:
        rows.append(f'<p class="small">{len(nodes) - TABLE_ROWS} more nodes in compare.json.</p>')
    return "".join(rows)


def _changes_table(changes: list) -> str:
    if not changes:
        return "<p>No version or profile differs on any host present in both runs.</p>"
    rows = ["<table><tr><th>key</th><th>before</th><th>after</th><th>hosts</th><th>e.g.</th></tr>"]
    rows += [f"<tr><td>{escape(str(c['key']))}</td><td>{escape(str(c['before']))}</td>"
             f"<td>{escape(str(c['after']))}</td><td>{c['hosts']}</td><td>{escape(', '.join(c['examples']))}</td></tr>"
             for c in changes[:TABLE_ROWS]]
    rows.append("</table>")
    return "".join(rows)
