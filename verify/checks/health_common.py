"""What the hardware health checks share: gates, the expected hardware from the profile, thresholds,
PCI address forms and the remediations a fleet operator acts on.

Health is judged whatever the roles' switches say (a tuned node can still be bad hardware), so
these checks never SKIP on `<role>_enabled: false`; they SKIP when there is nothing to read.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

from verify.facts.gpu_query import query_gpus
from verify.judging.thresholds import Threshold
from verify.node import Node
from verify.profiles import ProfileError, load_profile, pick_profile, resolve_threshold
from verify.result import Status

ROLE = "health"
# node.memo keys of the previous reading, set only through remember_previous (the history's run, or the
# scheduler state's): the last run's counters per check id (verify.history.record.counters_of keeps them)
# and when they were read (Unix time). With both the checks judge the increase as a rate per minute.
PREVIOUS_COUNTERS = "previous_counters"
PREVIOUS_COUNTERS_AT = "previous_counters_at"
# node.memo key: when this run reads its counters (Unix time), set by the run that keeps them for the next
# one, so the interval judged now is measured on the same clock as the one saved; absent: the clock now.
COUNTERS_AT = "counters_at"
# A rate over less than a minute is judged as over one minute: one error a few seconds after the last
# check (two runs by hand) is not "dozens a minute".
MIN_RATE_WINDOW_MIN = 1.0
# What the operator does next, from least to most disruptive.
RESET_GPU = "drain the GPU's jobs and reset it (nvidia-smi -r -i {index}); if it recurs, drain the node and RMA the GPU"
DRAIN_RMA = "drain the node and open an RMA for the GPU (hardware fault)"
REBOOT = "drain the node and reboot it (the fix is applied at the next driver load); RMA if it recurs"
RESEAT = "drain the node, reseat the card / riser / cable of {what}, check the slot in the BIOS; RMA if it stays"
CHECK_COOLING = "check the GPU's cooling and power feed (fans, airflow, PSU, BMC power brake events)"


def profile(spec: dict, node: Node) -> Optional[dict]:
    """The hardware profile the desired state names (`verify_profile`), `auto` resolved from the
    node's GPUs; None when none is named or none matches. Memoised for the run."""
    if "health_profile" in node.memo:
        return node.memo["health_profile"]
    name = (spec.get("verify") or {}).get("profile")
    chosen = None
    try:
        if name == "auto":
            chosen = pick_profile({"gpus": query_gpus(node).to_dict()})
        elif name:
            chosen = load_profile(str(name))
    except ProfileError:
        chosen = None  # the CLI refuses a bad --profile before checks run; here it is just absent
    node.memo["health_profile"] = chosen
    return chosen


def threshold(key: str, spec: dict, node: Node, derived: Optional[Threshold]) -> Optional[Threshold]:
    return resolve_threshold(key, profile(spec, node), spec, derived)


def remember_previous(node: Node, counters: dict, read_at: Optional[float], now: Optional[float] = None) -> None:
    """Put the previous reading where the checks look for it: counters {check id: counters}, read_at the Unix
    time they were read (None: unknown, so the increase is judged as a count), now this run's reading time."""
    if counters:
        node.memo[PREVIOUS_COUNTERS] = counters
        if _is_time(read_at):
            node.memo[PREVIOUS_COUNTERS_AT] = float(read_at)
    if _is_time(now):
        node.memo[COUNTERS_AT] = float(now)


def _is_time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def interval_min(node: Node) -> Optional[float]:
    """Minutes since the previous reading, or None: none known, or a clock that went backwards."""
    before = node.memo.get(PREVIOUS_COUNTERS_AT)
    if not _is_time(before):
        return None
    now = node.memo.get(COUNTERS_AT)
    span_s = (float(now) if _is_time(now) else time.time()) - float(before)
    return span_s / 60.0 if span_s >= 0 else None


def _figure(value: float) -> str:
    return f"{value:.1f}" if value >= 0.1 or value == 0 else f"{value:.2g}"


@dataclass
class CounterVerdict:
    """One error counter judged: as a rate over the interval since the previous reading, else as a count."""

    counter: str  # the name as the check prints it ("symbol_error", "link 4 CRC Errors")
    since_load: int
    increase: Optional[int]  # since the previous reading; None: none known, or the counter was reset
    per_min: Optional[float]  # the increase per minute; None: no interval known
    status: Status
    text: str


def judge_counter(counter: str, count: int, before: object, minutes: Optional[float], per_min: Threshold,
                  total: Threshold) -> CounterVerdict:
    """A counter with the previous reading (before) and the minutes since it: the increase per minute against
    per_min ("symbol_error 12 in 3.0 min = 4.0/min (130 since driver load)"); without an interval the increase
    against total; without a previous reading (or after a reset: the count went down) the count since driver
    load against total."""
    known = isinstance(before, int) and not isinstance(before, bool) and 0 <= before <= count
    if not known:
        status, _ = total.judge(count)
        return CounterVerdict(counter, count, None, None, status, f"{counter} {count} since driver load")
    increase = count - before
    if minutes is None:
        status, _ = total.judge(increase)
        return CounterVerdict(counter, count, increase, None, status,
                              f"{counter} {increase} since the last run ({count} since driver load)")
    rate = increase / max(minutes, MIN_RATE_WINDOW_MIN)
    status, _ = per_min.judge(rate)
    short = minutes < MIN_RATE_WINDOW_MIN
    span = f"{minutes * 60:.0f} s" if short else f"{_figure(minutes)} min"
    window = f" (judged over {MIN_RATE_WINDOW_MIN:g} min)" if short else ""
    return CounterVerdict(counter, count, increase, rate, status,
                          f"{counter} {increase} in {span} = {_figure(rate)}/min{window} "
                          f"({count} since driver load)")
