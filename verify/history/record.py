"""What a verify run does with the history: open it before anything runs (bad input refused early),
judge the finished run against the node's past, and append it, all of it in one transaction; and the health
counters the next run judges as increases (issue 26 item 3): `counters_of` keeps them from a result,
`previous_counters` gives them back in the shape node.memo["previous_counters"] holds for the checks, and
`previous_reading` with the time they were read, so the checks judge the increase per minute (issue 29).
"""
from __future__ import annotations

import datetime
import re
import secrets
from dataclasses import dataclass, field
from typing import Optional

from verify.history import regress
from verify.history.store import HistoryError, HistoryStore, Measurement, RunRecord, default_path, open_store
from verify.result import CheckResult, Status, counts, exit_code

CONFIG_VALUE_LIMIT = 200  # characters kept of one observed config value
# Results that are judgements of the history itself, or of the fleet, are not the node's config; nor are the
# health checks': they read the hardware's state (temperatures, clocks, power, link speeds, error counters),
# which moves by nature between two runs of an unchanged node ("50 C of T.Limit headroom" -> "48 C" drifted
# four times on an idle 4x H200), and each run judges them against their own thresholds.
# Drift compares configuration values only: the tuned roles' observed values and the version facts.
NOT_CONFIG_ROLES = frozenset({regress.ROLE, "fleet", "verify", "scheduler", "health"})
# The counters a health result carries, as its check writes them into details and reads them back from
# node.memo["previous_counters"][check_id]: (check id prefix, details key, nesting depth).
COUNTER_DETAILS = (
    ("health.nvlink.", "errors", 2),  # {"<link>": {"<counter name>": n}} (verify.checks.health_nvlink)
    ("health.ib.", "counters", 1),  # {"<sysfs counter>": n} (verify.checks.health_ib)
    ("health.aer.", "counters", 1),  # {"<device> <severity>": n} (verify.checks.health_aer)
    # ECC and row-remap counts as nvidia-smi printed them (text; flags such as "No" are not counts). Kept for
    # verify.checks.health_gpu's memory judge, which does not read previous counters yet.
    ("health.gpu.memory.", "readings", 1),
)


@dataclass
class HistoryOptions:
    path: Optional[str]  # None: --no-history
    settings: regress.Settings = field(default_factory=regress.Settings)


def options_from_args(args) -> HistoryOptions:
    """--history/--no-history/--regression-percent/--regression-runs, checked (ValueError names the option)."""
    settings = regress.Settings(percent=getattr(args, "regression_percent", regress.DEFAULT_PERCENT),
                                runs=getattr(args, "regression_runs", regress.DEFAULT_RUNS))
    settings.validate()
    if getattr(args, "no_history", False):
        return HistoryOptions(None, settings)
    return HistoryOptions(getattr(args, "history", None) or default_path(), settings)


def open_for_run(options: HistoryOptions) -> Optional[HistoryStore]:
    return open_store(options.path) if options.path else None


def measurements_of(results: list) -> list:
    """Every benchmark result, its figure only when it is a real one (ERROR and SKIP keep their status)."""
    out = []
    for r in results:
        if r.role == regress.ROLE or not regress.is_measurement(r):
            continue
        out.append(Measurement(r.check_id, r.status.value, regress.figure(r), regress.unit_of(r),
                               regress.higher_is_better(r)))
    return out


def _counter_shape(check_id: str) -> Optional[tuple]:
    """(details key, depth) of a check that carries counters, else None."""
    for prefix, key, depth in COUNTER_DETAILS:
        if check_id.startswith(prefix) and len(check_id) > len(prefix):
            return key, depth
    return None


_COUNT_TEXT = re.compile(r"[0-9]{1,20}")


def counter_depth(check_id: str) -> Optional[int]:
    shape = _counter_shape(check_id)
    return shape[1] if shape else None


def _count(value: object) -> Optional[int]:
    """A driver counter from a report: a whole number in [0, 2**64), or None. Text is matched as at most 20
    ASCII digits before int() ("²".isdigit() is true and a 5000-digit string raises ValueError)."""
    if isinstance(value, str) and _COUNT_TEXT.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < 1 << 64 else None
    return None


def _counts(values: object, depth: int) -> dict:
    if not isinstance(values, dict):
        return {}
    out = {}
    for name, value in values.items():
        kept = _count(value) if depth <= 1 else (_counts(value, depth - 1) or None)
        if kept is not None:
            out[str(name)] = kept
    return out


def counters_of(result: CheckResult) -> Optional[dict]:
    """The counters of one health result, in the shape its check reads them back, or None (not a check
    with counters, or none read this time). Anything that is not a non-negative whole count is left out."""
    shape = _counter_shape(result.check_id)
    if shape is None:
        return None
    return _counts((result.details or {}).get(shape[0]), shape[1]) or None


def counters_by_check(results: list) -> dict:
    """check_id -> counters, for every result that carries some (what a run keeps for the next one)."""
    out = {}
    for r in results:
        counters = counters_of(r)
        if counters is not None:
            out[r.check_id] = counters
    return out


def previous_counters(store: HistoryStore, host: str) -> dict:
    """node.memo["previous_counters"] for a run of host: what its last recorded run kept ({} when none).
    A damaged row is skipped and named in store.warnings; a history that cannot be read raises HistoryError."""
    return store.last_counters(host, counter_depth)


def previous_reading(store: HistoryStore, host: str) -> tuple:
    """(previous_counters, the Unix time that run started, or None): what health_common.remember_previous takes.
    The run's start stands for when its counters were read (the checks run in its first seconds); a start
    that is not an ISO time is named in store.warnings and the increase is then judged as a count."""
    counters, started = store.last_reading(host, counter_depth)
    return counters, (unix_time(store, started) if counters else None)


def unix_time(store: HistoryStore, stamp: Optional[str]) -> Optional[float]:
    if stamp is None:
        return None
    moment = stamp_to_unix(stamp)
    if moment is None:
        store.warnings.append(f"history {store.path}: the last run's started_at {stamp[:40]!r} is not an ISO "
                              "time: its counters are judged as counts, not rates")
    return moment


def stamp_to_unix(stamp: str) -> Optional[float]:
    """A run's started_at (verify.report.utc_now: ISO, UTC) -> Unix time; None when it is not an ISO time."""
    try:
        moment = datetime.datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:  # tunefleet writes UTC
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def config_of(report: dict, results: list) -> dict:
    """The values drift is judged on: each config check's observed value, and the version facts."""
    from verify.report import one_line
    from verify.stats.uniformity import fleet_versions

    config = {}
    for r in results:
        if r.role in NOT_CONFIG_ROLES or regress.is_measurement(r) or r.observed is None:
            continue
        config[r.check_id] = one_line(r.observed, CONFIG_VALUE_LIMIT)
    for key, value in fleet_versions(report.get("facts") or {}).items():
        config[f"facts.{key}"] = value
    return config


def run_record(report: dict, results: list, source: str, run_key: Optional[str] = None) -> RunRecord:
    from verify import __version__

    worst = next((s.value for s in (Status.FAIL, Status.ERROR, Status.WARN, Status.PASS)
                  if any(r.status == s for r in results)), Status.SKIP.value)
    started = (report.get("run") or {}).get("started_at") or report.get("generated_at") or ""
    return RunRecord(host=str(report.get("host") or "unknown"), started_at=str(started), source=source,
                     run_key=run_key or secrets.token_hex(8), worst=worst, exit_code=exit_code(results),
                     measurements=measurements_of(results), config=config_of(report, results),
                     tool_version=__version__, counters=counters_by_check(results))


def judge(store: HistoryStore, record: RunRecord, settings: regress.Settings) -> list:
    """Regression and drift rows of one run against the host's past (the run itself not yet recorded)."""
    past = store.past_runs(record.host, max(settings.runs, 1))
    current = {m.check_id: m.value for m in record.measurements if m.value is not None}
    directions = {m.check_id: (m.unit, m.higher_is_better) for m in record.measurements}
    rows = [r.to_result() for r in regress.find_regressions(record.host, current, past, settings, directions)]
    rows += [d.to_result() for d in regress.find_drift(record.host, record.config, past[0] if past else None)]
    return rows


def judge_and_record(store: HistoryStore, report: dict, settings: regress.Settings, source: str = "local") -> list:
    """The history rows for this node report, after appending the run (one transaction).

    A history that cannot be written costs the history only: the run's own results stand, and an
    ERROR row says what happened.
    """
    from verify.interrupt import deferred
    from verify.report import results_of

    results = results_of(report)
    record = run_record(report, results, source)
    try:
        rows = judge(store, record, settings)
        with deferred():  # a Ctrl-C now would only roll the append back: let it finish first
            store.record(record)
    except HistoryError as exc:
        return [not_recorded(str(exc))]
    return rows


def not_recorded(message: str) -> CheckResult:
    """The run could not be judged against or added to the history: a WARN, because the node's own
    verdict (and so the exit code) is what its checks found, not whether a file could be written."""
    return CheckResult("history.record", regress.ROLE, Status.WARN, reason=f"{message}; this run is not recorded",
                       remediation="check the history file and its directory (--history, --no-history)")


def damaged_rows(warnings: list) -> list:
    """One WARN for every damaged row the store skipped while this run read it (none when it was clean)."""
    if not warnings:
        return []
    shown = "; ".join(warnings[:3]) + (f"; and {len(warnings) - 3} more" if len(warnings) > 3 else "")
    return [CheckResult("history.damaged", regress.ROLE, Status.WARN, observed=len(warnings),
                        reason=f"{len(warnings)} damaged history row(s) skipped: {shown}",
                        remediation="the regression and drift verdicts ignore those rows; move the history file "
                                    "away to start a clean one", details={"skipped": warnings})]


def add_results(report: dict, rows: list) -> None:
    """Append rows to a node report and recount its summary, so every format agrees."""
    if not rows:
        return
    from verify.report import results_of

    report["results"].extend(r.to_dict() for r in rows)
    results = results_of(report)
    report["summary"] = {"counts": counts(results), "exit_code": exit_code(results), "total": len(results)}


def fleet_pass(store: HistoryStore, settings: regress.Settings, run_key: Optional[str] = None) -> tuple:
    """(regressions, drift) of every host's latest run (or its run of run_key) against its own past."""
    directions = store.checks()
    regressions, drift = [], []
    for host, runs in sorted(store.latest_runs(settings.runs + 1, run_key).items()):
        current, past = runs[0], runs[1:]
        regressions += regress.find_regressions(host, current.values, past, settings, directions)
        drift += regress.find_drift(host, current.config or {}, past[0] if past else None)
    return regressions, drift
