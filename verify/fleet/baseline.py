"""The fleet baseline: per hardware profile, the median and spread of every benchmark figure, and each
node judged against it (`tunefleet baseline DIR`, then `tunefleet report DIR --baseline FILE`).

Why a baseline beside the outliers: outliers compare a run's nodes with each other, so a run of eight
nodes where three are slow has no yardstick, and a node is never compared with what the same hardware
did last month. The baseline is built once from a good run (and each host's recorded history), kept as
a file, and every later run is judged against it by the operator's rules (verify.fleet.baseline_rules).

Each host counts once per figure (the median of its report and its last runs in the history), so a
host with a long history does not outweigh the others; the fleet figure is the median over hosts, with
the MAD and p10/p90 as its spread. Only measured figures that are finite and not ERROR/SKIP count.
"""
from __future__ import annotations

import datetime as dt
import fnmatch
import json
import math
from dataclasses import dataclass
from typing import Any, Optional

from verify import __version__
from verify.bounded_load import BoundedLoadError, finite_number, load_json_bounded
from verify.fleet.baseline_rules import DEFAULT_RULES, Rule
from verify.result import CheckResult, Status
from verify.stats.outliers import _higher_is_better, _unit, median, numeric_observation

SCHEMA = "tunefleet.fleet_baseline/v1"
HISTORY_RUNS = 10  # each host's last runs from the history that join its report's figure
NOT_FIGURES = frozenset({Status.ERROR, Status.SKIP})  # a broken or absent measurement is no yardstick
FIGURE_KEYS = frozenset({"threshold", "value", "busbw_gbps"})  # verify.bench.common.judged sets threshold
MAX_BASELINE_BYTES = 64 << 20


class BaselineError(ValueError):
    """The baseline file cannot be used; the message names the file and the key."""


def hardware_of(report: dict, facts: dict) -> str:
    """The hardware profile a node report belongs to: the profile it was judged with, else its GPUs
    as the facts list them ('2x NVIDIA H200'), else 'unknown'."""
    profile = report.get("profile")
    if isinstance(profile, str) and profile:
        return profile
    gpus = facts.get("gpus") if isinstance(facts, dict) else None
    listed = gpus.get("gpus") if isinstance(gpus, dict) else None
    if isinstance(listed, list) and listed:
        names = sorted({str(g.get("name")) for g in listed if isinstance(g, dict) and g.get("name")})
        if names:
            return f"{len(listed)}x {'+'.join(names)}"
    return "unknown"


def figures(node) -> dict:
    """check_id -> (value, higher_is_better, unit) of a NodeReport's measured, usable figures: results
    judged as a figure (a threshold) or naming their value; a benchmark's summary row (its wall time) is none."""
    out = {}
    for result in node.results:
        if result.status in NOT_FIGURES or not FIGURE_KEYS.intersection(result.details):
            continue
        value = numeric_observation(result)
        if value is not None:
            out[result.check_id] = (value, _higher_is_better(result), _unit(result))
    return out


# ---- building -------------------------------------------------------------------------------------

def build(nodes: list, history: Optional[dict] = None, sources: Optional[dict] = None,
          runs: int = HISTORY_RUNS) -> dict:
    """The baseline document from a fleet run's NodeReports and, where given, the history's last runs
    per host (HistoryStore.latest_runs: host -> [PastRun]). The history adds figures of the metrics the
    run measured (on any host): it also holds wall times and other numbers that are no figure."""
    history = history or {}
    per_node = {node.host: figures(node) for node in nodes}
    meta = {check_id: (hib, unit) for figs in per_node.values() for check_id, (_, hib, unit) in figs.items()}
    per_profile: dict = {}
    for node in nodes:
        own: dict = {check_id: [value] for check_id, (value, _, _) in per_node[node.host].items()}
        for past in history.get(node.host, [])[:runs]:
            for check_id, value in past.values.items():
                if check_id in meta and isinstance(value, (int, float)) and math.isfinite(value):
                    own.setdefault(check_id, []).append(float(value))
        profile = per_profile.setdefault(getattr(node, "hardware", "") or "unknown", {"hosts": 0, "metrics": {}})
        profile["hosts"] += 1
        for check_id, values in own.items():
            entry = profile["metrics"].setdefault(check_id, {"values": [], "meta": meta[check_id]})
            entry["values"].append(median(values))
    return {
        "schema": SCHEMA,
        "generated_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tool_version": __version__,
        "sources": dict(sources or {}, history_runs_per_host=runs if history else 0),
        "profiles": {name: {"hosts": p["hosts"], "metrics": {m: _stats(e["values"], *e["meta"])
                                                             for m, e in sorted(p["metrics"].items())}}
                     for name, p in sorted(per_profile.items())},
    }


def _stats(values: list, higher_is_better: bool, unit: str) -> dict:
    centre = median(values)
    figures_ = {"median": centre, "mad": median([abs(v - centre) for v in values]), "p10": percentile(values, 10),
                "p90": percentile(values, 90), "min": min(values), "max": max(values)}
    return dict({k: round(v, 4) for k, v in figures_.items()}, hosts=len(values), unit=unit,
                higher_is_better=higher_is_better)


def percentile(values: list, pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), without numpy."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def to_text(document: dict) -> str:
    return json.dumps(document, indent=1, sort_keys=False) + "\n"


# ---- loading --------------------------------------------------------------------------------------

def load(path: str) -> dict:
    """A baseline file, checked whole (schema, every figure finite and not negative); BaselineError otherwise."""
    try:
        data = load_json_bounded(path, max_bytes=MAX_BASELINE_BYTES, what="baseline")
    except BoundedLoadError as exc:
        raise BaselineError(str(exc)) from None
    return validate(data, f"baseline {path}")


def validate(data: Any, origin: str) -> dict:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise BaselineError(f"{origin}: schema must be {SCHEMA!r}, got {found!r} (build one with `tunefleet baseline`)")
    profiles = data.get("profiles")
    if not isinstance(profiles, dict):
        raise BaselineError(f"{origin}: 'profiles' must map each hardware profile to its metrics")
    for name, profile in profiles.items():
        metrics = profile.get("metrics") if isinstance(profile, dict) else None
        if not isinstance(metrics, dict):
            raise BaselineError(f"{origin}: profiles.{name}.metrics must be a mapping")
        for metric, entry in metrics.items():
            where = f"{origin}: profiles.{name}.metrics.{metric}"
            if not isinstance(entry, dict):
                raise BaselineError(f"{where} must be a mapping")
            for key in ("median", "mad", "p10", "p90", "min", "max", "hosts"):
                value = entry.get(key)
                if value is None and key not in ("median", "mad"):
                    continue  # written by every tunefleet baseline, but only the median is needed to judge
                if finite_number(value) is None or value < 0:  # finite_number: a 400-digit integer too
                    raise BaselineError(f"{where}.{key}: {repr(value)[:40]} is not a finite, non-negative number")
            if not isinstance(entry.get("unit", ""), str):
                raise BaselineError(f"{where}.unit must be text")
            if not isinstance(entry.get("higher_is_better", True), bool):
                raise BaselineError(f"{where}.higher_is_better must be true or false")
    return data


# ---- judging --------------------------------------------------------------------------------------

@dataclass
class Finding:
    host: str
    metric: str
    value: float
    unit: str
    status: str  # FAIL or WARN
    rule: Rule
    profile: str
    baseline: Optional[float]  # the profile's median (below_baseline_pct) or None
    reference: Optional[float]  # what the value was compared with: limit, floor or the node's best peer
    detail: str

    def reason(self) -> str:
        return f"{self.metric} {self.value:g}{_u(self.unit)} {self.detail} ({self.rule.describe()})"

    def to_dict(self) -> dict:
        return {"host": self.host, "metric": self.metric, "value": self.value, "unit": self.unit,
                "status": self.status, "profile": self.profile, "baseline": self.baseline,
                "reference": self.reference, "rule": self.rule.to_dict(), "reason": self.reason()}


def _u(unit: str) -> str:
    return f" {unit}" if unit else ""


def judge(nodes: list, baseline: Optional[dict], rules: tuple = DEFAULT_RULES) -> list:
    """Findings, worst first: per host and metric the most severe one any rule gives."""
    profiles = (baseline or {}).get("profiles", {})
    found: dict = {}
    for node in nodes:
        profile = getattr(node, "hardware", "") or "unknown"
        base = (profiles.get(profile) or {}).get("metrics", {})
        values = figures(node)
        for rule in rules:
            matched = {m: v for m, v in values.items() if fnmatch.fnmatchcase(m, rule.match)}
            if rule.kind == "spread_pct":
                judged = _spread(matched, rule)
            else:
                judged = [row for row in (_one(m, v, rule, base.get(m)) for m, v in matched.items()) if row]
            for metric, value, unit, ref, centre, detail in judged:
                finding = Finding(node.host, metric, value, unit, rule.severity, rule, profile, centre, ref, detail)
                key = (node.host, metric)
                if key not in found or (found[key].status, rule.severity) == ("WARN", "FAIL"):
                    found[key] = finding
    return sorted(found.values(), key=lambda f: (f.status != "FAIL", f.host, f.metric))


def _one(metric: str, figure: tuple, rule: Rule, base: Optional[dict]):
    value, hib, unit = figure
    if rule.kind == "floor":
        return (metric, value, unit, rule.limit, None, f"is below the floor {rule.limit:g}{_u(unit)}") \
            if value < rule.limit else None
    if rule.kind == "ceiling":
        return (metric, value, unit, rule.limit, None, f"is above the ceiling {rule.limit:g}{_u(unit)}") \
            if value > rule.limit else None
    if not base or not base.get("median"):
        return None  # no baseline for this profile and metric: nothing to compare with
    centre = float(base["median"])
    hib = base.get("higher_is_better", hib)
    change = (centre - value) / centre * 100 if hib else (value - centre) / centre * 100
    if change <= rule.limit:
        return None
    limit = centre * (1 - rule.limit / 100) if hib else centre * (1 + rule.limit / 100)
    spread = f"p10 {base['p10']:g}, " if hib and "p10" in base else (f"p90 {base['p90']:g}, " if "p90" in base else "")
    return (metric, value, unit, limit, centre,
            f"is {change:.0f}% {'below' if hib else 'above'} the baseline median {centre:g}{_u(unit)} "
            f"({spread}{base.get('hosts', '?')} hosts)")


def _spread(matched: dict, rule: Rule) -> list:
    """Within one node: per family (bench.gpu_matmul of bench.gpu_matmul.gpu3) the worst GPU or pair
    against the best one."""
    families: dict = {}
    for metric, figure in matched.items():
        families.setdefault(metric.rsplit(".", 1)[0], {})[metric] = figure
    out = []
    for family in families.values():
        if len(family) < 2:
            continue
        hib = next(iter(family.values()))[1]
        order = sorted(family, key=lambda m: (family[m][0], m))
        worst, best = (order[0], order[-1]) if hib else (order[-1], order[0])
        low, high = family[order[0]][0], family[order[-1]][0]
        ratio = high / low if low > 0 else math.inf
        if (ratio - 1) * 100 > rule.limit:
            value, _, unit = family[worst]
            best_value = family[best][0]
            out.append((worst, value, unit, best_value, None,
                        f"vs {best_value:g}{_u(unit)} on {best.rsplit('.', 1)[-1]} of the same node "
                        f"(max/min {ratio:.2f})"))
    return out


def as_results(findings: list) -> dict:
    """host -> CheckResults `fleet.baseline.<metric>`, so the matrix, JUnit and the exit code carry them."""
    out: dict = {}
    for f in findings:
        expected = (f"at most {f.rule.limit:g}% from the baseline {f.baseline:g}" if f.baseline is not None
                    else f.rule.describe())
        out.setdefault(f.host, []).append(CheckResult(
            check_id=f"fleet.baseline.{f.metric}", role="fleet", status=Status(f.status),
            expected=expected, observed=f.value, reason=f.reason(),
            remediation="compare this host's tuning, clocks and hardware with a host at the baseline; re-run it",
            details=f.to_dict(),
        ))
    return out


def from_args(args) -> Optional[tuple]:
    """(baseline, rules) named by --baseline/--rules, loaded and checked before anything is written;
    None without --baseline. BaselineError/RulesError (ValueErrors) name the file and the key."""
    from verify.fleet.baseline_rules import load_rules

    path, rules_path = getattr(args, "baseline", None), getattr(args, "rules", None)
    if rules_path and not path:
        raise BaselineError("--rules needs --baseline FILE (build one with `tunefleet baseline DIR`)")
    if not path:
        return None
    return load(path), (load_rules(rules_path) if rules_path else DEFAULT_RULES)
