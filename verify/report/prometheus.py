"""The node report as a node_exporter textfile-collector file (exposition format 0.0.4).

tunefleet_check_status{check,role,status} is a state set: 1 for the result's status, 0 for the
other four, so `== 1` selects the current state and alerts can match status="FAIL".
tunefleet_check_ok{check,role} is 1 for PASS/WARN/SKIP, 0 for FAIL/ERROR.
"""
from __future__ import annotations

import datetime

from verify.bounded_load import finite_number
from verify.report import results_of, section, summary_of
from verify.result import Status

OK_STATUSES = (Status.PASS, Status.WARN, Status.SKIP)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{escape(str(v))}"' for k, v in labels.items()) + "}"


def _timestamp(iso: object) -> float:
    """Unix time of the report's generated_at; 0 (the epoch: obviously stale) when it is absent or not a time."""
    try:
        return datetime.datetime.fromisoformat(iso).timestamp() if isinstance(iso, str) else 0.0
    except (ValueError, OverflowError, OSError):
        return 0.0


def render(report: dict) -> str:
    results = results_of(report)
    lines = [
        "# HELP tunefleet_check_status Result of a tunefleet check: 1 for its current status, 0 otherwise.",
        "# TYPE tunefleet_check_status gauge",
    ]
    seen = set()
    unique = []
    for r in results:  # a repeated check id would be a duplicate series: keep the first
        if r.check_id not in seen:
            seen.add(r.check_id)
            unique.append(r)
    for r in unique:
        for status in Status:
            value = 1 if r.status is status else 0
            lines.append(f"tunefleet_check_status{_labels(check=r.check_id, role=r.role, status=status.value)} {value}")
    lines += [
        "# HELP tunefleet_check_ok 1 when the check passed, warned or was skipped; 0 when it failed or errored.",
        "# TYPE tunefleet_check_ok gauge",
    ]
    for r in unique:
        lines.append(f"tunefleet_check_ok{_labels(check=r.check_id, role=r.role)} {int(r.status in OK_STATUSES)}")
    run = section(report, "run")
    lines += [
        "# HELP tunefleet_verify_last_run_timestamp_seconds When this node was last verified (Unix time).",
        "# TYPE tunefleet_verify_last_run_timestamp_seconds gauge",
        f"tunefleet_verify_last_run_timestamp_seconds {_timestamp(report.get('generated_at')):.0f}",
        "# HELP tunefleet_verify_duration_seconds How long the last verify run took.",
        "# TYPE tunefleet_verify_duration_seconds gauge",
        f"tunefleet_verify_duration_seconds {finite_number(run.get('duration_s')) or 0:.6f}",
        "# HELP tunefleet_verify_exit_code Exit code of the last run: 0 ok, 1 failed, 3 could not check (ERROR).",
        "# TYPE tunefleet_verify_exit_code gauge",
        f"tunefleet_verify_exit_code {summary_of(report)[1]}",
    ]
    return "\n".join(lines) + "\n"
