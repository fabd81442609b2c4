"""A node judged against its own past: pure functions from figures and past runs to verdicts.

A node that clears its floor today but ran 15 % faster last week is the slow node operators hunt
for, and only its own history shows it. The yardstick is the median of the node's last N runs
(one bad run must not move it), and a figure worse than it by more than the limit is a WARN
naming both figures. A configuration value that changed since the previous run is drift, shown
with both values: the usual explanation of a regression.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from verify.result import CheckResult, Status
from verify.stats.outliers import MEASUREMENT_ROLES, median, numeric_observation

DEFAULT_PERCENT = 10.0
DEFAULT_RUNS = 5
# Fewer past runs than this make no baseline: the median of one or two runs is one run's noise.
MIN_BASELINE_RUNS = 3
ROLE = "history"
JUDGED = frozenset({Status.PASS.value, Status.WARN.value, Status.FAIL.value})  # real figures; ERROR is broken
# Units of the figures benchmarks report without naming one, for the sentence a person reads.
UNIT_BY_PREFIX = (("bench.nccl", "GB/s"), ("bench.h2d.", "GB/s"), ("bench.d2h.", "GB/s"), ("bench.storage", "GB/s"))


@dataclass
class Settings:
    percent: float = DEFAULT_PERCENT  # a figure worse than the baseline by more than this is a regression
    runs: int = DEFAULT_RUNS  # the baseline is the median of this many past runs

    def validate(self) -> None:
        if not (isinstance(self.percent, (int, float)) and math.isfinite(self.percent) and 0 < self.percent < 100):
            raise ValueError(f"--regression-percent {self.percent}: must be a number above 0 and below 100")
        if not isinstance(self.runs, int) or self.runs < 1:
            raise ValueError(f"--regression-runs {self.runs}: must be a whole number of runs, 1 or more")

    @property
    def min_runs(self) -> int:
        return min(MIN_BASELINE_RUNS, self.runs)


@dataclass
class Regression:
    host: str
    check_id: str
    value: float
    baseline: float  # median of the past runs
    runs: int  # how many past runs the median is over
    limit_percent: float
    unit: str = ""
    higher_is_better: bool = True

    @property
    def change_percent(self) -> float:
        return abs(self.value - self.baseline) / abs(self.baseline) * 100 if self.baseline else float("inf")

    def reason(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        worse = "lower" if self.higher_is_better else "higher"
        return (f"{self.check_id} {self.value:g}{unit}, was {self.baseline:g}{unit} over the last {self.runs} runs "
                f"({self.change_percent:.0f}% {worse}; more than {self.limit_percent:g}% is a regression)")

    def to_dict(self) -> dict:
        return {"host": self.host, "check_id": self.check_id, "value": self.value, "baseline_median": self.baseline,
                "runs": self.runs, "change_percent": round(self.change_percent, 1),
                "limit_percent": self.limit_percent, "unit": self.unit, "reason": self.reason()}

    def to_result(self) -> CheckResult:
        return CheckResult(
            check_id=f"history.regression.{self.check_id}", role=ROLE, status=Status.WARN,
            expected=f"within {self.limit_percent:g}% of {self.baseline:g} (median of the last {self.runs} runs)",
            observed=self.value, reason=self.reason(),
            remediation="compare this run's configuration drift and the node's load with its last good run; "
                        "re-run the benchmark on an idle node",
            details=self.to_dict())


@dataclass
class Drift:
    host: str
    key: str
    before: str
    after: str
    since: str  # when the previous run started

    def reason(self) -> str:
        return f"{self.key} changed since the last run ({self.since}): was {self.before!r}, now {self.after!r}"

    def to_dict(self) -> dict:
        return {"host": self.host, "key": self.key, "before": self.before, "after": self.after,
                "previous_run": self.since, "reason": self.reason()}

    def to_result(self) -> CheckResult:
        return CheckResult(check_id=f"history.drift.{self.key}", role=ROLE, status=Status.WARN, expected=self.before,
                           observed=self.after, reason=self.reason(),
                           remediation="if the change was not intended, re-apply the tuning (playbooks/site.yml)",
                           details=self.to_dict())


def unit_of(result: CheckResult) -> str:
    unit = result.details.get("unit")
    if isinstance(unit, str) and unit:
        return unit
    return next((u for prefix, u in UNIT_BY_PREFIX if result.check_id.startswith(prefix)), "")


def higher_is_better(result: CheckResult) -> bool:
    """The fleet's rule (verify.stats.outliers), so the fleet and the history agree on direction."""
    from verify.stats.outliers import _higher_is_better

    return _higher_is_better(result)


def figure(result: CheckResult) -> Optional[float]:
    """The result's figure when it is a real measurement (not ERROR, finite), else None."""
    if result.status.value not in JUDGED:
        return None
    value = numeric_observation(result)
    return value if value is not None and math.isfinite(value) else None


def is_measurement(result: CheckResult) -> bool:
    return result.role in MEASUREMENT_ROLES or numeric_observation(result) is not None


def find_regressions(host: str, current: dict, past: list, settings: Settings, directions: dict) -> list:
    """current: check_id -> figure of this run; past: PastRun newest first (this run excluded);
    directions: check_id -> (unit, higher_is_better). Regressions worst first."""
    found = []
    window = past[: settings.runs]
    for check_id, value in sorted(current.items()):
        history = [run.values[check_id] for run in window if check_id in run.values]
        if len(history) < settings.min_runs:
            continue
        baseline = median(history)
        unit, better_high = directions.get(check_id, ("", True))
        limit = settings.percent / 100.0
        worse = value < baseline * (1 - limit) if better_high else value > baseline * (1 + limit)
        if worse and baseline > 0:
            found.append(Regression(host, check_id, value, baseline, len(history), settings.percent, unit, better_high))
    return sorted(found, key=lambda r: (-r.change_percent, r.check_id))


def find_drift(host: str, current: dict, previous) -> list:
    """Config values present in both this run and the previous one (a PastRun) that differ."""
    if previous is None or not previous.config:
        return []
    before = previous.config
    return [Drift(host, key, str(before[key]), str(current[key]), previous.started_at)
            for key in sorted(current) if key in before and before[key] != current[key]]
