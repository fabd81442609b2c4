"""Pieces every benchmark shares: thresholds, judging, retries, progress, payload errors, sizes.

A benchmark never runs heavy code in the verify process itself: each engine is a module run as
`python3 -m verify.bench.<engine>` through the node's runner (verify.engine: argv, environment, the
marked result line and its schema check), so the runner's timeout kills the whole process group of a
hung run and keeps what it printed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from verify.judging import peaks
from verify.judging.thresholds import Threshold, broken_measurement
from verify.result import CheckResult, Status
from verify.safe_io import for_terminal

ROLE = "bench"
GB = 1e9  # nccl-tests, perftest --report_gbits and this package: decimal units
BROKEN_REMEDIATION = "the benchmark's output is not a real measurement: re-run it and read its raw output"


def progress(message: str) -> None:
    """Progress goes to stderr so JSON on stdout stays clean."""
    print(f"[tunefleet bench] {for_terminal(message)}", file=sys.stderr, flush=True)


@dataclass
class Try:
    """One attempt of a benchmark: its judged result plus the raw output kept for the report."""

    result: CheckResult
    raw: dict = field(default_factory=dict)


def with_retries(attempt: Callable[[int], Try], tries: int, label: str) -> CheckResult:
    """Pass on the first try that passes; otherwise report the last try. Every try is recorded.

    Benchmarks on shared fabrics wobble (Azure/azurehpc PR #690 added the same policy after
    false failures), so one bad sample is not a verdict, but every sample stays in the report.
    """
    tries = max(1, int(tries))
    record = []
    final: Optional[CheckResult] = None
    for index in range(tries):
        progress(f"{label}: try {index + 1}/{tries}")
        outcome = attempt(index)
        summary = {
            "try": index + 1,
            "status": outcome.result.status.value,
            "observed": outcome.result.observed,
            "reason": outcome.result.reason,
        }
        summary.update(outcome.raw)
        record.append(summary)
        final = outcome.result
        progress(f"{label}: try {index + 1} {final.status.value}: {final.reason}")
        if final.status in (Status.PASS, Status.SKIP):
            break
    assert final is not None
    final.details["tries"] = record
    return final


def result(
    check_id: str,
    status: Status,
    reason: str,
    expected: Any = None,
    observed: Any = None,
    remediation: str = "",
    details: Optional[dict] = None,
) -> CheckResult:
    return CheckResult(
        check_id=check_id,
        role=ROLE,
        status=status,
        expected=expected,
        observed=observed,
        reason=reason,
        remediation=remediation,
        details=dict(details or {}),
    )


def judged(
    check_id: str,
    threshold: Threshold,
    value: float,
    reason: str,
    expected: Any,
    observed: Any,
    remediation: str,
    details: dict,
    note: str = "",
    peak: Optional[float] = None,
    peak_source: str = "",
    floor: Optional[float] = None,
    floor_source: str = "",
) -> CheckResult:
    """The value judged against the threshold; the fix is named only when it did not PASS.

    A figure that cannot be real (see broken_measurement) is an ERROR, never a PASS or a FAIL.
    """
    broken = broken_measurement(value, peak, peak_source, floor, floor_source)
    if broken:
        details = dict(details, physical_peak=peak) if peak is not None else details
        return result(check_id, Status.ERROR, f"{reason}: {broken}", expected, observed, BROKEN_REMEDIATION, details)
    status, why = threshold.judge(value)
    return result(
        check_id, status, f"{reason}: {why}{note}", expected, observed,
        remediation if status != Status.PASS else "", details,
    )


def recorded_only(
    check_id: str,
    value: Any,
    reason: str,
    observed: Any,
    details: dict,
    peak: Optional[peaks.Peak],
    floor: Optional[float] = None,
    floor_source: str = "",
) -> CheckResult:
    """A figure no floor judges: PASS "recorded only", but still bounded by physics, so a figure that
    cannot be real (NaN, infinite, negative, at or below `floor`, above `peak`) is ERROR. `peak` is
    None only for a figure with no upper limit (a latency, whose bound is its floor)."""
    if peak is not None:
        details = dict(details, physical_peak=peak.to_dict())
    broken = broken_measurement(value, peak.gbps if peak else None, peak.source if peak else "", floor, floor_source)
    if broken:
        return result(check_id, Status.ERROR, f"{reason}: {broken}", None, observed, BROKEN_REMEDIATION, details)
    return result(check_id, Status.PASS, f"{reason}: recorded only", None, observed, "",
                  dict(details, recorded_only=True))  # no verdict: reports show it as RECORDED (verify.report)


def figure_text(value: Any, digits: int = 2) -> str:
    """A figure for a reason line; what is not a number is shown as it came (never a TypeError)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return f"{value:.{digits}f}"
        except OverflowError:  # JSON holds integers of any length; a float holds about 308 digits
            return f"a {len(str(abs(value)))}-digit number"
    return repr(value)[:40]


def tail(text: str, limit: int = 4000) -> str:
    """Partial output kept in a report: the end is where a crash explains itself."""
    return text if len(text) <= limit else "...\n" + text[-limit:]


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


MAX_PROBLEMS_SAID = 3


def payload_error(check_id: str, label: str, problems: list, details: Optional[dict] = None) -> CheckResult:
    """One ERROR row for a malformed engine payload, naming the fields that are missing or wrong."""
    said = "; ".join(problems[:MAX_PROBLEMS_SAID])
    more = f" (and {len(problems) - MAX_PROBLEMS_SAID} more)" if len(problems) > MAX_PROBLEMS_SAID else ""
    return result(check_id, Status.ERROR, f"{label} returned a malformed result: {said}{more}",
                  remediation="the engine's output does not match its schema: re-run it and read its raw output",
                  details=dict(details or {}, payload_problems=problems))


def module_available(name: str) -> bool:
    """Whether a module could be imported, without importing it (torch takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def parse_size(text: Any) -> int:
    """Bytes from 4096, '1M', '4G', '512MiB' (K/M/G are binary, as nccl-tests reads them)."""
    if isinstance(text, (int, float)):
        return int(text)
    value = str(text).strip().upper().replace("IB", "").replace("B", "")
    factors = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if value and value[-1] in factors:
            return int(float(value[:-1]) * factors[value[-1]])
        return int(value)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"not a size: {text!r} (use bytes or a K/M/G suffix)") from exc


def human_bytes(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"
