"""Pieces every benchmark shares: thresholds, judging, retries, progress, engine subprocesses.

A benchmark never runs heavy code in the verify process itself: each engine is a module run as
`python3 -m verify.bench.<engine>` through the node's runner, so the runner's timeout kills the
whole process group of a hung run and keeps what it printed.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from verify.judging import peaks
from verify.judging.thresholds import Threshold, broken_measurement
from verify.result import CheckResult, Status
from verify.runner import DEFAULT_CWD, clean_env

RESULT_MARKER = "TUNEFLEET_RESULT "
# Exit status an engine uses for "this node cannot run me" (no torch, no GPU): a SKIP, not an ERROR.
CANNOT_RUN = 3
ROLE = "bench"
GB = 1e9  # nccl-tests, perftest --report_gbits and this package: decimal units
BROKEN_REMEDIATION = "the benchmark's output is not a real measurement: re-run it and read its raw output"


def progress(message: str) -> None:
    """Progress goes to stderr so JSON on stdout stays clean."""
    print(f"[tunefleet bench] {message}", file=sys.stderr, flush=True)


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
    return result(check_id, Status.PASS, f"{reason}: recorded only", None, observed, "", details)


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


def package_parent() -> str:
    return str(Path(__file__).resolve().parent.parent.parent)


# Engines run as root on shared nodes, so nothing of the caller's may choose their code: `-I`
# (isolated: no PYTHON* variables, no user site-packages, no script directory or cwd on sys.path,
# Python 3.4+, unlike -P which needs 3.11) and this bootstrap, which puts back only trusted
# directories (engine_sys_path) by their absolute paths, then runs the module as __main__.
_BOOTSTRAP = ("import runpy, sys; extra = sys.argv[1]; sys.argv = sys.argv[2:]; "
              "sys.path[:] = [p for p in (extra.split(':') if extra else []) + sys.path if p]; "
              "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")
# Engines start in a directory root owns, not wherever verify was started (verify.runner's own default).
ENGINE_CWD = DEFAULT_CWD


def engine_sys_path() -> list:
    """Absolute directories an engine imports from besides the interpreter's own (which -I keeps,
    a venv's site-packages included): this package's parent, then the directories verify itself
    was started with (a node run's work directory; verify_node_pythonpath, where PyTorch may
    live), each only when no one but root and us can change it (verify.safe_io)."""
    from verify.safe_io import check_dir_trusted

    kept: list = []
    for entry in [package_parent(), *sys.path]:
        if not entry or not os.path.isabs(entry) or entry in kept or not os.path.isdir(entry):
            continue
        try:
            check_dir_trusted(entry)
        except OSError:
            continue
        kept.append(entry)
    return kept


def engine_argv(module: str, args: list) -> list:
    """argv that runs one engine module with the same interpreter as verify, isolated (see _BOOTSTRAP)."""
    return [sys.executable, "-I", "-u", "-c", _BOOTSTRAP, ":".join(engine_sys_path()), module,
            *[str(a) for a in args]]


def engine_env(extra: Optional[dict] = None) -> dict:
    """The whole environment of an engine: verify.runner.clean_env (the fixed root-owned PATH, root's
    own HOME, the operator's GPU/NCCL settings, nothing else of the caller's) plus unbuffered output."""
    return clean_env(dict({"PYTHONUNBUFFERED": "1"}, **(extra or {})))


def emit_result(payload: dict) -> None:
    """How an engine hands its measurement back: one marked JSON line on stdout."""
    print(RESULT_MARKER + json.dumps(payload, sort_keys=True), flush=True)


def read_result(stdout: str) -> Optional[Any]:
    """The last marked line of an engine's stdout, or None when it never got that far.

    What comes back is whatever JSON the line held: check it against the engine's schema
    (checked_payload) before anything reads a field of it.
    """
    found = None
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            try:
                found = json.loads(line[len(RESULT_MARKER) :])
            except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; deep nesting recurses
                found = None
    return found


# ---- engine payload schemas ---------------------------------------------------------------------
# The one check at the boundary where an engine's JSON enters verify: each engine module declares
# PAYLOAD_SCHEMA, a dict of field -> what it holds: a type or a tuple of types (NUMBER is int or
# float, never bool), a nested schema (a dict), ListOf(item) for a list of items, Maybe(spec) for a
# field that may be absent or null. Judges then read fields without meeting KeyError or TypeError.
NUMBER = (int, float)
MAX_PROBLEMS_SAID = 3


@dataclass(frozen=True)
class ListOf:
    item: Any
    may_be_empty: bool = False


@dataclass(frozen=True)
class Maybe:
    spec: Any


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}")


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def schema_problems(value: Any, spec: Any, where: str = "") -> list:
    """Every way `value` differs from `spec`, each naming the field: ["rows[2].busbw_gbps: missing"]."""
    here = where or "the payload"
    if isinstance(spec, Maybe):
        return [] if value is None else schema_problems(value, spec.spec, where)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return [f"{here}: expected an object, got {_kind(value)}"]
        found = []
        for name, inner in spec.items():
            if name in value:
                found += schema_problems(value[name], inner, _join(where, name))
            elif not isinstance(inner, Maybe):
                found.append(f"{_join(where, name)}: missing")
        return found
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return [f"{here}: expected a list, got {_kind(value)}"]
        if not value and not spec.may_be_empty:
            return [f"{here}: empty list"]
        found = []
        for index, item in enumerate(value):
            found += schema_problems(item, spec.item, f"{where}[{index}]")
        return found
    types = spec if isinstance(spec, tuple) else (spec,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        return [f"{here}: expected {' or '.join(t.__name__ for t in types)}, got {_kind(value)}"]
    return []


def checked_payload(payload: Any, schema: dict) -> tuple:
    """(payload fit to judge or None, problems) at the boundary where an engine's result enters.

    A list of objects at the top level (rows, gpus) keeps its well-formed items, so they are still
    judged: only the malformed ones are dropped, each named in the problems. Any other field that
    is missing or of the wrong type leaves nothing safe to judge (None).
    """
    if not isinstance(payload, dict):
        return None, schema_problems(payload, schema)
    kept, problems, fatal = dict(payload), [], False
    for name, spec in schema.items():
        rows = spec.spec if isinstance(spec, Maybe) and isinstance(payload.get(name), list) else spec
        if isinstance(rows, ListOf) and isinstance(rows.item, dict) and isinstance(payload.get(name), list):
            good = []
            for index, item in enumerate(payload[name]):
                wrong = schema_problems(item, rows.item, f"{name}[{index}]")
                problems += wrong
                if not wrong:
                    good.append(item)
            kept[name] = good
            if not payload[name] and not rows.may_be_empty:
                problems.append(f"{name}: empty list")
                fatal = True
            elif not good and payload[name]:
                fatal = True
            continue
        wrong = schema_problems(payload.get(name), spec, name) if name in payload else (
            [] if isinstance(spec, Maybe) else [f"{name}: missing"])
        problems += wrong
        fatal = fatal or bool(wrong)
    return (None if fatal else kept), problems


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
