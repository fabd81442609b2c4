"""The node report as Markdown: summary, then one table, failures first."""
from __future__ import annotations

from verify.report import for_people, one_line
from verify.report.bench_phase import lines as bench_lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(report: dict) -> str:
    counts = report["summary"]["counts"]
    facts = report.get("facts") or {}
    os_name = ((facts.get("os") or {}).get("pretty_name")) or "unknown OS"
    lines = [
        f"# tunefleet node report: {report['host']}",
        "",
        f"Generated {report['generated_at']} · {os_name} · kernel {facts.get('kernel') or '?'} · "
        f"profile {report.get('profile') or 'none'} · exit code {report['summary']['exit_code']}",
        "",
        " · ".join(f"**{status}** {count}" for status, count in counts.items()),
        "",
        *(f"- {_cell(line)}" for line in bench_lines(report)),
        "",
        "| status | check | expected | observed | reason | remediation |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in for_people(report):
        lines.append("| " + " | ".join(_cell(c) for c in (
            r.status.value, f"`{r.check_id}`", one_line(r.expected, 80), one_line(r.observed, 80), r.reason,
            r.remediation)) + " |")
    return "\n".join(lines) + "\n"
