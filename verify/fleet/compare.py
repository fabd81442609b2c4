"""`tunefleet compare A B`: did the fleet get slower between two runs, by how much, on which nodes, and what
changed on them (issue 51).

A side is a fleet run directory (node reports, as `tunefleet report` reads them) or a window of the history
store (verify.history.window: `FROM..TO` or a run key). For every figure the two sides share (each benchmark
row: per GPU, per pair, per rail, as the node reports name them), grouped by hardware profile so H100s are
never compared with H200s, the fleet's shift with its interval and test (verify.stats.compare: Hodges-Lehmann,
Moses' interval, Mann-Whitney U), significance after Holm's correction over every figure; per node, which
moved beyond their noise and what differs on them (versions, profile, tuned values); one fleet health figure
for each side (FAIL_COST below). docs/compare.md states every formula; the document's schema is
verify/schema/fleet_compare.v1.json.

Each host is one sample per figure (the median of its runs in a window): a host with many runs does not
outweigh the others. Comparing one host's runs (a window of a single host on both sides) takes its runs as
the samples instead, and there is no per-node list (the figure is the node).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from verify import __version__
from verify.judging import verdicts
from verify.result import EXIT_BAD_INPUT, EXIT_COULD_NOT_CHECK, EXIT_FAILED, EXIT_OK
from verify.stats import compare as maths
from verify.stats.outliers import median

SCHEMA = "tunefleet.fleet_compare/v1"
FORMATS = ("json", "md", "html")
OUTPUT_NAMES = {"json": "compare.json", "md": "compare.md", "html": "compare.html"}
DEFAULT_ALPHA = 0.01
# What a FAIL costs in the fleet health figure, by the action class it carries (verdicts.ACTIONS), in units
# of one node-check in good standing: a fix done in place costs as much as the check is worth, a GPU reset a
# little more, a reboot takes the node out of service, an RMA takes it out for days. A policy, stated in
# docs/compare.md, not a measurement; a FAIL that names no class costs 1.
FAIL_COST = {verdicts.OK: 1, verdicts.WATCH: 1, verdicts.APPLICATION: 1, verdicts.FIX_CONFIG: 1,
             verdicts.RESET_GPU: 2, verdicts.REBOOT: 4, verdicts.DRAIN_RMA: 8}
HEALTH_FORMULA = ("health = good / (good + sum of FAIL costs): good = node-checks PASS or WARN, each FAIL costs "
                  "by its action class (ok, watch, application, fix-config 1; reset-gpu 2; reboot 4; drain-rma 8); "
                  "ERROR and SKIP are not judged and are counted beside")
HISTORY_NOISE_RUNS = 10  # a run directory's hosts: their last runs in the history give their own noise
CONFIG_NODES = 100  # moved nodes whose tuned values are read back from their two reports (most moved first)
BINS = 30
PARALLEL_SAMPLES = 40_000  # samples over every figure from which the shifts are computed in parallel
EXAMPLE_HOSTS = 5


@dataclass
class Settings:
    alpha: float = DEFAULT_ALPHA  # family-wise level (Holm), over the figures and apart over the node-figures
    min_shift_percent: float = 0.0  # a significant shift smaller than this is not called a regression
    fail_on_nodes: bool = False  # exit 1 also when a node (not the fleet) got worse beyond its noise

    def validate(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha) and 0 < self.alpha < 0.5):
            raise ValueError(f"--alpha {self.alpha}: must be a number above 0 and below 0.5")
        if not (isinstance(self.min_shift_percent, (int, float)) and math.isfinite(self.min_shift_percent)
                and 0 <= self.min_shift_percent < 100):
            raise ValueError(f"--min-shift {self.min_shift_percent}: must be a percentage from 0 to below 100")


@dataclass
class HostSide:
    """One host on one side: a figure per check (the median of its runs there) and what it ran with."""

    host: str
    hardware: str = ""
    figures: dict = field(default_factory=dict)  # check_id -> value
    readings: dict = field(default_factory=dict)  # check_id -> [values]: its repeated readings (own noise)
    versions: dict = field(default_factory=dict)  # flattened version facts (verify.stats.uniformity)
    config: Optional[dict] = None  # tuned values and facts as the history keeps them; None: not read yet
    source: str = ""  # the node report it came from (a run directory)
    runs: list = field(default_factory=list)  # check_id -> value per run (a window), for per-run samples


@dataclass
class Side:
    label: str
    kind: str  # "run directory" or "history window"
    hosts: dict  # host -> HostSide
    meta: dict  # check_id -> (higher_is_better, unit)
    health: dict
    errors: list = field(default_factory=list)  # what could not be read, one line each (exit 3)
    notes: list = field(default_factory=list)  # how it was read, one line each (no effect on the exit)


# ---- fleet health ---------------------------------------------------------------------------------

class HealthTally:
    def __init__(self) -> None:
        self.good = 0
        self.failed = 0
        self.fail_cost = 0
        self.errors = 0
        self.by_action: dict = {}

    def add(self, status: str, action: Optional[str] = None) -> None:
        if status in ("PASS", "WARN"):
            self.good += 1
        elif status == "FAIL":
            cost = FAIL_COST.get(action or "", 1)
            self.failed += 1
            self.fail_cost += cost
            self.by_action[action or "none"] = self.by_action.get(action or "none", 0) + 1
        elif status == "ERROR":
            self.errors += 1

    def to_dict(self, scope: str) -> dict:
        judged = self.good + self.fail_cost
        return {"value": round(100.0 * self.good / judged, 3) if judged else None, "good": self.good,
                "failed": self.failed, "fail_cost": self.fail_cost,
                "fails_by_action": dict(sorted(self.by_action.items())),
                "errors": self.errors, "scope": scope, "formula": HEALTH_FORMULA}


# ---- reading a side -------------------------------------------------------------------------------

def side_from_directory(directory: str) -> Side:
    """Every node report under a fleet run directory; FileNotFoundError when it is no directory, ValueError
    when it holds no readable node report."""
    from verify.fleet.baseline import figures
    from verify.fleet.model import load_fleet_dir

    nodes, errors = load_fleet_dir(directory)
    if not nodes:
        raise ValueError(f"{directory}: no readable node report")
    hosts: dict = {}
    meta: dict = {}
    tally = HealthTally()
    for node in nodes:
        own = figures(node)
        side = HostSide(node.host, node.hardware or "unknown", {c: v for c, (v, _, _) in own.items()},
                        {}, dict(node.versions), source=node.source)
        hosts[node.host] = side
        for check_id, (_, higher_is_better, unit) in own.items():
            meta.setdefault(check_id, (higher_is_better, unit))
        failed = {r.check_id: verdicts.action_of(r.details) for r in node.results if r.status.value == "FAIL"}
        for check_id, status in node.statuses.items():
            tally.add(status, failed.get(check_id))
    return Side(directory, "run directory", hosts, meta, tally.to_dict("every check of every node report"),
                errors=[e.describe() for e in errors])


def side_from_window(store, window, hosts: Optional[list] = None) -> Side:
    """The history's runs in a window (verify.history.window); ValueError when it holds none."""
    from verify.history.window import runs_in

    runs = runs_in(store, window, hosts)
    if not runs:
        raise ValueError(f"history {store.path}: no run in {window.text!r} ({window.describe()}"
                         + (f", hosts {', '.join(hosts)}" if hosts else "") + ")")
    directions = store.checks()
    meta: dict = {}
    tally = HealthTally()
    sides: dict = {}
    # the store hands one dict per stored configuration set, shared by every run that saw it (a uniform fleet
    # shares one): its versions are taken once per set, and hosts keep the shared dicts (read, never changed)
    versions_of: dict = {}
    for host, host_runs in runs.items():
        readings: dict = {}
        for run in host_runs:
            for check_id, value in run.values.items():
                if math.isfinite(value):  # the store keeps what a run wrote: an infinity is no figure
                    readings.setdefault(check_id, []).append(value)
            for status in run.statuses.values():
                tally.add(status)
        latest = host_runs[-1].config or {}
        if id(latest) not in versions_of:
            versions_of[id(latest)] = (latest, {k[len("facts."):]: v for k, v in latest.items()
                                                if k.startswith("facts.")})
        figures = {c: v[0] if len(v) == 1 else median(v) for c, v in readings.items()}
        side = HostSide(host, "", figures, readings, versions_of[id(latest)][1], latest,
                        runs=[run.values for run in host_runs])
        sides[host] = side
        for check_id in readings:
            unit, higher_is_better = directions.get(check_id, ("", True))
            meta.setdefault(check_id, (higher_is_better, unit))
    damaged = list(store.warnings)
    return Side(window.text, "history window", sides, meta,
                tally.to_dict("every benchmark row of every run in the window (the history keeps no config "
                              "check statuses)"), errors=damaged)


def add_history_noise(side: Side, store, run_key: str, runs: int = HISTORY_NOISE_RUNS) -> Optional[str]:
    """A run directory's hosts' own readings from the history: their last runs up to the run recorded under
    run_key (the directory's name). A note when the history has no such run (noise then from the fleet)."""
    past = store.latest_runs(runs, run_key)
    if not past:
        return f"history {store.path} holds no run of key {run_key!r}: node noise from the fleet's spread"
    for host, host_runs in past.items():
        if host in side.hosts:
            for run in host_runs:
                for check_id, value in run.values.items():
                    side.hosts[host].readings.setdefault(check_id, []).append(value)
    return None


# ---- comparing ------------------------------------------------------------------------------------

def compare(before: Side, after: Side, settings: Settings) -> dict:
    """The comparison document (schema tunefleet.fleet_compare/v1; docs/compare.md)."""
    per_run = len(before.hosts) == 1 and before.hosts.keys() == after.hosts.keys()
    groups_before, groups_after = _samples(before, per_run), _samples(after, per_run)
    keys = sorted(groups_before.keys() & groups_after.keys())
    shifts = _shifts([(list(groups_before[k].values()), list(groups_after[k].values())) for k in keys], settings.alpha)
    figures = []
    for key, result in zip(keys, shifts):
        a, b = groups_before[key], groups_after[key]
        higher_is_better, unit = after.meta.get(key[1]) or before.meta.get(key[1]) or (True, "")
        figures.append(_figure_entry(key, result, higher_is_better, unit, a, b))
    adjusted = maths.holm_adjusted([f["p_value"] for f in figures])
    rejected = maths.holm([f["p_value"] for f in figures], settings.alpha)
    for entry, p_adj, significant in zip(figures, adjusted, rejected):
        entry["p_adjusted"] = p_adj
        entry["significant"] = significant
        entry["direction"] = _direction(entry, significant)
        entry["regression"] = bool(significant and entry["direction"] == "worse"
                                   and abs(entry["shift_percent"] or 0.0) >= settings.min_shift_percent)
    nodes = [] if per_run else _node_moves(before, after, keys, groups_before, groups_after, settings)
    regressions = [f for f in figures if f["regression"]]
    nodes_worse = [n for n in nodes if n["worse"]]
    untested = [f for f in figures if f["p_value"] is None]
    notes = [f"{name}: {line}" for name, side in (("before", before), ("after", after))
             for line in side.errors + side.notes]
    if per_run:
        notes.append(f"one host on both sides ({next(iter(before.hosts))}): its runs are the samples")
    code = EXIT_OK
    if regressions or (settings.fail_on_nodes and nodes_worse):
        code = EXIT_FAILED
    elif not figures or len(untested) == len(figures) or before.errors or after.errors:
        code = EXIT_COULD_NOT_CHECK
    return {
        "schema": SCHEMA,
        "generated_at": _now(),
        "tool_version": __version__,
        "before": _side_entry(before),
        "after": _side_entry(after),
        "method": _method(settings, per_run),
        "hosts": {"both": len(before.hosts.keys() & after.hosts.keys()),
                  "only_before": sorted(before.hosts.keys() - after.hosts.keys()),
                  "only_after": sorted(after.hosts.keys() - before.hosts.keys())},
        "figures": sorted(figures, key=_figure_order),
        "figures_only_before": [_key_name(k) for k in sorted(groups_before.keys() - groups_after.keys())],
        "figures_only_after": [_key_name(k) for k in sorted(groups_after.keys() - groups_before.keys())],
        "nodes": nodes,
        "changes": _fleet_changes(before, after),
        "verdict": {"regression": bool(regressions), "regressed_figures": len(regressions),
                    "significant_figures": sum(1 for f in figures if f["significant"]),
                    "untested_figures": len(untested), "nodes_moved": len(nodes), "nodes_worse": len(nodes_worse),
                    "nodes_apart": sum(1 for n in nodes if n["apart_from_fleet"]),
                    "exit_code": code},
        "notes": notes,
    }


def _shifts(pairs: list, alpha: float, workers: Optional[int] = None) -> list:
    """maths.shift of every (before, after) pair; a large fleet's figures spread over one process per CPU
    (each figure of 10,000 hosts is about 0.13 s of counting in one interpreter: benchmarks/compare_scale.py)."""
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if workers > 1 and len(pairs) > 1 and sum(len(a) + len(b) for a, b in pairs) >= PARALLEL_SAMPLES:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(workers, len(pairs))) as pool:
            return list(pool.map(maths.shift, [a for a, _ in pairs], [b for _, b in pairs], [alpha] * len(pairs)))
    return [maths.shift(a, b, alpha) for a, b in pairs]


def _samples(side: Side, per_run: bool) -> dict:
    """(hardware, check_id) -> {sample name: value}: one per host, or one per run of the single host."""
    groups: dict = {}
    for host in side.hosts.values():
        if per_run:
            for index, values in enumerate(host.runs or [host.figures]):
                for check_id, value in values.items():
                    groups.setdefault((host.hardware, check_id), {})[f"{host.host} run {index + 1}"] = value
            continue
        for check_id, value in host.figures.items():
            groups.setdefault((host.hardware, check_id), {})[host.host] = value
    return groups


def _figure_entry(key: tuple, result: maths.Shift, higher_is_better: bool, unit: str, a: dict, b: dict) -> dict:
    return {
        "figure": key[1], "hardware": key[0], "unit": unit, "higher_is_better": higher_is_better,
        "before": {"samples": result.n_before, "median": _round(result.median_before)},
        "after": {"samples": result.n_after, "median": _round(result.median_after)},
        "shift": _round(result.estimate), "low": _round(result.low), "high": _round(result.high),
        "shift_percent": _round(result.percent(result.estimate)), "low_percent": _round(result.percent(result.low)),
        "high_percent": _round(result.percent(result.high)),
        "confidence": result.confidence, "z": _round(result.z), "p_value": result.p_value,
        "histogram": histogram(list(a.values()), list(b.values())),
        "note": "" if result.estimate is not None else (f"not tested: fewer than {maths.MIN_SAMPLES} samples on a side "
                                                        f"({result.n_before} before, {result.n_after} after)"),
    }


def _direction(entry: dict, significant: bool) -> str:
    if not significant or not entry["shift"]:
        return "none"
    lower = entry["shift"] < 0
    return "worse" if lower == entry["higher_is_better"] else "better"


def _figure_order(entry: dict) -> tuple:
    rank = 0 if entry["regression"] else 1 if entry["significant"] else 2
    return rank, entry["p_value"] if entry["p_value"] is not None else 2.0, entry["hardware"], entry["figure"]


def _node_moves(before: Side, after: Side, keys: list, groups_before: dict, groups_after: dict,
                settings: Settings) -> list:
    """The nodes that moved beyond their noise (Holm over every node-figure), most moved first, each with
    what differs on it between the two sides."""
    moves: list = []
    for key in keys:
        own_sd = {}
        for host in groups_before[key]:
            readings = before.hosts[host].readings.get(key[1], [])
            sd = maths.relative_sd(readings)
            if sd is not None:
                own_sd[host] = sd
        moves += [(key, move) for move in maths.node_changes(groups_before[key], groups_after[key], own_sd,
                                                             settings.alpha)]
    maths.judge_moves([m for _, m in moves], settings.alpha)
    per_host: dict = {}
    for key, move in moves:
        if not (move.moved or move.apart):
            continue
        higher_is_better = (after.meta.get(key[1]) or before.meta.get(key[1]) or (True, ""))[0]
        per_host.setdefault(move.host, []).append({
            "figure": key[1], "hardware": key[0], "before": _round(move.before), "after": _round(move.after),
            "change_percent": _round(100 * move.change), "noise_percent": _round(100 * move.noise),
            "noise_source": move.noise_source, "z": _round(move.z), "p_value": move.p_value,
            "fleet_change_percent": _round(100 * move.fleet_change), "z_apart": _round(move.z_apart),
            "beyond_noise": move.moved, "apart_from_fleet": move.apart,
            "direction": _node_direction(move, higher_is_better)})
    # apart from the fleet first (the slow node among healthy ones), then by how far each moved
    order = sorted(per_host, key=lambda h: (not any(m["apart_from_fleet"] for m in per_host[h]),
                                            -max(abs(m["z_apart"]) for m in per_host[h]),
                                            -max(abs(m["z"]) for m in per_host[h]), h))
    nodes = []
    for index, host in enumerate(order):
        figures = sorted(per_host[host], key=lambda m: (not m["apart_from_fleet"], -abs(m["z_apart"]), -abs(m["z"])))
        read_config = index < CONFIG_NODES
        nodes.append({"host": host, "worse": any(m["direction"] == "worse" for m in figures),
                      "apart_from_fleet": any(m["apart_from_fleet"] for m in figures),
                      "figures": figures,
                      "differences": _differences(before.hosts[host], after.hosts[host], read_config),
                      "config_read": read_config})
    return nodes


def _node_direction(move: maths.NodeMove, higher_is_better: bool) -> str:
    """worse / better: the way the node moved beyond its noise; apart from the fleet only: the way it moved
    against the fleet's change (it held while the fleet fell is 'better than the fleet')."""
    change = move.change if move.moved else move.change - move.fleet_change
    word = "worse" if (change < 0) == higher_is_better else "better"
    return word if move.moved else f"{word} than the fleet"


def _differences(a: HostSide, b: HostSide, read_config: bool) -> list:
    """[{key, before, after}]: what differs on the host between the two sides: its profile, its versions and,
    where read, its tuned values (each config check's observed value, as the history keeps them)."""
    if read_config:
        for host in (a, b):
            if host.config is None and host.source:
                host.config = _config_of_report(host.source)
    state_a, state_b = _state(a), _state(b)
    out = []
    for key in sorted(state_a.keys() | state_b.keys()):
        if state_a.get(key) != state_b.get(key):
            out.append({"key": key, "before": state_a.get(key), "after": state_b.get(key)})
    return out


def _state(host: HostSide, config: bool = True) -> dict:
    state = {"profile": host.hardware} if host.hardware else {}
    state.update({f"facts.{k}": v for k, v in host.versions.items()})
    if config:
        state.update(host.config or {})
    return state


def _config_of_report(path: str) -> dict:
    """The tuned values and version facts of one saved node report (verify.history.record.config_of); {} when
    it cannot be read again (it was read a moment ago: the difference list then shows versions only)."""
    from verify.bounded_load import MAX_BYTES, loads_json_bytes_bounded, read_bounded
    from verify.history.record import config_of
    from verify.report import results_of

    try:
        report = loads_json_bytes_bounded(read_bounded(path, MAX_BYTES, "node report"), "node report")
        return config_of(report, results_of(report)) if isinstance(report, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _fleet_changes(before: Side, after: Side) -> list:
    """What changed across the fleet between the sides (profile and versions of the hosts on both, and their
    tuned values in a history window), one row per key and (before, after) pair with the count of hosts: the
    upgrade itself, in one table."""
    counted: dict = {}
    # tuned values only where every host's were read (a window: the store keeps them); a run directory's are
    # read back for the listed nodes only, and counting those would undercount the fleet
    with_config = before.kind == after.kind == "history window"
    seen: dict = {}  # hosts sharing their stored configuration sets (a window) differ alike: diffed once
    for host in sorted(before.hosts.keys() & after.hosts.keys()):
        a, b = before.hosts[host], after.hosts[host]
        shape = (a.hardware, id(a.versions), id(a.config), b.hardware, id(b.versions), id(b.config))
        if shape not in seen:
            state_a = _state(a, config=with_config)
            state_b = _state(b, config=with_config)
            seen[shape] = [(key, state_a.get(key), state_b.get(key)) for key in state_a.keys() | state_b.keys()
                           if state_a.get(key) != state_b.get(key)]
        for difference in seen[shape]:
            counted.setdefault(difference, []).append(host)
    rows = [{"key": k, "before": va, "after": vb, "hosts": len(hosts), "examples": hosts[:EXAMPLE_HOSTS]}
            for (k, va, vb), hosts in counted.items()]
    return sorted(rows, key=lambda r: (-r["hosts"], r["key"], str(r["before"]), str(r["after"])))


def histogram(before: list, after: list, bins: int = BINS) -> dict:
    """Counts of both sides over shared bins spanning the 1st to 99th percentile of both (widened 5 %): a few
    far outliers would squash the fleet into one bin; those outside are counted apart (below, above)."""
    values = sorted(before + after)
    if not values:
        return {"edges": [], "before": [], "after": [], "below": [0, 0], "above": [0, 0]}
    low, high = _quantile(values, 0.01), _quantile(values, 0.99)
    pad = (high - low) * 0.05 or abs(high) * 0.01 or 1.0
    low, high = low - pad, high + pad
    width = (high - low) / bins
    edges = [_round(low + i * width) for i in range(bins + 1)]
    out: dict = {"edges": edges}
    for name, sample in (("before", before), ("after", after)):
        counts = [0] * bins
        below = above = 0
        for v in sample:
            if v < low:
                below += 1
            elif v >= high:
                above += 1
            else:
                counts[min(int((v - low) / width), bins - 1)] += 1
        out[name] = counts
        out.setdefault("below", []).append(below)
        out.setdefault("above", []).append(above)
    return out


def _quantile(ordered: list, q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def _side_entry(side: Side) -> dict:
    return {"source": side.label, "kind": side.kind, "hosts": len(side.hosts), "health": side.health}


def _method(settings: Settings, per_run: bool) -> dict:
    return {
        "samples": "runs of the one host" if per_run else "hosts (one value each: the median of its runs)",
        "shift": "Hodges-Lehmann: median of every after - before difference (Hodges and Lehmann 1963)",
        "interval": f"Moses' distribution-free interval for the shift, {100 * (1 - settings.alpha):g} % per figure "
                    "(Hollander, Wolfe and Chicken 2014, section 4.3)",
        "test": "Mann-Whitney U, two-sided, normal approximation with tie and continuity corrections",
        "correction": f"Holm (1979) over the figures: family-wise level {settings.alpha:g}",
        "alpha": settings.alpha,
        "min_shift_percent": settings.min_shift_percent,
        "min_samples": maths.MIN_SAMPLES,
        "node_noise": "sqrt(2) x the relative sd of the node's own readings (3 or more) or the sd of the fleet's "
                      "relative changes (nodes beyond modified z 3.5 left out); z = change / noise (beyond its noise) "
                      "and (change - the fleet's median change) / noise (apart from the fleet), p from Student's t "
                      f"with the estimate's degrees of freedom, each Holm-corrected over every node-figure at "
                      f"{settings.alpha:g}",
        "health": HEALTH_FORMULA,
    }


def _key_name(key: tuple) -> str:
    return f"{key[1]} [{key[0]}]" if key[0] else key[1]


def _round(value: Optional[float], digits: int = 6) -> Optional[float]:
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def _now() -> str:
    from verify.report import utc_now

    return utc_now()


# ---- the command ----------------------------------------------------------------------------------

def add_parser(sub) -> argparse.ArgumentParser:
    c = sub.add_parser("compare", help="before and after, fleet-wide: which figures and nodes got slower, "
                                       "with what confidence, and what changed on them",
                       epilog="exit status: 0 no significant regression; 1 a figure got significantly worse (with "
                              "--fail-on-nodes, or a node); 2 bad input, nothing compared; 3 compared, but a side had "
                              "unreadable files or nothing could be tested. Method: docs/compare.md")
    c.add_argument("before", help="a fleet run directory, or with --history a window FROM..TO (UTC ISO dates or "
                                  "times, either end may be empty) or a run key")
    c.add_argument("after", help="the same, for after the change")
    c.add_argument("--history", metavar="PATH", default=None,
                   help="history database for windows (default: as for verify); with two run directories, each "
                        "host's last runs there give its own run-to-run noise")
    c.add_argument("--host", action="append", default=[], help="only this host (repeatable); one host with "
                                                                "two windows compares that host's runs")
    c.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                   help=f"family-wise significance level, Holm-corrected (default {DEFAULT_ALPHA:g})")
    c.add_argument("--min-shift", type=float, default=0.0, metavar="PCT",
                   help="a significant fleet shift smaller than this many percent is not a regression (default 0)")
    c.add_argument("--fail-on-nodes", action="store_true",
                   help="exit 1 also when a node (not the fleet) got worse beyond its own noise")
    c.add_argument("--format", default="json,md,html", help="files to write with --out: " + ", ".join(FORMATS))
    c.add_argument("--out", default=None, help="directory to write compare.json/.md/.html into (default: none, "
                                               "the terminal only)")
    c.add_argument("--world-readable", action="store_true", help="files readable by every user (default: owner only)")
    c.add_argument("--quiet", action="store_true", help="no terminal summary")
    return c


def main(args) -> int:
    """Exit 0: no significant regression; 1: a figure got significantly worse (or, with --fail-on-nodes, a
    node); 2: bad input, nothing compared; 3: compared, but a side had unreadable files or nothing could be
    tested."""
    from verify.history.store import HistoryError
    from verify.report import OutDirError, check_out_dir

    name = "tunefleet compare"
    settings = Settings(args.alpha, args.min_shift, args.fail_on_nodes)
    formats = [f.strip() for f in str(args.format).split(",") if f.strip()]
    try:
        settings.validate()
        unknown = [f for f in formats if f not in FORMATS]
        if unknown:
            raise ValueError(f"--format: unknown {', '.join(unknown)}; choose from {', '.join(FORMATS)}")
        if args.out:
            check_out_dir(args.out, args.world_readable)
        before, after = _sides_from_args(args)
    except (ValueError, OutDirError, FileNotFoundError, HistoryError) as exc:  # a foreign or locked history too
        print(f"{name}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    document = compare(before, after, settings)
    if not args.quiet:
        from verify.report.compare_text import terminal

        print(terminal(document))
    if args.out:
        try:
            for path in write(document, Path(args.out), formats, args.world_readable):
                print(f"wrote {path}")
        except OSError as exc:
            print(f"{name}: {args.out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return document["verdict"]["exit_code"]


def _sides_from_args(args) -> tuple:
    """Both sides, each a directory or a history window; ValueError naming the side and what is wrong."""
    from verify.history.window import parse_window
    from verify.safe_io import check_plain_component

    for host in args.host:
        check_plain_component(host, "--host")
    is_dir = [os.path.isdir(args.before), os.path.isdir(args.after)]
    if is_dir[0] != is_dir[1]:
        raise ValueError("compare two run directories or two history windows, not one of each "
                         f"({args.before!r} is {'a' if is_dir[0] else 'no'} directory, "
                         f"{args.after!r} is {'a' if is_dir[1] else 'no'} directory)")
    if is_dir[0]:
        sides = [_restricted(side_from_directory(d), args.host) for d in (args.before, args.after)]
        if args.history:
            store = _open_history(args.history, create=False)
            try:
                note = add_history_noise(sides[0], store, Path(args.before).resolve().name)
            finally:
                store.close()
            if note:
                sides[0].notes.append(note)
        return tuple(sides)
    windows = [parse_window(args.before), parse_window(args.after)]
    store = _open_history(args.history, create=False)
    try:
        return tuple(side_from_window(store, w, args.host or None) for w in windows)
    finally:
        store.close()


def _restricted(side: Side, hosts: list) -> Side:
    if hosts:
        side.hosts = {h: s for h, s in side.hosts.items() if h in hosts}
        if not side.hosts:
            raise ValueError(f"{side.label}: none of the hosts {', '.join(hosts)}")
    return side


def _open_history(path: Optional[str], create: bool):
    from verify.history.store import default_path, open_store

    where = path or default_path()
    if not os.path.exists(where):
        raise ValueError(f"--history {where}: no such file (windows are read from the run history)")
    return open_store(where, create=create)


def write(document: dict, out_dir: Path, formats: list, world_readable: bool = False) -> list:
    """Each format as a new file renamed over its name (verify.safe_io), owner-only unless world_readable."""
    from verify.report.compare_html import page
    from verify.report.compare_text import markdown
    from verify.safe_io import PRIVATE_DIR, PRIVATE_FILE, SHARED_FILE, open_trusted_dir, write_in_dir

    renderers = {"json": lambda: json.dumps(document, indent=1) + "\n", "md": lambda: markdown(document),
                 "html": lambda: page(document)}
    dir_fd = open_trusted_dir(str(out_dir), create=True, mode=0o755 if world_readable else PRIVATE_DIR)
    written = []
    try:
        for fmt in formats:
            write_in_dir(dir_fd, OUTPUT_NAMES[fmt], renderers[fmt](), SHARED_FILE if world_readable else PRIVATE_FILE)
            written.append(out_dir / OUTPUT_NAMES[fmt])
    finally:
        os.close(dir_fd)
    return written
