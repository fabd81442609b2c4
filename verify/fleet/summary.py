"""The fleet model: every host's results, plus what only the fleet can see (outliers, version drift).

Built once from the saved node reports; every output format (JSON, JUnit, Markdown, HTML) renders
this one object, so they cannot disagree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from verify.fleet.blame import blame_path_mtu
from verify.fleet.model import NodeReport
from verify.report.bench_table import is_benchmark
from verify.result import EXIT_COULD_NOT_CHECK, EXIT_FAILED, EXIT_OK, STATUS_ORDER, CheckResult, Status
from verify.stats import outliers as outlier_maths

# An outlier this far below the fleet median is a failure, not just a warning, once confirmed
# (verify.stats.outliers.confirm_low: a re-measurement, or a gap beyond the figure's measured noise).
OUTLIER_FAIL_RATIO = 0.8
NOT_CLEAN = frozenset({Status.FAIL.value, Status.ERROR.value, Status.WARN.value})
STATUSES = [s.value for s in sorted(Status, key=lambda s: STATUS_ORDER[s])]
HOST_ORDER = ("FAIL", "ERROR", "WARN", "PASS", "SKIP")


@dataclass
class HostRow:
    host: str
    worst: str
    counts: dict
    statuses: dict  # check_id -> status value
    problems: list  # CheckResult, failures first
    source: str = ""
    benchmarks: list = field(default_factory=list)  # CheckResult of role bench: the host's measured figures


@dataclass
class FleetSummary:
    rows: list  # HostRow, failures first
    check_ids: list  # columns, the most failing first
    outliers: list
    drift: list
    load_errors: list
    metrics: dict = field(default_factory=dict)  # check_id -> (host -> value, higher_is_better, unit)
    curves: dict = field(default_factory=dict)  # check_id -> host -> [(size, busbw)]
    # Each host against its own history (verify.history: fleet_regressions.json of the run), {} without one.
    regressions: dict = field(default_factory=dict)
    # Each host against the fleet baseline (verify.fleet.baseline: --baseline FILE), [] without one.
    baseline: list = field(default_factory=list)
    # Hosts that share one machine (one kernel boot id: containers), [{"boot_id", "hosts"}]: their
    # benchmarks measure one set of devices at once, so their outliers are never confirmed.
    shared_machines: list = field(default_factory=list)

    @property
    def host_counts(self) -> dict:
        tally = dict.fromkeys(HOST_ORDER, 0)
        for row in self.rows:
            tally[row.worst] += 1
        return tally

    @property
    def bad_hosts(self) -> list:
        return [row.host for row in self.rows if row.worst in (Status.FAIL.value, Status.ERROR.value)]

    def exit_code(self) -> int:
        """The README's codes (verify.result): 1 if any host failed, else 3 if anything could not be checked
        or read (an ERROR row, a damaged file: the report is still written), else 0. 2 is bad input only."""
        worst = {row.worst for row in self.rows}
        if Status.FAIL.value in worst:
            return EXIT_FAILED
        if Status.ERROR.value in worst or self.load_errors:
            return EXIT_COULD_NOT_CHECK
        return EXIT_OK


def build_summary(nodes: list, load_errors: list, addresses: Optional[dict] = None,
                  baseline_findings: Optional[list] = None) -> FleetSummary:
    """addresses (host -> its addresses) lets path MTU failures be blamed on the host they point at;
    baseline_findings (verify.fleet.baseline.judge) become fleet.baseline.* rows on their hosts."""
    blamed = blame_path_mtu(nodes, addresses) if addresses else {}
    metrics = outlier_maths.metric_values(nodes)
    found_outliers = _outliers_per_hardware(nodes, metrics)
    drift = outlier_maths.version_drift(nodes)
    shared = shared_machines(nodes)
    fleet_findings = _fleet_findings(found_outliers, drift, nodes, shared)
    for host, findings in blamed.items():
        fleet_findings.setdefault(host, []).extend(findings)
    if baseline_findings:
        from verify.fleet.baseline import as_results

        for host, findings in as_results(baseline_findings).items():
            fleet_findings.setdefault(host, []).extend(findings)
    rows = [_host_row(node, fleet_findings.get(node.host, [])) for node in nodes]
    rows.sort(key=lambda r: (HOST_ORDER.index(r.worst), -len(r.problems), r.host))
    return FleetSummary(
        rows=rows,
        check_ids=_columns(rows),
        outliers=found_outliers,
        drift=drift,
        load_errors=load_errors,
        metrics=metrics,
        curves=_curves(nodes),
        baseline=list(baseline_findings or []),
        shared_machines=shared,
    )


def shared_machines(nodes: list) -> list:
    """[{"boot_id", "hosts"}] for every kernel boot id more than one host reported: one machine (a
    host and its containers) whose disks, links and GPUs those hosts' benchmarks share."""
    by_machine: dict = {}
    for node in nodes:
        if node.machine:
            by_machine.setdefault(node.machine, []).append(node.host)
    return [{"boot_id": boot, "hosts": sorted(hosts)} for boot, hosts in sorted(by_machine.items()) if len(hosts) > 1]


def _outliers_per_hardware(nodes: list, metrics: dict) -> list:
    """Outliers among hosts of the same hardware profile (NodeReport.hardware): in a fleet of H200s and
    H100s every H100 is 'slow' against the H200s' median, and none of them is sick."""
    groups: dict = {}
    for node in nodes:
        groups.setdefault(node.hardware, []).append(node)
    if len(groups) < 2:
        return outlier_maths.fleet_outliers(metrics)
    found = [o for group in groups.values() for o in outlier_maths.fleet_outliers(outlier_maths.metric_values(group))]
    return sorted(found, key=lambda o: (o.metric, -abs(o.modified_z), o.host))


def _fleet_findings(found_outliers: list, drift: list, nodes: list = (), shared: list = ()) -> dict:
    """Outliers and drift as results on the host they accuse, so the matrix shows them."""
    findings: dict = {}
    readings: dict = {}  # metric -> host -> its readings, built once for the metrics with an outlier
    for o in found_outliers:
        if o.metric not in readings:
            readings[o.metric] = {node.host: outlier_maths.readings(r) for node in nodes
                                  for r in node.results if r.check_id == o.metric}
        status, why = _outlier_status(o, readings[o.metric], shared)
        findings.setdefault(o.host, []).append(CheckResult(
            check_id=f"fleet.outlier.{o.metric}", role="fleet", status=status,
            expected=f"near the fleet median {o.fleet_median:g}", observed=o.value,
            reason=o.reason() + (f"; {why}" if why else ""),
            remediation="compare this host's tuning and hardware with a median host; re-run the benchmark",
            details=dict(o.to_dict(), confirmation=why) if why else o.to_dict(),
        ))
    for d in drift:
        findings.setdefault(d.host, []).append(CheckResult(
            check_id=f"fleet.version.{d.key}", role="fleet", status=Status.WARN,
            expected=d.majority, observed=d.value, reason=d.reason(),
            remediation="align this host's driver/firmware/library version with the rest of the fleet",
            details=d.to_dict(),
        ))
    return findings


def _outlier_status(o, per_host: dict, shared: list) -> tuple:
    """(status, why) of one outlier: WARN unless it is far below the median and confirmed. Far below
    on a machine other hosts share is never confirmed: they read one device at once (three containers
    on one disk), which is contention, not a slow node."""
    partners = next((g["hosts"] for g in shared if o.host in g["hosts"]), [])
    if partners:
        others = ", ".join(h for h in partners if h != o.host)
        return Status.WARN, (f"not confirmed: {o.host} shares one machine (kernel boot id) with {others}, "
                             "so their benchmarks measured the same devices at once")
    if not (o.fleet_median and o.relative < OUTLIER_FAIL_RATIO):
        return Status.WARN, ""
    confirmed, why = outlier_maths.confirm_low(o, per_host.get(o.host, []), outlier_maths.metric_noise(per_host),
                                               OUTLIER_FAIL_RATIO)
    return (Status.FAIL if confirmed else Status.WARN), why


def _host_row(node: NodeReport, extra: list) -> HostRow:
    statuses = dict(node.statuses)
    for r in extra:
        statuses[r.check_id] = r.status.value
    counts = dict.fromkeys(STATUSES, 0)
    for status in statuses.values():
        if status in counts:  # a NodeReport built elsewhere may carry a status that is none of ours
            counts[status] += 1
    problems = [r for r in list(node.results) + extra if r.status not in (Status.PASS, Status.SKIP)]
    problems.sort(key=lambda r: (STATUS_ORDER[r.status], r.check_id))
    # A host is SKIP only when nothing on it could be checked; some SKIPs among PASSes are normal
    # (no GPU, no RDMA) and such a host reads as PASS.
    worst = next((s for s in HOST_ORDER if counts[s]), Status.SKIP.value)
    benchmarks = [r for r in node.results if is_benchmark(r)]
    return HostRow(node.host, worst, counts, statuses, problems, node.source, benchmarks)


def _columns(rows: list) -> list:
    bad: dict = {}
    for row in rows:
        for check_id, status in row.statuses.items():
            bad[check_id] = bad.get(check_id, 0) + (status in NOT_CLEAN)
    return sorted(bad, key=lambda c: (-bad[c], c))


def _curves(nodes: list) -> dict:
    from verify.report.plots import curve_points

    curves: dict = {}
    for node in nodes:
        for r in node.results:
            points = curve_points(r.details)
            if points:
                curves.setdefault(r.check_id, {})[node.host] = points
    return curves
