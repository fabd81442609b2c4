"""The history on the command line: the options `tunefleet verify` takes, what a verify run does before
and after its checks, and `tunefleet history` itself. Standard library only (node side)."""
from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from verify.history import regress
from verify.history.drain import DEFAULT_CAP
from verify.result import EXIT_BAD_INPUT


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """History, regression and scheduler options of `tunefleet verify` (local and fleet)."""
    h = parser.add_argument_group("history (every run is remembered; see `tunefleet history`)")
    where = h.add_mutually_exclusive_group()
    where.add_argument("--history", metavar="PATH", default=None,
                       help="history database (default: $TUNEFLEET_HISTORY, else /var/lib/tunefleet/history.sqlite "
                            "as root, else $XDG_DATA_HOME/tunefleet/history.sqlite)")
    where.add_argument("--no-history", action="store_true",
                       help="neither record this run nor judge it against the past")
    h.add_argument("--regression-percent", type=float, default=regress.DEFAULT_PERCENT, metavar="PCT",
                   help="a figure worse than the median of the node's last runs by more than this is a WARN "
                        f"(default {regress.DEFAULT_PERCENT:g})")
    h.add_argument("--regression-runs", type=int, default=regress.DEFAULT_RUNS, metavar="N",
                   help=f"how many past runs the median is over (default {regress.DEFAULT_RUNS}; "
                        f"at least {regress.MIN_BASELINE_RUNS} needed)")
    s = parser.add_argument_group("acting on the verdict (opt-in)")
    s.add_argument("--on-fail", choices=("drain",), default=None,
                   help="drain a node with a FAIL in Slurm (State=DRAIN Reason='tunefleet: ...') or taint it in "
                        "Kubernetes (tunefleet.io/verify=failed:NoSchedule)")
    s.add_argument("--on-pass", choices=("resume",), default=None,
                   help="undo a drain or taint tunefleet set, once the node passes (never one set by someone else)")
    s.add_argument("--scheduler", choices=("auto", "slurm", "kubernetes"), default="auto",
                   help="where to drain/resume (auto: Slurm when scontrol answers, else Kubernetes)")
    s.add_argument("--node-name", default=None,
                   help="the node's name in the scheduler (default: the short host name; fleet: the inventory name)")
    s.add_argument("--dry-run", action="store_true", help="print the drain/resume commands instead of running them")
    cap_said = DEFAULT_CAP.replace("%", "%%")  # argparse formats help with %
    s.add_argument("--drain-cap", default=DEFAULT_CAP, metavar="CAP",
                   help=f"drain no more than this share ('10%%') or count ('3') of the cluster's hosts, counting the "
                        f"ones tunefleet drained already (default {cap_said}); beyond it the run says "
                        "'drain cap reached' and names the hosts it did not drain")


def add_history_parser(sub) -> None:
    p = sub.add_parser("history", help="a host's benchmark figures over its runs, or the fleet's regressions")
    p.add_argument("--history", metavar="PATH", default=None, help="history database (default: as for verify)")
    p.add_argument("--host", default=None,
                   help="the host whose figures to show over its runs (default: a table of every host's runs)")
    p.add_argument("--check", action="append", default=[], help="only this check (repeatable), e.g. bench.h2d.gpu0")
    p.add_argument("--last", type=int, default=None, help="only the last N runs")
    p.add_argument("--format", choices=("table", "csv", "json", "html"), default="table")
    p.add_argument("--out", default=None, help="write to this file (safely, as root) instead of stdout")
    p.add_argument("--regressions", action="store_true",
                   help="the fleet regression pass: every host's latest run against its own past")
    p.add_argument("--regression-percent", type=float, default=regress.DEFAULT_PERCENT, metavar="PCT")
    p.add_argument("--regression-runs", type=int, default=regress.DEFAULT_RUNS, metavar="N")


# ---- a verify run ---------------------------------------------------------------------------------


@dataclass
class RunHistory:
    """What a verify run opened before its checks: the store (None with --no-history) and the options."""

    store: object
    settings: regress.Settings
    args: argparse.Namespace
    problem: Optional[str] = None  # why the run goes on unrecorded (a history that cannot be written here)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def prepare(args) -> RunHistory:
    """Check the options and open the history before any check runs; ValueError/HistoryError name the problem."""
    from verify.history.record import open_for_run, options_from_args
    from verify.history.store import HistoryUnavailable

    options = options_from_args(args)
    if getattr(args, "node_name", None) is not None and not str(args.node_name).strip():
        raise ValueError("--node-name: empty")
    try:
        return RunHistory(open_for_run(options), options.settings, args)
    except HistoryUnavailable as exc:  # a read-only place is no reason to leave the node unchecked
        return RunHistory(None, options.settings, args, problem=str(exc))


def lookback_of(prepared: RunHistory, host: str):
    """The host's Lookback (verify.history.store): since its last ack, else boot. A history that cannot be
    read gives boot, and the failure is reported once, with the run's other history rows."""
    from verify.history.store import BOOT, HistoryError

    if prepared.store is None:
        return BOOT
    try:
        return prepared.store.lookback(host)
    except HistoryError as exc:
        prepared.problem = prepared.problem or str(exc)
        return BOOT


def finish_local(prepared: RunHistory, report: dict, node) -> None:
    """After a local run: judge it against the node's past, record it, act on the verdict; rows into report."""
    from verify.history.record import add_results, damaged_rows, judge_and_record, not_recorded

    try:
        if prepared.problem:
            add_results(report, [not_recorded(prepared.problem)])
        elif prepared.store is not None:
            add_results(report, judge_and_record(prepared.store, report, prepared.settings))
            report["history"] = recent_trend(prepared.store, str(report.get("host")))
        if prepared.store is not None:
            add_results(report, damaged_rows(prepared.store.warnings))
    finally:
        prepared.close()
    add_results(report, verdict_actions(prepared.args, report, node,
                                        getattr(prepared.args, "node_name", None) or default_node_name()))


REPORT_TREND_RUNS = 20


def recent_trend(store, host: str) -> dict:
    """The node's figures over its last runs (this one included), for the node report's HTML trend plots."""
    from verify.history import trend
    from verify.history.store import HistoryError

    try:
        data = trend.build(store, host, last=REPORT_TREND_RUNS)
    except HistoryError as exc:
        return {"database": store.path, "error": str(exc)}
    return {"database": store.path, "runs": len(data.runs), "trend": {
        name: {"unit": data.units.get(name, ""), "points": [[p.started_at, p.status, p.value] for p in points]}
        for name, points in data.checks.items()}}


def default_node_name() -> str:
    return socket.gethostname().split(".")[0]


def verdict_actions(args, report: dict, node, name: str, held_by_cap: Optional[bool] = None) -> list:
    """--on-fail drain / --on-pass resume for one node report: the scheduler rows (none when not asked).

    A FAIL drains, within the drain cap (`held_by_cap`: the fleet run's plan decided; None: ask the scheduler
    how many nodes tunefleet drained already); a run with an ERROR (something could not be checked) is not
    resumed, and a run cut short by a signal does neither: an unfinished verdict must not move a node in or
    out of the scheduler.
    """
    from verify import interrupt

    if not (getattr(args, "on_fail", None) or getattr(args, "on_pass", None)) or interrupt.received() is not None:
        return []
    from verify.history.drain import act, cap_allows, first_failure
    from verify.report import results_of
    from verify.result import Status

    results = results_of(report)
    statuses = {r.status for r in results}
    failure = first_failure(results)
    if failure and args.on_fail == "drain":
        if held_by_cap:
            return []  # the fleet run says 'drain cap reached' once, naming every host it held back
        if held_by_cap is None:
            allowed, held = cap_allows(node, name, getattr(args, "drain_cap", DEFAULT_CAP), args.scheduler)
            if not allowed:
                return [held]
        return [act(node, "drain", name, args.scheduler, failure, args.dry_run).to_result()]
    if not failure and Status.ERROR not in statuses and args.on_pass == "resume":
        return [act(node, "resume", name, args.scheduler, dry_run=args.dry_run).to_result()]
    return []


# ---- tunefleet history ----------------------------------------------------------------------------


def main(args) -> int:
    from verify.history import trend
    from verify.history.record import fleet_pass
    from verify.history.store import HistoryError, default_path, open_store

    settings = regress.Settings(args.regression_percent, args.regression_runs)
    try:
        settings.validate()
        if args.last is not None and args.last < 1:
            raise ValueError(f"--last {args.last}: must be 1 or more")
        path, note = history_to_read(args.history, default_path())
        store = open_store(path, create=False)
    except (ValueError, HistoryError) as exc:
        print(f"tunefleet history: {exc}", file=sys.stderr)
        if not args.history:
            print(f"tunefleet history: {where_to_look()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"tunefleet history: {note or which_history_note(path, args.history)}", file=sys.stderr)
    with store:
        try:
            if args.regressions:
                text = _regressions_text(*fleet_pass(store, settings), args.format)
            elif args.host:
                if args.host not in store.hosts():
                    print(f"tunefleet history: --host {args.host}: no run recorded for it in {store.path}",
                          file=sys.stderr)
                    return EXIT_BAD_INPUT
                data = trend.build(store, args.host, args.check or None, args.last)
                if args.format == "html":
                    past = store.past_runs(args.host, settings.runs + 1)
                    current = past[0].values if past else {}
                    found = regress.find_regressions(args.host, current, past[1:], settings, store.checks())
                    text = trend.to_html(data, found)
                else:
                    text = trend.RENDERERS[args.format](data)
            else:
                text = hosts_text(store.host_runs(), store.path, args.format)
        except HistoryError as exc:
            print(f"tunefleet history: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        for line in store.warnings:  # damaged rows were skipped; the rest is shown
            print(f"tunefleet history: WARN {line}", file=sys.stderr)
    return _emit(text, args.out)


# Where `tunefleet verify --out reports/NAME --history reports/NAME/history.sqlite` (as `make demo` does) keeps
# a run's own history: looked for under the current directory when the default history does not exist.
LOCAL_HISTORIES = "reports/*/history.sqlite"


def history_to_read(asked: Optional[str], default: str) -> tuple:
    """(path, note): --history when given; else the default history when it exists; else the history the
    user last wrote beside their reports (the newest reports/*/history.sqlite under the current directory,
    as `make demo` leaves it), with a note saying which one was read. Only a file's name and age are
    read here; open_store checks the file and its directory before anything reads it."""
    if asked or os.path.lexists(default):
        return asked or default, ""
    found = [(entry.stat(follow_symlinks=False).st_mtime, str(entry)) for entry in Path.cwd().glob(LOCAL_HISTORIES)
             if entry.is_file() and not entry.is_symlink()]
    if not found:
        return default, ""
    newest = max(found)[1]
    return newest, (f"reading {newest}, the newest {LOCAL_HISTORIES} here ({default} does not exist); "
                    "--history PATH reads another")


def which_history_note(path: str, asked: Optional[str]) -> str:
    """Which history is read and why, and where the others are: the demo's beside its reports
    (`make demo` keeps its own) is named with the option that reads it."""
    note = f"reading {path}" + ("" if asked else " (the default: $TUNEFLEET_HISTORY, else the machine's)")
    here = Path.cwd()
    others = sorted(str(entry.relative_to(here)) for entry in here.glob(LOCAL_HISTORIES)
                    if entry.is_file() and not entry.is_symlink() and os.path.abspath(entry) != os.path.abspath(path))
    if others:
        note += f"; {others[0]} is another (`make demo` writes one): --history {others[0]} reads it"
    return note


HOSTS_HEADER = ("HOST", "RUNS", "FIRST RUN", "LAST RUN", "SOURCE", "WORST", "EXIT")


def hosts_text(hosts: list, path: str, fmt: str) -> str:
    """Every host of the history with its runs (verify.history.store.HostRuns), as a table, CSV, JSON or HTML."""
    import json

    rows = [(h.host, str(h.runs), h.first_at, h.last_at, h.last_source, h.last_worst, str(h.last_exit_code))
            for h in hosts]
    if fmt == "json":
        return json.dumps({"history": path, "hosts": [dict(zip(("host", "runs", "first_at", "last_at", "last_source",
                                                               "last_worst", "last_exit_code"),
                                                              (h.host, h.runs, h.first_at, h.last_at, h.last_source,
                                                               h.last_worst, h.last_exit_code))) for h in hosts]},
                          indent=1) + "\n"
    if fmt == "csv":
        import csv
        import io

        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([c.lower().replace(" ", "_") for c in HOSTS_HEADER])
        writer.writerows(rows)
        return out.getvalue()
    if fmt == "html":
        from html import escape

        def cells(row: tuple, tag: str) -> str:
            return "".join(f"<{tag}>{escape(c)}</{tag}>" for c in row)

        return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tunefleet history</title>"
                f"</head><body><h1>{escape(path)}</h1><table><tr>{cells(HOSTS_HEADER, 'th')}</tr>"
                + "".join(f"<tr>{cells(row, 'td')}</tr>" for row in rows) + "</table></body></html>\n")
    if not rows:
        return f"no run recorded in {path}\n"
    widths = [max(len(row[i]) for row in [HOSTS_HEADER, *rows]) for i in range(len(HOSTS_HEADER))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in [HOSTS_HEADER, *rows]]
    total = sum(h.runs for h in hosts)
    lines += ["", f"{len(rows)} host(s), {total} run(s); a host's figures over its runs: "
              "tunefleet history --host HOST (--format html draws them)"]
    return "\n".join(lines) + "\n"


def where_to_look() -> str:
    return (f"no history found: pass --history PATH, the file given to `tunefleet verify --history` (`make demo` "
            f"writes reports/demo/history.sqlite; run from the checkout, {LOCAL_HISTORIES} is found by itself), "
            "or set TUNEFLEET_HISTORY")


def _regressions_text(regressions: list, drift: list, fmt: str) -> str:
    import json

    if fmt == "json":
        return json.dumps({"regressions": [r.to_dict() for r in regressions],
                           "drift": [d.to_dict() for d in drift]}, indent=1) + "\n"
    if fmt == "csv":
        lines = ["host,check_id,value,baseline_median,runs,change_percent"]
        lines += [f"{r.host},{r.check_id},{r.value!r},{r.baseline!r},{r.runs},{r.change_percent:.1f}"
                  for r in regressions]
        return "\n".join(lines) + "\n"
    lines = [f"{len(regressions)} regressions, {len(drift)} config changes since the previous run"]
    lines += [f"  WARN {r.host}: {r.reason()}" for r in regressions]
    lines += [f"  DRIFT {d.host}: {d.reason()}" for d in drift]
    return "\n".join(lines) + "\n"


def _emit(text: str, out: Optional[str]) -> int:
    if not out:
        sys.stdout.write(text)
        return 0
    from verify.safe_io import PRIVATE_FILE, write_file_atomic

    try:
        write_file_atomic(out, text, PRIVATE_FILE)
    except OSError as exc:
        print(f"tunefleet history: --out {out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {out}")
    return 0
