"""The fleet comparison (verify.fleet.compare's document) for the terminal and as Markdown.

Both read only the document: a person sees the verdict first, then the fleet health of both sides, the figures
that moved (regressions first), the nodes that moved beyond their noise with what differs on them, and what
changed across the fleet. The full lists are in the JSON; these show the first TERMINAL_ROWS of each.
"""
from __future__ import annotations

from typing import Optional

TERMINAL_ROWS = 20
MARKDOWN_ROWS = 200


def pct(value: Optional[float], signed: bool = True) -> str:
    if value is None:
        return "?"
    return f"{value:+.2f} %" if signed else f"{value:.2f} %"


def number(value: Optional[float]) -> str:
    return "?" if value is None else f"{value:.4g}"


def figure_name(entry: dict) -> str:
    return f"{entry['figure']} [{entry['hardware']}]" if entry.get("hardware") else entry["figure"]


def label(entry: dict) -> str:
    if entry.get("regression"):
        return "REGRESSION"
    if entry.get("direction") == "better":
        return "better"
    if entry.get("significant"):
        return "shifted"
    return "untested" if entry.get("p_value") is None else "no shift"


def health_line(document: dict) -> str:
    a, b = document["before"]["health"], document["after"]["health"]
    change = ""
    if a.get("value") is not None and b.get("value") is not None:
        change = f" ({b['value'] - a['value']:+.2f} points)"
    return (f"fleet health: {pct(a.get('value'), False)} -> {pct(b.get('value'), False)}{change}; "
            f"FAILs {a['failed']} -> {b['failed']} (cost {a['fail_cost']} -> {b['fail_cost']}), "
            f"ERRORs {a['errors']} -> {b['errors']}")


def verdict_line(document: dict) -> str:
    verdict = document["verdict"]
    method = document["method"]
    if verdict["regression"]:
        head = f"REGRESSION: {verdict['regressed_figures']} figure(s) got worse"
    else:
        head = "no significant regression"
    return (f"{head} at family-wise level {method['alpha']:g} (Holm); {verdict['nodes_moved']} node(s) moved beyond "
            f"their noise or apart from the fleet: {verdict['nodes_worse']} worse, {verdict['nodes_apart']} apart from "
            f"the fleet (exit {verdict['exit_code']})")


def shift_text(entry: dict) -> str:
    if entry.get("shift_percent") is None:
        return entry.get("note") or "not tested"
    return (f"shift {pct(entry['shift_percent'])} [{pct(entry['low_percent'])}, {pct(entry['high_percent'])}] "
            f"p_adj {entry['p_adjusted']:.2g}")


def with_fleet(move: dict) -> str:
    where = "apart from the fleet" if move.get("apart_from_fleet") else "with the fleet"
    return f"{where}, whose median change was {pct(move.get('fleet_change_percent'))}"


def differences_text(node: dict, limit: int = 4) -> str:
    diffs = node.get("differences") or []
    if not diffs:
        return "no difference in versions, profile" + (" or tuned values" if node.get("config_read") else "")
    shown = "; ".join(f"{d['key']} {d['before']} -> {d['after']}" for d in diffs[:limit])
    return shown + (f"; and {len(diffs) - limit} more" if len(diffs) > limit else "")


def terminal(document: dict, rows: int = TERMINAL_ROWS) -> str:
    before, after = document["before"], document["after"]
    lines = [f"tunefleet compare: {before['source']} ({before['kind']}, {before['hosts']} hosts) -> "
             f"{after['source']} ({after['kind']}, {after['hosts']} hosts)",
             verdict_line(document), health_line(document)]
    figures = document["figures"]
    lines.append(f"figures: {len(figures)} compared; shift = Hodges-Lehmann with "
                 f"{100 * (1 - document['method']['alpha']):g} % interval, as % of the before median")
    for entry in figures[:rows]:
        unit = f" {entry['unit']}" if entry.get("unit") else ""
        lines.append(f"  {label(entry):<10} {figure_name(entry)}: median {number(entry['before']['median'])} -> "
                     f"{number(entry['after']['median'])}{unit} ({entry['before']['samples']} -> "
                     f"{entry['after']['samples']}); {shift_text(entry)}")
    if len(figures) > rows:
        lines.append(f"  ... and {len(figures) - rows} more (see the JSON)")
    nodes = document["nodes"]
    if nodes:
        lines.append(f"nodes beyond their own noise or apart from the fleet: {len(nodes)}")
        for node in nodes[:rows]:
            top = node["figures"][0]
            lines.append(f"  {node['host']}: {top['direction']} {top['figure']} {pct(top['change_percent'])} "
                         f"(noise {pct(top['noise_percent'], False)} from {top['noise_source']}, z {top['z']:.1f}; "
                         f"{with_fleet(top)})"
                         + (f" and {len(node['figures']) - 1} more figure(s)" if len(node["figures"]) > 1 else "")
                         + f"; differs: {differences_text(node)}")
        if len(nodes) > rows:
            lines.append(f"  ... and {len(nodes) - rows} more")
    if document["changes"]:
        lines.append("what changed across the fleet (hosts on both sides):")
        for change in document["changes"][:rows]:
            lines.append(f"  {change['key']}: {change['before']} -> {change['after']} on {change['hosts']} host(s)")
    hosts = document["hosts"]
    if hosts["only_before"] or hosts["only_after"]:
        lines.append(f"hosts only before: {len(hosts['only_before'])}, only after: {len(hosts['only_after'])}")
    lines += [f"note: {note}" for note in document["notes"][:rows]]
    return "\n".join(lines)


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown(document: dict, rows: int = MARKDOWN_ROWS) -> str:
    before, after, method = document["before"], document["after"], document["method"]
    out = [f"# tunefleet compare: {_cell(before['source'])} -> {_cell(after['source'])}", "",
           f"**{verdict_line(document)}**", "",
           "| | before | after |", "| --- | --- | --- |",
           f"| source | {_cell(before['source'])} ({before['kind']}) | {_cell(after['source'])} ({after['kind']}) |",
           f"| hosts | {before['hosts']} | {after['hosts']} |",
           f"| fleet health | {pct(before['health']['value'], False)} | {pct(after['health']['value'], False)} |",
           f"| FAILs (cost) | {before['health']['failed']} ({before['health']['fail_cost']}) | "
           f"{after['health']['failed']} ({after['health']['fail_cost']}) |",
           f"| ERRORs | {before['health']['errors']} | {after['health']['errors']} |", "",
           f"Fleet health: {method['health']}.", "", "## Figures", "",
           f"Shift: {method['shift']}; interval: {method['interval']}; test: {method['test']}; "
           f"{method['correction']}.", "",
           "| verdict | figure | unit | before median (n) | after median (n) | shift | interval | p (Holm) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for entry in document["figures"][:rows]:
        interval = (f"{pct(entry['low_percent'])} .. {pct(entry['high_percent'])}"
                    if entry.get("low_percent") is not None else "")
        p_adj = f"{entry['p_adjusted']:.2g}" if entry.get("p_adjusted") is not None else _cell(entry.get("note", ""))
        out.append(f"| {label(entry)} | {_cell(figure_name(entry))} | {_cell(entry.get('unit', ''))} | "
                   f"{number(entry['before']['median'])} ({entry['before']['samples']}) | "
                   f"{number(entry['after']['median'])} ({entry['after']['samples']}) | "
                   f"{pct(entry['shift_percent'])} | {interval} | {p_adj} |")
    if len(document["figures"]) > rows:
        out.append(f"\n{len(document['figures']) - rows} more figures in compare.json.")
    out += ["", "## Nodes beyond their own noise or apart from the fleet", "", f"Noise: {method['node_noise']}.", ""]
    if document["nodes"]:
        out += ["| host | direction | figure | before | after | change | noise | z | fleet | what differs |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for node in document["nodes"][:rows]:
            for move in node["figures"]:
                out.append(f"| {_cell(node['host'])} | {move['direction']} | {_cell(move['figure'])} | "
                           f"{number(move['before'])} | {number(move['after'])} | {pct(move['change_percent'])} | "
                           f"{pct(move['noise_percent'], False)} ({move['noise_source']}) | {move['z']:.1f} | "
                           f"{with_fleet(move)} | {_cell(differences_text(node))} |")
    else:
        out.append("None.")
    out += ["", "## What changed across the fleet", ""]
    if document["changes"]:
        out += ["| key | before | after | hosts | e.g. |", "| --- | --- | --- | --- | --- |"]
        out += [f"| {_cell(c['key'])} | {_cell(c['before'])} | {_cell(c['after'])} | {c['hosts']} | "
                f"{_cell(', '.join(c['examples']))} |" for c in document["changes"][:rows]]
    else:
        out.append("No version or profile differs on any host present in both.")
    if document["notes"]:
        out += ["", "## Notes", ""] + [f"- {_cell(n)}" for n in document["notes"][:rows]]
    return "\n".join(out) + "\n"
