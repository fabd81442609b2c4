"""A fleet run in the history: every node report recorded under the run directory's name, the regression
pass for that run written beside the reports (fleet_regressions.json, listed by the fleet report), and
each host's verdict acted on from the controller (--on-fail / --on-pass)."""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from typing import Optional

from verify.bounded_load import MAX_BYTES, load_json_bounded, read_bounded
from verify.fleet.model import FLEET_REPORT_MAX_BYTES, REGRESSIONS_NAME, json_loads
from verify.fleet.report import main as rebuild
from verify.history.cli import RunHistory, verdict_actions
from verify.history.drain import DEFAULT_CAP, first_failure
from verify.history.drain import plan as drain_plan
from verify.history.record import fleet_pass, run_record
from verify.history.store import HistoryError
from verify.node import Node
from verify.report import results_of
from verify.safe_io import PRIVATE_FILE, open_trusted_dir, write_in_dir


def record_fleet(prepared: RunHistory, run_dir: str) -> Optional[dict]:
    """Append every node report of a fleet run (one transaction, keyed by the run directory's name, so
    recording it twice adds nothing), run the regression pass for that run, and write its result as
    fleet_regressions.json next to the reports (the fleet report lists it beside the outliers)."""
    if prepared.store is None:
        return None
    key = os.path.basename(os.path.abspath(run_dir))
    records = []
    for entry in sorted(os.scandir(run_dir), key=lambda e: e.name):
        path = os.path.join(entry.path, "report.json")
        if not entry.is_dir(follow_symlinks=False) or not os.path.isfile(path):
            continue
        try:
            report = json_loads(read_bounded(path, MAX_BYTES + 1, "node report"), "node report")
            report["host"] = entry.name  # the inventory name, as the fleet report uses
            records.append(run_record(report, results_of(report), "fleet", key))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # the fleet report lists unreadable node reports itself
    prepared.store.record_many(records)
    regressions, drift = fleet_pass(prepared.store, prepared.settings, run_key=key)
    document = {"schema": "tunefleet.fleet_regressions/v1", "run": key,
                "percent": prepared.settings.percent, "runs": prepared.settings.runs,
                "regressions": [r.to_dict() for r in regressions], "drift": [d.to_dict() for d in drift]}
    dir_fd = open_trusted_dir(run_dir)
    try:
        write_in_dir(dir_fd, REGRESSIONS_NAME, json.dumps(document, indent=1), PRIVATE_FILE)
    finally:
        os.close(dir_fd)
    return document


def finish_fleet(prepared: RunHistory, run_dir: str, write=print, node=None) -> None:
    """After a fleet run: record it and rebuild its fleet report with the regressions, then act on
    each host's verdict from the controller (--on-fail/--on-pass; the node name is the inventory's)."""
    report_path = os.path.join(run_dir, "fleet_report.json")
    if prepared.problem:  # the history could not be opened for writing here: said once, the run goes on
        write(f"tunefleet verify: history not recorded: {prepared.problem}")
    try:
        document = record_fleet(prepared, run_dir)
    except (HistoryError, OSError) as exc:
        write(f"tunefleet verify: history not recorded: {exc}")
        document = None
    finally:
        prepared.close()
    if document and os.path.isfile(report_path):
        with contextlib.redirect_stdout(io.StringIO()):  # the summary is printed once, by the caller
            rebuild(argparse.Namespace(directory=run_dir, format="json,md,html,junit", out=None,
                                        world_readable=getattr(prepared.args, "world_readable", False)))
        for r in document["regressions"]:
            write(f"  REGRESSION {r['host']}: {r['reason']}")
    args = prepared.args
    if not (getattr(args, "on_fail", None) or getattr(args, "on_pass", None)) or not os.path.isfile(report_path):
        return
    try:
        hosts = load_json_bounded(report_path, FLEET_REPORT_MAX_BYTES, what="fleet report", allow_nan=True)["hosts"]
    except (OSError, ValueError, KeyError, TypeError) as exc:  # the fleet report said its own problems already
        write(f"tunefleet verify: the fleet report could not be read to act on its hosts: {exc}")
        return
    node = node or Node()  # the controller: scontrol/kubectl run where tunefleet verify -i runs
    failing = [(entry["host"], failure) for entry in hosts
               for failure in [first_failure(results_of({"results": entry["problems"]}))] if failure]
    decided = drain_plan(failing, len(hosts), getattr(args, "drain_cap", DEFAULT_CAP))
    drained = {host for host, _ in decided.drain}
    for entry in hosts:
        pseudo = {"host": entry["host"], "results": entry["problems"]}
        held = entry["host"] not in drained if args.on_fail == "drain" else None
        for row in verdict_actions(args, pseudo, node, entry["host"], held_by_cap=held):
            write(f"  {row.status.value:5} {row.check_id} {entry['host']}: {row.reason}")
    held_row = decided.held_row() if args.on_fail == "drain" else None
    if held_row is not None:
        write(f"  {held_row.status.value:5} {held_row.check_id}: {held_row.reason}")
