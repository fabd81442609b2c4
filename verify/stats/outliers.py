"""Hosts that are worse than the rest of the fleet, by a robust measure, and versions off the majority.

A fleet's healthy nodes agree with each other far better than any datasheet threshold, so a node at
70 % of the fleet median busbw is suspect even when it clears the profile's absolute floor. The median
and the median absolute deviation (MAD) are used because one bad node must not drag the yardstick:
modified z = 0.6745 (x - median) / MAD (Iglewicz and Hoaglin, 1993), flagged beyond 3.5.
"""
from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Optional

from verify.bounded_load import finite_number

MODIFIED_Z_LIMIT = 3.5
# Results of these roles carry a measurement; config checks are judged against the desired
# state instead, never against the fleet.
MEASUREMENT_ROLES = frozenset({"bench", "fleet"})
# Below this relative gap a node is never called an outlier: benchmark noise on a uniform fleet
# drives MAD to ~0, and a 1 % wobble must not be flagged.
MIN_RELATIVE_GAP = 0.05
MIN_FLEET_SIZE = 3
# A host's figure this many times the figure's run-to-run noise below the fleet median is no wobble.
NOISE_MULTIPLE = 3.0
# 1.2533 = sqrt(pi/2): mean absolute deviation scaled to match MAD for normal data, used when
# more than half the fleet reports the identical value (MAD = 0).
MEAN_AD_SCALE = 1.2533
# Facts whose differing values across a fleet matter: driver/CUDA/NCCL/firmware versions and the
# kernel. Names of NIC drivers and the versions of verify's own helper tools do not.
VERSION_KEY = re.compile(r"(^|\.)kernel$|driver_version|cuda|nccl|firmware|fw_ver|vbios", re.IGNORECASE)


@dataclass
class Outlier:
    metric: str
    host: str
    value: float
    fleet_median: float
    modified_z: float
    unit: str = ""

    @property
    def relative(self) -> float:
        return self.value / self.fleet_median if self.fleet_median else 0.0

    def reason(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return (
            f"{self.metric} {self.value:g}{unit} is {self.relative:.0%} of the fleet median "
            f"{self.fleet_median:g}{unit} (modified z {self.modified_z:.1f})"
        )

    def to_dict(self) -> dict:
        return {
            "metric": self.metric, "host": self.host, "value": self.value, "unit": self.unit,
            "fleet_median": self.fleet_median, "modified_z": round(self.modified_z, 2),
            "reason": self.reason(),
        }


@dataclass
class VersionDrift:
    key: str
    majority: str
    majority_hosts: int
    host: str
    value: str

    def reason(self) -> str:
        return f"{self.key} is {self.value!r}; {self.majority_hosts} hosts have {self.majority!r}"

    def to_dict(self) -> dict:
        return {"key": self.key, "host": self.host, "value": self.value, "majority": self.majority,
                "majority_hosts": self.majority_hosts, "reason": self.reason()}


def median(values: list) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def modified_z_scores(values: dict) -> dict:
    """host -> modified z score; empty when the fleet is too small or every value is equal."""
    if len(values) < MIN_FLEET_SIZE:
        return {}
    centre = median(list(values.values()))
    deviations = [abs(v - centre) for v in values.values()]
    mad = median(deviations)
    if mad > 0:
        return {host: 0.6745 * (value - centre) / mad for host, value in values.items()}
    mean_ad = sum(deviations) / len(deviations)
    if mean_ad == 0:
        return {}
    return {host: (value - centre) / (MEAN_AD_SCALE * mean_ad) for host, value in values.items()}


def find_outliers(metric: str, values: dict, higher_is_better: bool = True, unit: str = "") -> list:
    """The hosts whose value is worse than the fleet by more than the limit, worst first."""
    scores = modified_z_scores(values)
    if not scores:
        return []
    centre = median(list(values.values()))
    found = []
    for host, score in scores.items():
        worse = score < -MODIFIED_Z_LIMIT if higher_is_better else score > MODIFIED_Z_LIMIT
        gap = abs(values[host] - centre) / abs(centre) if centre else float("inf")
        if worse and gap >= MIN_RELATIVE_GAP:
            found.append(Outlier(metric, host, float(values[host]), centre, score, unit))
    return sorted(found, key=lambda o: (-abs(o.modified_z), o.host))


def metric_values(nodes: Iterable) -> dict:
    """metric name -> (host -> value, higher_is_better, unit) from every numeric benchmark result."""
    table: dict = {}
    for node in nodes:
        for result in node.results:
            value = numeric_observation(result)
            if value is None:
                continue
            entry = table.setdefault(result.check_id, ({}, _higher_is_better(result), _unit(result)))
            entry[0][node.host] = value
    return table


def numeric_observation(result) -> Optional[float]:
    """The measured number of a benchmark result, or None for config checks and non-numbers.

    Config checks are judged against the desired state, not against the fleet, so only results
    that carry a measurement (a benchmark or cross-node test) take part.
    """
    if not _is_measurement(result):
        return None
    value = result.details.get("value", result.observed)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer too big for a float: not a measurement to compare
        return None
    return number if math.isfinite(number) else None  # NaN/inf in a saved report: not comparable


def readings(result) -> list:
    """This host's repeated readings of one figure, as finite floats: each try of a benchmark that was
    retried (details.tries[].observed, the figure itself) or, for a figure in GB/s (or of no stated unit),
    each run of an engine that repeats its measurement (details.runs[].gbps). Fewer than two: measured once."""
    details = result.details if isinstance(result.details, dict) else {}
    tries = [finite_number(t.get("observed")) for t in _dicts(details.get("tries"))]
    if len(tries) >= 2 and None not in tries:
        return tries
    if _unit(result).lower() in ("", "gb/s", "gbps"):  # the storage engines give no unit: theirs is GB/s
        runs = [finite_number(r.get("gbps")) for r in _dicts(details.get("runs"))]
        if len(runs) >= 2 and None not in runs:
            return runs
    return []


def relative_noise(values: list) -> Optional[float]:
    """Run-to-run noise of repeated readings: (max - min) / median; None under two readings."""
    if len(values) < 2:
        return None
    centre = median(values)
    return (max(values) - min(values)) / centre if centre > 0 else None


def metric_noise(per_host: dict) -> Optional[float]:
    """A figure's run-to-run noise on this fleet: the median over the hosts that measured it more than
    once of each one's relative noise; None when no host did (one reading each says nothing of noise)."""
    noises = [n for n in (relative_noise(v) for v in per_host.values()) if n is not None]
    return median(noises) if noises else None


def confirm_low(outlier: Outlier, own: list, noise: Optional[float], fail_ratio: float) -> tuple:
    """(confirmed, why) for an outlier below the fail ratio of the fleet median: a FAIL takes a
    re-measurement on the host that stays below it, or a gap beyond NOISE_MULTIPLE times the figure's
    measured run-to-run noise; one unconfirmed reading is a WARN."""
    unit = f" {outlier.unit}" if outlier.unit else ""
    if len(own) >= 2:
        best = max(own)
        if outlier.fleet_median and best / outlier.fleet_median < fail_ratio:
            return True, f"confirmed: {len(own)} readings on this host, the best {best:g}{unit}"
        return False, f"not confirmed: a re-measurement on this host reached {best:g}{unit}"
    gap = 1 - outlier.relative
    if noise is not None and gap > NOISE_MULTIPLE * noise:
        return True, (f"confirmed: {gap:.0%} below the median, beyond {NOISE_MULTIPLE:g}x the figure's "
                      f"run-to-run noise of {noise:.1%}")
    if noise is not None:
        return False, (f"not confirmed: {gap:.0%} below the median is within {NOISE_MULTIPLE:g}x the figure's "
                       f"run-to-run noise of {noise:.1%}")
    return False, "not confirmed: one reading and no measured run-to-run noise; re-run the benchmark on this host"


def _dicts(value) -> list:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def fleet_outliers(metrics: dict) -> list:
    """Outliers of every metric of a metric_values() table."""
    found = []
    for metric, (values, higher_is_better, unit) in sorted(metrics.items()):
        found.extend(find_outliers(metric, values, higher_is_better, unit))
    return found


def versions_of(facts: dict) -> dict:
    """Flattened version facts: 'gpus[].driver_version' -> 'a,b' (per-device values joined)."""
    flat: dict = {}
    if isinstance(facts, (dict, list)):
        _flatten(facts, "", flat)
    return {key: ",".join(values) for key, values in flat.items()}


def version_drift(nodes: list) -> list:
    per_key: dict = {}
    for node in nodes:
        for key, value in node.versions.items():
            per_key.setdefault(key, {})[node.host] = value
    drift = []
    for key in sorted(per_key):
        by_host = per_key[key]
        tally = Counter(by_host.values())
        if len(tally) < 2:
            continue
        (majority, majority_count), (_, runner_up) = tally.most_common(2)
        if majority_count == runner_up:
            # No majority: every host is listed so the person sees the split.
            majority = "(no majority)"
        for host, value in sorted(by_host.items()):
            if value != majority:
                drift.append(VersionDrift(key, majority, majority_count, host, value))
    return drift


def _flatten(value, prefix: str, out: dict) -> None:
    """Version-like leaves of a facts tree into out (path -> [values]); lists collapse to '[]'."""
    items = value.items() if isinstance(value, dict) else (("[]", inner) for inner in value)
    for key, inner in items:
        path = f"{prefix}{key}" if key == "[]" else (f"{prefix}.{key}" if prefix else str(key))
        if isinstance(inner, (dict, list)):
            _flatten(inner, path, out)
        elif inner is not None and not isinstance(inner, bool) and _is_version_key(path):
            out.setdefault(path, []).append(str(inner))


@functools.lru_cache(maxsize=4096)
def _is_version_key(path: str) -> bool:
    # Fleets repeat the same few hundred fact paths on every host: match each path once.
    return VERSION_KEY.search(path) is not None


def _is_measurement(result) -> bool:
    if "value" in result.details or "busbw_gbps" in result.details:
        return True
    return result.role in MEASUREMENT_ROLES


def _higher_is_better(result) -> bool:
    explicit = result.details.get("higher_is_better")
    if isinstance(explicit, bool):
        return explicit
    unit = _unit(result).lower()
    return not (unit in ("s", "ms", "us", "usec", "ns") or "lat" in result.check_id)


def _unit(result) -> str:
    unit = result.details.get("unit", "")
    return unit if isinstance(unit, str) else ""
