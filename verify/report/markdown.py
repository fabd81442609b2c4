"""The node report as Markdown: summary, then one table, failures first."""
from __future__ import annotations

from verify.report import (
    action_label,
    action_note,
    fact_text,
    for_people,
    host_of,
    one_line,
    people_counts,
    section,
    standing,
    summary_of,
)
from verify.report.bench_phase import lines as bench_lines
from verify.report.bench_table import markdown_lines as bench_table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(report: dict) -> str:
    counts, code = summary_of(report)
    facts = section(report, "facts")
    os_name = fact_text(facts, "os", "pretty_name", default="unknown OS")
    benchmarks = bench_table(report)  # what was measured, before the rows of every check
    lines = [
        f"# tunefleet node report: {_cell(host_of(report))}",
        "",
        f"Generated {fact_text(report, 'generated_at')} · {os_name} · "
        f"kernel {fact_text(facts, 'kernel')} · profile {fact_text(report, 'profile', default='none')} · "
        f"exit code {code}" + (f" · **{action_note(report)}**" if action_note(report) else ""),
        "",
        " · ".join(f"**{status}** {count}" for status, count in people_counts(report).items()),
        "",
        *([f"> {_cell(standing(report))}", ""] if standing(report) else []),
        *(f"- {_cell(line)}" for line in bench_lines(report)),
        "",
        *benchmarks, *([""] if benchmarks else []),
        "| status | check | expected | observed | reason | remediation |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in for_people(report):
        lines.append("| " + " | ".join(_cell(c) for c in (
            action_label(r), f"`{r.check_id}`", one_line(r.expected, 80), one_line(r.observed, 80), r.reason,
            r.remediation)) + " |")
    return "\n".join(lines) + "\n"
