"""`tunefleet report DIR`: the fleet report (JSON, JUnit, Markdown, self-contained HTML) from saved node reports."""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Optional
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

from verify import __version__
from verify.fleet.model import load_fleet_dir, load_fleet_dir_for
from verify.fleet.summary import FleetSummary, build_summary
from verify.report import plots
from verify.result import Status
from verify.safe_io import PRIVATE_DIR, PRIVATE_FILE, SHARED_FILE, UnsafePathError, open_trusted_dir, write_in_dir

SCHEMA = "tunefleet.fleet_report/v1"
FORMATS = ("json", "md", "html", "junit")
OUTPUT_NAMES = {"json": "fleet_report.json", "md": "fleet_report.md", "html": "fleet_report.html",
                "junit": "fleet_report.junit.xml"}
# The HTML matrix shows every host with a problem and at most this many all-clear hosts;
# the JSON always has them all.
HTML_CLEAN_HOSTS = 50
HTML_MAX_COLUMNS = 60


def main(args) -> int:
    formats = [f.strip() for f in str(args.format).split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        print(f"tunefleet report: unknown format(s) {', '.join(unknown)}; choose from {', '.join(FORMATS)}",
              file=sys.stderr)
        return 2
    from verify.fleet.baseline import from_args, judge

    try:
        judging = from_args(args)  # a bad --baseline/--rules is refused before anything is read or written
    except (FileNotFoundError, ValueError) as exc:
        print(f"tunefleet report: {exc}", file=sys.stderr)
        return 2
    loaded = load_fleet_dir_for("tunefleet report", args.directory)
    if loaded is None:
        return 2
    nodes, errors = loaded
    summary = build_summary(nodes, errors, read_addresses(Path(args.directory), errors),
                            baseline_findings=judge(nodes, *judging) if judging else None)
    summary.regressions = read_regressions(Path(args.directory), errors)
    out_dir = Path(args.out or args.directory)
    try:
        written = write_reports(summary, out_dir, formats, title=f"tunefleet fleet report: {Path(args.directory).name}",
                                world_readable=getattr(args, "world_readable", False))
    except UnsafePathError as exc:
        print(f"tunefleet report: {exc.strerror}", file=sys.stderr)
        return 2
    print(terminal_summary(summary))
    for path in written:
        print(f"wrote {path}")
    return summary.exit_code()


def read_addresses(directory: Path, errors: list) -> dict:
    """host -> addresses, written by playbooks/verify.yml; {} when absent (a hand-collected DIR)."""
    from verify.fleet.model import ADDRESSES_NAME, LoadError

    path = directory / ADDRESSES_NAME
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        errors.append(LoadError(str(path), f"unreadable, path MTU failures are not attributed: {exc}"))
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        errors.append(LoadError(str(path), "must map each host to a list of addresses"))
        return {}
    return {str(host): [str(a) for a in addrs] for host, addrs in data.items()}


def read_regressions(directory: Path, errors: list) -> dict:
    """The run's regressions against each host's own history (verify.history), {} when none were recorded."""
    from verify.fleet.model import REGRESSIONS_NAME, LoadError

    path = directory / REGRESSIONS_NAME
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: a file nested too deeply
        errors.append(LoadError(str(path), f"unreadable, regressions not listed: {str(exc)[:200]}"))
        return {}
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("regressions", "drift")):
        errors.append(LoadError(str(path), "must hold 'regressions' and 'drift' lists"))
        return {}
    return data


def write_reports(summary: FleetSummary, out_dir: Path, formats, title: str = "tunefleet fleet report",
                  world_readable: bool = False) -> list:
    """Each format as a new file renamed over its name, owner-only unless world_readable, in a
    directory only root and the caller can change (verify.safe_io; UnsafePathError otherwise)."""
    renderers = {"json": lambda: _json_text(to_json(summary)),
                 "md": lambda: to_markdown(summary, title), "html": lambda: to_html(summary, title),
                 "junit": lambda: to_junit(summary)}
    mode = SHARED_FILE if world_readable else PRIVATE_FILE
    dir_fd = open_trusted_dir(str(out_dir), create=True, mode=0o755 if world_readable else PRIVATE_DIR)
    written = []
    try:
        for fmt in formats:
            write_in_dir(dir_fd, OUTPUT_NAMES[fmt], renderers[fmt](), mode)
            written.append(out_dir / OUTPUT_NAMES[fmt])
    finally:
        os.close(dir_fd)
    return written


def _json_text(document: dict) -> str:
    """No indent: json's C encoder only runs without one, and a 10,000-host report is 20 MB."""
    try:
        import orjson
    except ImportError:
        return json.dumps(document, default=str)
    try:
        return orjson.dumps(document, default=str).decode("utf-8")
    except orjson.JSONEncodeError:  # an integer beyond 64 bits read from a node report
        return json.dumps(document, default=str)


def to_json(summary: FleetSummary) -> dict:
    """The fleet report document (schema tunefleet.fleet_report/v1):

    hosts_by_worst_status {FAIL, ERROR, WARN, PASS, SKIP: count}; bad_hosts [host] (worst FAIL or
    ERROR); checks [check_id], most failing first; hosts [{host, worst, counts, source, problems:
    [CheckResult dict, failures first], statuses {check_id: status}}], failures first; outliers
    [{metric, host, value, unit, fleet_median, modified_z, reason}]; version_drift [{key, host,
    value, majority, majority_hosts, reason}]; regressions [{host, check_id, value, baseline_median, runs,
    change_percent, limit_percent, unit, reason}] and config_drift [{host, key, before, after, previous_run,
    reason}] against each host's own history (verify.history); baseline [{host, metric, value, unit, status,
    profile, baseline, reference, rule, reason}] against the fleet baseline (--baseline, verify.fleet.baseline);
    load_errors [{path, message}].
    """
    return {
        "schema": SCHEMA,
        "generated_at": _now(),
        "tool_version": __version__,
        "hosts_by_worst_status": summary.host_counts,
        "bad_hosts": summary.bad_hosts,
        "checks": summary.check_ids,
        "hosts": [
            {"host": row.host, "worst": row.worst, "counts": row.counts, "source": row.source,
             "problems": [r.to_dict() for r in row.problems], "statuses": row.statuses}
            for row in summary.rows
        ],
        "outliers": [o.to_dict() for o in summary.outliers],
        "version_drift": [d.to_dict() for d in summary.drift],
        "regressions": summary.regressions.get("regressions", []),
        "config_drift": summary.regressions.get("drift", []),
        "baseline": [f.to_dict() for f in summary.baseline],
        "load_errors": [e.to_dict() for e in summary.load_errors],
    }


def to_junit(summary: FleetSummary) -> str:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>']
    total = sum(len(row.statuses) for row in summary.rows) + len(summary.load_errors)
    failures = sum(row.counts["FAIL"] for row in summary.rows)
    errors = sum(row.counts["ERROR"] for row in summary.rows) + len(summary.load_errors)
    lines.append(f'<testsuites name="tunefleet fleet" tests="{total}" failures="{failures}" errors="{errors}">')
    # Every host repeats the same check names: quote each once (a 10,000-host fleet has 400,000 cases).
    quoted = {check_id: quoteattr(check_id) for check_id in summary.check_ids}
    for row in summary.rows:
        host = quoteattr(row.host)
        problems = {r.check_id: r for r in row.problems}
        lines.append(f'<testsuite name={host} tests="{len(row.statuses)}" '
                     f'failures="{row.counts["FAIL"]}" errors="{row.counts["ERROR"]}" skipped="{row.counts["SKIP"]}">')
        for check_id, status in row.statuses.items():
            head = f"<testcase classname={host} name={quoted[check_id]}"
            if status == "PASS":
                lines.append(head + "/>")
            elif status == "SKIP":
                lines.append(head + "><skipped/></testcase>")
            else:
                lines.append(_junit_problem(head, status, problems.get(check_id)))
        lines.append("</testsuite>")
    if summary.load_errors:
        lines.append(f'<testsuite name="node reports" tests="{len(summary.load_errors)}" failures="0" '
                     f'errors="{len(summary.load_errors)}">')
        for e in summary.load_errors:
            lines.append(f'<testcase classname="load" name={quoteattr(e.path)}>'
                         f'<error message={quoteattr(e.message)}/></testcase>')
        lines.append("</testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


def _junit_problem(head: str, status: str, problem) -> str:
    reason = problem.reason if problem else status
    body = ""
    if problem:
        body = xml_escape(f"expected: {problem.expected}\nobserved: {problem.observed}\nfix: {problem.remediation}")
    tag = {"FAIL": "failure", "ERROR": "error"}.get(status)
    if tag is None:  # WARN: passes in CI, but the reason stays visible in the output
        return head + f"><system-out>{xml_escape('WARN: ' + reason)}</system-out></testcase>"
    return head + f"><{tag} message={quoteattr(reason)}>{body}</{tag}></testcase>"


def to_markdown(summary: FleetSummary, title: str) -> str:
    counts = summary.host_counts
    out = [f"# {title}", "",
           f"{len(summary.rows)} hosts: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n), ""]
    if summary.load_errors:
        out += ["## Unreadable node reports", ""]
        out += [f"- `{e.path}`: {e.message}" for e in summary.load_errors] + [""]
    problem_rows = [row for row in summary.rows if row.problems]
    if problem_rows:
        out += ["## Problems, failures first", "", "| host | status | check | reason | fix |", "| --- " * 5 + "|"]
        for row in problem_rows:
            for r in row.problems:
                reason, fix = _md(r.reason), _md(r.remediation)
                out.append(f"| {row.host} | {r.status.value} | `{r.check_id}` | {reason} | {fix} |")
        out.append("")
    if summary.outliers:
        out += ["## Outliers against the fleet (median/MAD)", ""]
        out += [f"- **{o.host}**: {o.reason()}" for o in summary.outliers] + [""]
    if summary.drift:
        out += ["## Versions that differ from the majority", ""]
        out += [f"- **{d.host}**: {d.reason()}" for d in summary.drift] + [""]
    if summary.regressions.get("regressions") or summary.regressions.get("drift"):
        out += ["## Regressions against each host's own history", ""]
        out += [f"- **{r['host']}**: {_md(r['reason'])}" for r in summary.regressions.get("regressions", [])]
        out += [f"- **{d['host']}**: {_md(d['reason'])}" for d in summary.regressions.get("drift", [])] + [""]
    if summary.baseline:
        out += ["## Below the fleet baseline", ""]
        out += [f"- **{f.host}** {f.status}: {_md(f.reason())}" for f in summary.baseline] + [""]
    clean = [row.host for row in summary.rows if not row.problems]
    if clean:
        shown = ", ".join(clean[:50]) + (f" and {len(clean) - 50} more" if len(clean) > 50 else "")
        out += [f"All checks passed or skipped on {len(clean)} hosts: {shown}", ""]
    return "\n".join(out)


def to_html(summary: FleetSummary, title: str) -> str:
    import jinja2  # controller-side only

    from verify.desired import project_root

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(project_root() / "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    problem_rows = [row for row in summary.rows if row.problems]
    clean_rows = [row for row in summary.rows if not row.problems]
    shown_rows = problem_rows + clean_rows[:HTML_CLEAN_HOSTS]
    return env.get_template("fleet_report.html.j2").render(
        title=title, generated_at=_now(), version=__version__, summary=summary,
        matrix_rows=shown_rows, hidden_clean=len(clean_rows) - min(len(clean_rows), HTML_CLEAN_HOSTS),
        columns=summary.check_ids[:HTML_MAX_COLUMNS], hidden_columns=max(0, len(summary.check_ids) - HTML_MAX_COLUMNS),
        plots=_html_plots(summary),
    )


def _html_plots(summary: FleetSummary) -> list:
    flagged = frozenset(o.host for o in summary.outliers)
    svgs = []
    for check_id, curves in sorted(summary.curves.items()):
        svgs.append(plots.busbw_curves(curves, f"{check_id}: busbw by message size", flagged))
    for metric, (values, _, unit) in sorted(summary.metrics.items()):
        svgs.append(plots.distribution(values, f"{metric} across the fleet", unit,
                                       frozenset(o.host for o in summary.outliers if o.metric == metric)))
    return [svg for svg in svgs if svg]


def terminal_summary(summary: FleetSummary) -> str:
    counts = summary.host_counts
    lines = [f"{len(summary.rows)} hosts: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)]
    for row in summary.rows:
        if row.worst not in (Status.FAIL.value, Status.ERROR.value, Status.WARN.value):
            break
        first = row.problems[0] if row.problems else None
        more = f" (+{len(row.problems) - 1} more)" if len(row.problems) > 1 else ""
        if first:
            lines.append(f"  {row.worst:5} {row.host}: {first.check_id}: {first.reason}{more}")
    if summary.regressions.get("regressions"):
        lines.append(f"  {len(summary.regressions['regressions'])} regression(s) against the hosts' own history")
    if summary.baseline:
        lines.append(f"  {len(summary.baseline)} figure(s) below the fleet baseline on "
                     f"{len({f.host for f in summary.baseline})} host(s)")
    if summary.load_errors:
        lines.append(f"  {len(summary.load_errors)} node report(s) could not be read")
    return "\n".join(lines)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_from_dir(directory: str, out: Optional[str] = None, formats=FORMATS) -> FleetSummary:
    """For callers (the fleet run, the scale benchmark) that want the summary object back."""
    nodes, errors = load_fleet_dir(directory)
    summary = build_summary(nodes, errors)
    write_reports(summary, Path(out or directory), formats)
    return summary
