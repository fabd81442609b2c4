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
from verify.bounded_load import MAX_BYTES, BoundedLoadError, loads_json_bytes_bounded, read_bounded
from verify.desired import project_root, template_environment
from verify.fleet.model import load_fleet_dir, load_fleet_dir_for
from verify.fleet.summary import FleetSummary, build_summary
from verify.payload_schema import ListOf, Maybe, schema_problems
from verify.report import OutDirError, action_label, bench_table, check_out_dir, plots
from verify.report.schemas import FiniteNumber, split_problem
from verify.result import Status
from verify.safe_io import (
    PRIVATE_DIR,
    PRIVATE_FILE,
    SHARED_FILE,
    UnsafePathError,
    for_terminal,
    open_trusted_dir,
    write_in_dir,
)

SCHEMA = "tunefleet.fleet_report/v1"
FORMATS = ("json", "md", "html", "junit")
OUTPUT_NAMES = {"json": "fleet_report.json", "md": "fleet_report.md", "html": "fleet_report.html",
                "junit": "fleet_report.junit.xml"}
# The HTML matrix shows every host with a problem and at most this many all-clear hosts;
# the JSON always has them all.
HTML_CLEAN_HOSTS = 50
HTML_MAX_COLUMNS = 60
SHARED_NOTE = ("one machine (the same kernel boot id): their benchmarks measured the same devices at once, "
               "so an outlier among them is a WARN, never a confirmed FAIL")
# Hosts whose benchmark table is drawn (failures first); the JSON has every figure.
HTML_BENCH_HOSTS = 50


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
    out_dir = Path(args.out or args.directory)
    world_readable = getattr(args, "world_readable", False)
    if args.out:  # the default is the run directory itself: checked once it is known to be one (below)
        try:
            check_out_dir(str(out_dir), world_readable)
        except OutDirError as exc:
            print(f"tunefleet report: --out: {exc}", file=sys.stderr)
            return 2
    loaded = load_fleet_dir_for("tunefleet report", args.directory)
    if loaded is None:
        return 2
    nodes, errors = loaded
    side_errors: list = []
    addresses = read_addresses(Path(args.directory), side_errors)
    regressions = read_regressions(Path(args.directory), side_errors)
    pairs = read_pairs(Path(args.directory), side_errors)
    read_refused_archives(Path(args.directory), side_errors)
    for error in side_errors:
        print(f"tunefleet report: WARN {for_terminal(error.describe())}", file=sys.stderr)
    summary = build_summary(nodes, errors + side_errors, addresses,
                            baseline_findings=judge(nodes, *judging) if judging else None)
    summary.regressions = regressions
    try:
        written = write_reports(summary, out_dir, formats, title=f"tunefleet fleet report: {Path(args.directory).name}",
                                world_readable=world_readable, pairs=pairs)
    except UnsafePathError as exc:
        print(f"tunefleet report: report directory {out_dir} cannot be used safely: {exc.strerror}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only run directory, or one that went away meanwhile
        print(f"tunefleet report: report directory {out_dir} is not writable: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(for_terminal(terminal_summary(summary)))  # hosts, check ids and reasons come from the nodes
    for path in written:
        print(f"wrote {path}")
    return summary.exit_code()


# The side files a fleet run writes beside the node reports, as the report reads them back: each record
# checked against its schema (verify.payload_schema's declarative check), a record that differs left out and named.
ADDRESS_LIST = ListOf(str, may_be_empty=True)
REGRESSION_ENTRY = {"host": str, "reason": str}  # verify.history.regress to_dict: what the writers read
REGRESSIONS_FILE = {"regressions": list, "drift": list, "percent": Maybe(FiniteNumber), "runs": Maybe(FiniteNumber)}


def read_addresses(directory: Path, errors: list) -> dict:
    """host -> addresses, written by playbooks/verify.yml; {} when absent (a hand-collected DIR).
    A host whose entry is not a list of addresses is left out (its path MTU failures are not blamed)."""
    from verify.fleet.model import ADDRESSES_NAME, LoadError

    path = directory / ADDRESSES_NAME
    data = _side_file(path, errors, "path MTU failures are not attributed")
    if data is None:
        return {}
    if not isinstance(data, dict):
        errors.append(LoadError(str(path), "must map each host to a list of addresses"))
        return {}
    addresses = {}
    for host, addrs in data.items():
        wrong = schema_problems(addrs, ADDRESS_LIST, str(host))
        if wrong:
            errors.append(LoadError(str(path), *reversed(split_problem(wrong[0]))))
            continue
        addresses[str(host)] = list(addrs)
    return addresses


def read_regressions(directory: Path, errors: list) -> dict:
    """The run's regressions against each host's own history (verify.history), {} when none were recorded.
    An entry without a host and a reason is left out; the rest are listed."""
    from verify.fleet.model import REGRESSIONS_NAME, LoadError

    path = directory / REGRESSIONS_NAME
    data = _side_file(path, errors, "regressions not listed")
    if data is None:
        return {}
    wrong = schema_problems(data, {k: v for k, v in REGRESSIONS_FILE.items() if v is list})
    if wrong:
        errors.append(LoadError(str(path), f"must hold 'regressions' and 'drift' lists ({wrong[0]})"))
        return {}
    out: dict = {"regressions": [], "drift": []}
    for section in ("regressions", "drift"):
        for index, entry in enumerate(data[section]):
            problems = schema_problems(entry, REGRESSION_ENTRY, f"{section}[{index}]")
            for problem in problems:
                field, message = split_problem(problem)
                errors.append(LoadError(str(path), message, field))
            if not problems:
                out[section].append(entry)
    for key in ("percent", "runs"):  # the settings the pass ran with, shown beside the list
        problems = schema_problems(data.get(key), REGRESSIONS_FILE[key], key)
        if problems:
            errors.append(LoadError(str(path), split_problem(problems[0])[1], key))
        elif data.get(key) is not None:
            out[key] = data[key]
    return out


def read_pairs(directory: Path, errors: list) -> Optional[dict]:
    """The pairs section of the run's pairwise NCCL rounds (verify.fleet.blame writes <run>/nccl-pairs/
    summary.json; its "pairs": the pair matrix and the blame list with evidence), None when the run had
    none. A cell or blame entry the report cannot draw is left out and named; each host's own verdict
    (fleet.nccl_pairwise) comes from its crossnode file, never from here."""
    from verify.fleet.blame import PAIRS_NAME
    from verify.fleet.model import LoadError
    from verify.report.pair_matrix import checked_section

    path = directory / PAIRS_NAME
    data = _side_file(path, errors, "the pair matrix is not shown")
    if data is None:
        return None
    section, problems = checked_section(data.get("pairs") if isinstance(data, dict) else None)
    for where, message in problems:
        if where:
            errors.append(LoadError(str(path), message, f"pairs.{where}"))
        else:
            errors.append(LoadError(str(path), f"not a pairwise summary ({message}): the pair matrix is not shown"))
    return section


def read_refused_archives(directory: Path, errors: list) -> None:
    """One load error per host whose report archive the unpack refused (verify.fleet.unpack, <run>/unpack/
    refused.json): the host has no report, and the fleet report says why instead of leaving it out unnamed."""
    from verify.fleet.model import LoadError
    from verify.fleet.unpack import ARCHIVE, REFUSED_DIR, REFUSED_NAME, damaged_line, foreign_line

    path = directory / REFUSED_DIR / REFUSED_NAME
    data = _side_file(path, errors, "hosts whose archive was refused are not named")
    if data is None:
        return
    hosts = data.get("hosts") if isinstance(data, dict) else None
    left_out = data.get("left_out", {}) if isinstance(data, dict) else None
    if not isinstance(hosts, dict) or not isinstance(left_out, dict):
        errors.append(LoadError(str(path), "must hold {'hosts': {host: why}, 'left_out': {host: [names]}}"))
        return
    for host, why in sorted(hosts.items()):
        errors.append(LoadError(str(directory / str(host)[:200] / ARCHIVE),
                                damaged_line(str(host)[:200], str(why)[:400]) + "; it has no report: re-run it"))
    for host, names in sorted(left_out.items()):
        shown = [str(n)[:120] for n in names] if isinstance(names, list) else [str(names)[:120]]
        errors.append(LoadError(str(directory / str(host)[:200] / ARCHIVE), foreign_line(str(host)[:200], shown)))


def _side_file(path: Path, errors: list, lost: str):
    """A side file the fleet run wrote, through the bounded loader; None (the error recorded) when
    absent or unreadable."""
    from verify.fleet.model import LoadError

    if not path.is_file():
        return None
    try:
        return loads_json_bytes_bounded(read_bounded(str(path), MAX_BYTES, "side file"), "side file")
    except BoundedLoadError as exc:
        errors.append(LoadError(str(path), f"unreadable, {lost}: {str(exc)[:200]}"))
        return None


def write_reports(summary: FleetSummary, out_dir: Path, formats, title: str = "tunefleet fleet report",
                  world_readable: bool = False, pairs: Optional[dict] = None) -> list:
    """Each format as a new file renamed over its name, owner-only unless world_readable, in a
    directory only root and the caller can change (verify.safe_io; UnsafePathError otherwise).
    pairs: the pairwise NCCL section (read_pairs), None when the run had no pair rounds."""
    renderers = {"json": lambda: _json_text(to_json(summary, pairs)),
                 "md": lambda: to_markdown(summary, title, pairs), "html": lambda: to_html(summary, title, pairs),
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


def to_json(summary: FleetSummary, pairs: Optional[dict] = None) -> dict:
    """The fleet report document (schema tunefleet.fleet_report/v1):

    hosts_by_worst_status {FAIL, ERROR, WARN, PASS, SKIP: count}; bad_hosts [host] (worst FAIL or
    ERROR); checks [check_id], most failing first; hosts [{host, worst, counts, source, problems:
    [CheckResult dict, failures first], statuses {check_id: status}}], failures first; outliers
    [{metric, host, value, unit, fleet_median, modified_z, reason}]; version_drift [{key, host,
    value, majority, majority_hosts, reason}]; regressions [{host, check_id, value, baseline_median, runs,
    change_percent, limit_percent, unit, reason}] and config_drift [{host, key, before, after, previous_run,
    reason}] against each host's own history (verify.history); baseline [{host, metric, value, unit, status,
    profile, baseline, reference, rule, reason}] against the fleet baseline (--baseline, verify.fleet.baseline);
    pairs {hosts, cells [{a, b, rails {rail: {status, busbw_gbps, floor_gbps, fraction, round}}, worst_fraction,
    status}], blame [{kind, hosts, rails, status, reason, remediation, evidence [outcome]}]} of the pairwise
    NCCL rounds (verify.report.pair_matrix), null when the run had none; shared_machines [{boot_id, hosts}]: hosts
    reporting one kernel boot id (containers of one machine), whose benchmarks share its devices, so their
    outliers are not confirmed (verify.fleet.summary); load_errors [{path, message}].
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
        "pairs": pairs,
        "shared_machines": summary.shared_machines,
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
            name = f"{e.path} {e.field}" if e.field else e.path
            lines.append(f'<testcase classname="load" name={quoteattr(name)}>'
                         f'<error message={quoteattr(e.message)}/></testcase>')
        lines.append("</testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


def _junit_problem(head: str, status: str, problem) -> str:
    reason = problem.reason if problem else status
    label = action_label(problem) if problem else status
    body = ""
    if problem:
        body = xml_escape(f"expected: {problem.expected}\nobserved: {problem.observed}\nfix: {problem.remediation}")
    tag = {"FAIL": "failure", "ERROR": "error"}.get(status)
    if tag is None:  # WARN: passes in CI, but the reason stays visible in the output
        return head + f"><system-out>{xml_escape(label + ': ' + reason)}</system-out></testcase>"
    return head + f"><{tag} message={quoteattr(reason)} type={quoteattr(label)}>{body}</{tag}></testcase>"


def to_markdown(summary: FleetSummary, title: str, pairs: Optional[dict] = None) -> str:
    counts = summary.host_counts
    out = [f"# {title}", "",
           f"{len(summary.rows)} hosts: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n), ""]
    if summary.load_errors:
        out += ["## Unreadable files and records", ""]
        out += [f"- `{e.path}`: {_md(e.field + ': ' if e.field else '')}{_md(e.message)}"
                for e in summary.load_errors] + [""]
    problem_rows = [row for row in summary.rows if row.problems]
    if problem_rows:
        out += ["## Problems, failures first", "", "| host | status | check | reason | fix |", "| --- " * 5 + "|"]
        for row in problem_rows:
            for r in row.problems:
                reason, fix = _md(r.reason), _md(r.remediation)
                out.append(f"| {row.host} | {action_label(r)} | `{r.check_id}` | {reason} | {fix} |")
        out.append("")
    if summary.outliers:
        out += ["## Outliers against the fleet (median/MAD)", ""]
        out += [f"- **{o.host}**: {o.reason()}" for o in summary.outliers] + [""]
    if summary.shared_machines:
        out += ["## Hosts sharing one machine", ""]
        out += [f"- {', '.join(g['hosts'])}: {SHARED_NOTE}" for g in summary.shared_machines] + [""]
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
    if pairs:
        out += _pairs_markdown(pairs)
    clean = [row.host for row in summary.rows if not row.problems]
    if clean:
        shown = ", ".join(clean[:50]) + (f" and {len(clean) - 50} more" if len(clean) > 50 else "")
        out += [f"All checks passed or skipped on {len(clean)} hosts: {shown}", ""]
    return "\n".join(out)


def _pairs_markdown(pairs: dict) -> list:
    from verify.report.pair_matrix import evidence_text

    failing = sum(1 for c in pairs["cells"] if c["status"] != "pass")
    out = ["## Pairwise NCCL per rail", "",
           f"{len(pairs['cells'])} pairs tested between {len(pairs['hosts'])} hosts, {failing} with a failing or "
           "unmeasured rail.", ""]
    for blame in pairs["blame"]:
        out.append(f"- **{', '.join(blame['hosts'])}** {blame['status']} ({blame['kind']}"
                   f"{': ' + ', '.join(blame['rails']) if blame['rails'] else ''}): {_md(blame['reason'])}")
        out += [f"  - {_md(evidence_text(o))}" for o in blame.get("evidence", [])[:8]]
    if not pairs["blame"]:
        out.append("No node, rail or path is blamed.")
    return out + [""]


def to_html(summary: FleetSummary, title: str, pairs: Optional[dict] = None) -> str:
    import jinja2  # controller-side only

    from verify.report.pair_matrix import evidence_text, heat_map_svg

    env = template_environment(project_root() / "templates", autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["action_label"] = action_label
    env.filters["evidence_text"] = evidence_text
    problem_rows = [row for row in summary.rows if row.problems]
    clean_rows = [row for row in summary.rows if not row.problems]
    shown_rows = problem_rows + clean_rows[:HTML_CLEAN_HOSTS]
    return env.get_template("fleet_report.html.j2").render(
        title=title, generated_at=_now(), version=__version__, summary=summary,
        matrix_rows=shown_rows, hidden_clean=len(clean_rows) - min(len(clean_rows), HTML_CLEAN_HOSTS),
        columns=summary.check_ids[:HTML_MAX_COLUMNS], hidden_columns=max(0, len(summary.check_ids) - HTML_MAX_COLUMNS),
        plots=_html_plots(summary), host_benchmarks=_host_benchmarks(shown_rows),
        pairs=pairs, pair_matrix_svg=heat_map_svg(pairs) if pairs else "", shared_note=SHARED_NOTE,
    )


def _host_benchmarks(rows: list) -> list:
    """(host, [(BenchRow, its SVG bar)]) for each drawn host that measured something, in the matrix's order:
    the same table the node report opens with."""
    out = []
    for row in rows:
        table = bench_table.rows_of(row.benchmarks)
        if table:
            out.append((row.host, [(bench, bench_table.bar_svg(bench)) for bench in table]))
        if len(out) == HTML_BENCH_HOSTS:
            break
    return out


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
    for group in summary.shared_machines:
        lines.append(f"  {', '.join(group['hosts'])}: {SHARED_NOTE}")
    if summary.baseline:
        lines.append(f"  {len(summary.baseline)} figure(s) below the fleet baseline on "
                     f"{len({f.host for f in summary.baseline})} host(s)")
    unreadable = sum(1 for e in summary.load_errors if not e.field)
    if unreadable:
        lines.append(f"  {unreadable} file(s) could not be read")
    if len(summary.load_errors) > unreadable:
        lines.append(f"  {len(summary.load_errors) - unreadable} damaged record(s) skipped (WARN above)")
    return "\n".join(lines)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_from_dir(directory: str, out: Optional[str] = None, formats=FORMATS) -> FleetSummary:
    """For callers (the fleet run, the scale benchmark) that want the summary object back."""
    nodes, errors = load_fleet_dir(directory)
    pairs = read_pairs(Path(directory), errors)
    read_refused_archives(Path(directory), errors)
    summary = build_summary(nodes, errors)
    write_reports(summary, Path(out or directory), formats, pairs=pairs)
    return summary
