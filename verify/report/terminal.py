"""The summary table printed after a local run: failures first, one line per result."""
from __future__ import annotations

import shutil

from verify.report import action_label, action_note, for_people, host_of, one_line, summary_of
from verify.report.bench_phase import lines as bench_lines

COLOURS = {"FAIL": "\033[31m", "ERROR": "\033[35m", "WARN": "\033[33m", "SKIP": "\033[2m", "PASS": "\033[32m"}
RESET = "\033[0m"


def render(report: dict, width: int = 0, colour: bool = False) -> str:
    width = width or shutil.get_terminal_size((120, 24)).columns
    results = for_people(report)
    labels = [action_label(r) for r in results]  # "FAIL [reboot]": the status and what to do about it
    status_width = max((len(label) for label in labels), default=6)
    check_width = min(max((len(r.check_id) for r in results), default=5), 44)
    value_width = 18
    fixed = status_width + 1 + check_width + 1 + value_width * 2 + 2
    reason_width = max(width - fixed - 1, 20)
    header = (f"{'STATUS':<{status_width}} {'CHECK':<{check_width}} {'EXPECTED':<{value_width}} "
              f"{'OBSERVED':<{value_width}} REASON")
    lines = [header, "-" * min(width, len(header) + reason_width)]
    for r, label in zip(results, labels):
        status = f"{label:<{status_width}}"
        if colour:
            status = f"{COLOURS[r.status.value]}{status}{RESET}"
        lines.append(
            f"{status} {one_line(r.check_id, check_width):<{check_width}} "
            f"{one_line(r.expected, value_width):<{value_width}} {one_line(r.observed, value_width):<{value_width}} "
            f"{one_line(r.reason or r.remediation, reason_width)}"
        )
    tally_by_status, code = summary_of(report)
    tally = "  ".join(f"{status} {count}" for status, count in tally_by_status.items())
    note = action_note(report)
    lines += ["", *bench_lines(report), f"{host_of(report)}: {tally}  {note + '  ' if note else ''}(exit code {code})"]
    return "\n".join(lines) + "\n"
