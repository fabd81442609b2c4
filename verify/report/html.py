"""The node report as one self-contained HTML page (inline CSS, no external resources), rendered with
Jinja2 from templates/report.html.j2. jinja2 is imported here only: a bare node skips this format."""
from __future__ import annotations

from pathlib import Path

from verify.report import FormatUnavailable, for_people, one_line
from verify.report.bench_phase import lines as bench_lines

TEMPLATE = "report.html.j2"


def template_dir() -> Path:
    from verify.desired import project_root

    return project_root() / "templates"


def render(report: dict) -> str:
    try:
        import jinja2
    except ImportError:
        raise FormatUnavailable("jinja2 is not installed on this machine (HTML is rendered on the controller: "
                                "`tunefleet report` or copy report.json)") from None
    directory = template_dir()
    if not (directory / TEMPLATE).is_file():
        raise FormatUnavailable(f"template {TEMPLATE} not found under {directory}")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(directory)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["one_line"] = one_line
    from verify.report.trend_plots import report_trends

    return env.get_template(TEMPLATE).render(report=report, results=for_people(report), bench_lines=bench_lines(report),
                                             history_plots=report_trends(report))
