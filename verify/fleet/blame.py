"""Who is to blame when a test between hosts fails: path MTU (blame_path_mtu) and pairwise NCCL (blame_pairs).

Path MTU: the one host everybody fails to reach.

Each host pings its peers at the full MTU (network.path_mtu.<address>): a few per interface, each
host pinged by as many (plugins/filter/verify_node_peers.py), or every other host. A single host
whose interface or switch port is left at 1500 makes every host that pings it fail its check
towards it, so, read node by node, many hosts look bad. Read across the fleet, the failures point
at one address: that host is blamed (FAIL), and the others' failures towards it become WARN with
the blamed host named.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from typing import Iterable, Optional, Sequence

from verify.bounded_load import load_json_bounded
from verify.fleet.pairing import (
    ERROR,
    FAIL,
    Outcome,
    fleet_rails,
    load_outcomes,
    rails_of_hosts,
    unit_states,
    unit_verdict,
)
from verify.report.pair_matrix import pairs_section
from verify.result import CheckResult, Status
from verify.safe_io import is_plain_component, write_file_atomic

PREFIX = "network.path_mtu."
# A target is blamed when at least this many hosts, and at least half of those that tested it,
# cannot reach it: one failing pair alone cannot say which end is wrong.
MIN_ACCUSERS = 2


def blame_path_mtu(nodes: list, addresses: dict) -> dict:
    """host -> [fleet findings] for blamed hosts; rewrites the accusers' results in place.

    addresses: host -> list of its addresses (the playbook writes fleet_addresses.json).
    """
    owner = {addr: host for host, addrs in addresses.items() for addr in addrs}
    testers: dict = {}
    accusers: dict = {}
    for node in nodes:
        for check_id, status in node.statuses.items():
            target = owner.get(check_id[len(PREFIX):]) if check_id.startswith(PREFIX) else None
            if target is None or target == node.host:
                continue
            testers.setdefault(target, set()).add(node.host)
            if status == Status.FAIL.value:
                accusers.setdefault(target, set()).add(node.host)
    blamed = {t: a for t, a in accusers.items() if len(a) >= MIN_ACCUSERS and 2 * len(a) >= len(testers[t])}
    findings: dict = {}
    for target, who in sorted(blamed.items()):
        findings[target] = [CheckResult(
            check_id="fleet.path_mtu_blame", role="network", status=Status.FAIL,
            expected="every host reaches it at the full MTU", observed=f"{len(who)} of {len(testers[target])} cannot",
            reason=(f"{len(who)} of {len(testers[target])} hosts cannot reach {target} with full-MTU packets: "
                    f"its interface or switch port is below the fleet MTU"),
            remediation="network: network_mtu on this host, and the MTU of its switch port",
            details={"accusers": sorted(who)},
        )]
    for node in nodes:
        for index, result in enumerate(node.results):
            if not result.check_id.startswith(PREFIX) or result.status is not Status.FAIL:
                continue
            target = owner.get(result.check_id[len(PREFIX):])
            if target in blamed:
                node.results[index] = replace(result, status=Status.WARN,
                                              reason=f"{result.reason} (the fleet blames {target})")
                node.statuses[result.check_id] = Status.WARN.value
    return findings


# ---- pairwise NCCL per rail (verify/fleet/nccl_pair.py measures, verify/fleet/pairing.py plans) ----

PAIR_CHECK_ID = "fleet.nccl_pairwise"
PAIR_REMEDIATION = {
    "node": "every rail of this node is slow: its GPUs' PCIe path, nvidia_peermem, NCCL settings (gpu_nccl_conf)",
    "rail": "this HCA/NIC: its cable and switch port (ibstat, ethtool -S), link rate and width, MTU",
    "path": "both ends pass with others: the switch path between them (ports, cables, routing/ECMP)",
    "missing_rail": "check the HCA/NIC is present and up (lspci, ibstat, ip link), or drop it from the rails",
    "unreachable": "the host stopped answering mid-round: check ssh, its load and its network, then re-run",
    "suspect": "failed with its only partner and no partner that passed was free: re-run with more hosts",
    "untested": "no partner was free to test it: re-run, or check the pairing plan",
}
_STATUS = {"node": Status.FAIL, "rail": Status.FAIL, "path": Status.WARN, "missing_rail": Status.ERROR,
           "unreachable": Status.ERROR, "suspect": Status.WARN, "untested": Status.ERROR}
_RANK = {Status.PASS: 0, Status.SKIP: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}


@dataclass(frozen=True)
class Blame:
    """One finding of a pairwise run: `hosts` is the blamed host (both ends for a path), `rails` the
    rails it concerns, `evidence` the pair outcomes that convict it (which partners, which figures)."""

    kind: str
    hosts: tuple
    rails: tuple
    reason: str
    evidence: tuple = ()

    @property
    def status(self) -> Status:
        return _STATUS[self.kind]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "hosts": list(self.hosts), "rails": list(self.rails),
                "status": self.status.value, "reason": self.reason,
                "remediation": PAIR_REMEDIATION[self.kind], "evidence": [o.to_dict() for o in self.evidence]}


def _figure(o: Outcome, me: str) -> str:
    partner = o.b if o.a == me else o.a
    if o.busbw_gbps is None:
        return f"{partner} ({o.rail}, round {o.round}: {o.reason or o.status})"
    floor = f" of floor {o.floor_gbps:.3g}" if o.floor_gbps else ""
    return f"{partner} ({o.rail}, round {o.round}: {o.busbw_gbps:.3g} GB/s{floor})"


def blame_pairs(hosts: Sequence[str], rails_by_host: dict, outcomes: Iterable[Outcome]) -> list:
    """The findings of a pairwise run, most severe first: nodes and rails blamed (FAIL), hosts that
    could not take part or lack a rail the fleet has (ERROR), slow paths between two good hosts and
    suspects left unsettled (WARN). Linear in the outcomes."""
    hosts = list(dict.fromkeys(hosts))
    outcomes = list(outcomes)
    units = unit_states(outcomes)
    by_unit: dict = {}
    for o in outcomes:
        by_unit.setdefault((o.a, o.rail), []).append(o)
        by_unit.setdefault((o.b, o.rail), []).append(o)
    culprits: dict = {}
    for o in outcomes:
        if o.status == ERROR and o.culprit:
            culprits.setdefault(o.culprit, []).append(o)
    findings = []
    for host in hosts:
        if host in culprits:
            first = culprits[host][0]
            findings.append(Blame("unreachable", (host,), tuple(sorted({o.rail for o in culprits[host]})),
                                  f"{host} could not take part in round {first.round}: {first.reason or 'no answer'}",
                                  tuple(culprits[host])))
            continue
        rails = sorted(set(rails_by_host.get(host) or ()))
        verdict_of = {rail: unit_verdict(host, rail, units) for rail in rails}
        bad = [r for r in rails if verdict_of[r] == "bad"]
        failing = tuple(o for r in bad for o in by_unit.get((host, r), ()) if o.status == FAIL)
        if bad and len(bad) == len(rails):
            partners = sorted({o.b if o.a == host else o.a for o in failing})
            findings.append(Blame("node", (host,), tuple(bad),
                                  f"{host} is slow on every rail ({', '.join(bad)}) with {len(partners)} partner(s): "
                                  + "; ".join(_figure(o, host) for o in failing[:4]), failing))
        else:
            for rail in bad:
                evidence = tuple(o for o in failing if o.rail == rail)
                findings.append(Blame("rail", (host,), (rail,),
                                      f"rail {rail} of {host} is slow with "
                                      + "; ".join(_figure(o, host) for o in evidence[:4])
                                      + "; its other rails pass", evidence))
        for kind in ("suspect", "untested"):
            wanted = {kind, "error"} if kind == "untested" else {kind}
            open_rails = tuple(r for r in rails if verdict_of[r] in wanted)
            if open_rails:
                evidence = tuple(o for r in open_rails for o in by_unit.get((host, r), ()))
                why = ("failed with its only partner and no partner that passed was free to re-test it: "
                       + "; ".join(_figure(o, host) for o in evidence[:4])) if kind == "suspect" else \
                      "no pair test measured it (its partner could not take part, or no partner was free)"
                findings.append(Blame(kind, (host,), open_rails, f"{host} rail(s) {', '.join(open_rails)}: {why}",
                                      evidence))
    findings.extend(_missing_rails(hosts, rails_by_host))
    findings.extend(_slow_paths(outcomes, units))
    findings.sort(key=lambda b: (-_RANK[b.status], b.kind, b.hosts, b.rails))
    return findings


def _missing_rails(hosts: list, rails_by_host: dict) -> list:
    """A rail more than half the fleet has but this host lacks: ERROR, it was never tested here."""
    having: dict = {}
    for host in hosts:
        for rail in set(rails_by_host.get(host) or ()):
            having[rail] = having.get(rail, 0) + 1
    common = [r for r in fleet_rails(rails_by_host) if 2 * having.get(r, 0) > len(hosts)]
    out = []
    for host in hosts:
        mine = set(rails_by_host.get(host) or ())
        missing = tuple(r for r in common if r not in mine)
        if missing:
            out.append(Blame("missing_rail", (host,), missing,
                             f"rail(s) {', '.join(missing)} do not exist on {host} ({having[missing[0]]} of "
                             f"{len(hosts)} hosts have {missing[0]}): not tested there"))
    return out


def _slow_paths(outcomes: list, units: dict) -> list:
    """Pairs that failed although both ends passed with other partners: the path between them."""
    paths: dict = {}
    for o in outcomes:
        if o.status == FAIL and unit_verdict(o.a, o.rail, units) == "good" == unit_verdict(o.b, o.rail, units):
            paths.setdefault(tuple(sorted((o.a, o.b))), []).append(o)
    return [Blame("path", pair, tuple(sorted({o.rail for o in found})),
                  f"{pair[0]} and {pair[1]} are slow together on {', '.join(sorted({o.rail for o in found}))} "
                  f"({_figure(found[0], pair[0])}) but each passes with other partners", tuple(found))
            for pair, found in sorted(paths.items())]


def pair_host_results(hosts: Sequence[str], outcomes: Iterable[Outcome], findings: Sequence[Blame]) -> dict:
    """host -> the one fleet.nccl_pairwise CheckResult: the worst finding naming it, else PASS (with a
    note when its own failures are explained by a partner that was blamed)."""
    outcomes = list(outcomes)
    named: dict = {}
    for blame in findings:
        for host in blame.hosts:
            named.setdefault(host, []).append(blame)
    convicted = {(h, r) for b in findings if b.kind in ("node", "rail") for h in b.hosts for r in b.rails}
    tested: dict = {}
    for o in outcomes:
        tested.setdefault(o.a, []).append(o)
        tested.setdefault(o.b, []).append(o)
    results = {}
    for host in dict.fromkeys(hosts):
        mine = named.get(host, [])
        if mine:
            worst = max(mine, key=lambda b: _RANK[b.status])
            results[host] = CheckResult(
                PAIR_CHECK_ID, "fleet", worst.status, expected="passes the inter-node floor with its partners",
                observed=f"{worst.kind}: {', '.join(worst.rails) or '-'}", reason=worst.reason,
                remediation=PAIR_REMEDIATION[worst.kind], details={"findings": [b.to_dict() for b in mine]})
            continue
        own = tested.get(host, [])
        explained = [o for o in own if o.status == FAIL and ((o.b if o.a == host else o.a), o.rail) in convicted]
        note = ""
        if explained:
            blamed = sorted({o.b if o.a == host else o.a for o in explained})
            note = f"; its failures with {', '.join(blamed)} are that host's (blamed)"
        status = Status.PASS if own else Status.SKIP
        results[host] = CheckResult(
            PAIR_CHECK_ID, "fleet", status, expected="passes the inter-node floor with its partners",
            observed=f"{sum(o.status == 'pass' for o in own)} of {len(own)} rail tests passed",
            reason=(f"passed with {', '.join(sorted({o.b if o.a == host else o.a for o in own if o.status == 'pass'}))}"
                    + note) if own else "no pair test ran on this host",
            details={"pairs": [o.to_dict() for o in own]})
    return results


# What a fleet run's pairwise NCCL rounds leave in the run directory: <run>/<host>/CROSSNODE_NAME (the
# host's fleet.nccl_pairwise result, read by verify/fleet/model.py's crossnode-*.json loading) and
# <run>/PAIRS_NAME (every outcome, the findings and the report's pairs section). The summary sits in
# the run's nccl-pairs/ directory, never at the top, where the fleet report reads *.json as host reports.
CROSSNODE_NAME = "crossnode-nccl-pairs.json"
PAIRS_NAME = os.path.join("nccl-pairs", "summary.json")


def pairwise_records(reported: dict, outcomes: Sequence[Outcome]) -> tuple:
    """(host -> [result dict], run summary dict) from what each host reported (`nccl_pair rails`:
    {host: {"rails": {...}, "error": ""}}) and every round's outcomes. A host that could not report its
    rails (no PyTorch, the rails command failed) is ERROR with its own reason, never blamed as slow."""
    hosts = [str(h) for h in reported]
    rails_by_host = rails_of_hosts(reported)
    able = [h for h in hosts if not _host_error(reported[h])]
    findings = blame_pairs(able, {h: rails_by_host[h] for h in able}, outcomes)
    results = pair_host_results(able, outcomes, findings)
    records = {}
    for host in hosts:
        why = _host_error(reported[host])
        if why:
            result = CheckResult(PAIR_CHECK_ID, "fleet", Status.ERROR, expected="takes part in the pair tests",
                                 observed="did not take part", reason=f"{host}: {why}",
                                 remediation="install PyTorch on every node, or point verify_node_pythonpath at it")
        else:
            result = results[host]
        records[host] = [result.to_dict()]
    summary = {"hosts": hosts, "rails": rails_by_host, "outcomes": [o.to_dict() for o in outcomes],
               "findings": [b.to_dict() for b in findings],
               "pairs": pairs_section([o.to_dict() for o in outcomes], [b.to_dict() for b in findings])}
    return records, summary


def _host_error(value) -> str:
    if isinstance(value, dict):
        return str(value.get("error") or "")
    return ""


def _host_dir(run_dir: str, host: str) -> Optional[str]:
    """<run>/<host>, None for a name that is not one plain path component."""
    if not is_plain_component(host):
        return None
    return os.path.join(run_dir, host)


def write_pairwise(run_dir: str, reported: dict, outcomes: Sequence[Outcome]) -> dict:
    """Write every host's crossnode result and the run's pairs file; returns the summary."""
    records, summary = pairwise_records(reported, outcomes)
    for host, host_records in records.items():
        directory = _host_dir(run_dir, host)
        if directory is None:
            raise ValueError(f"host name {host!r} cannot name a report directory")
        write_file_atomic(os.path.join(directory, CROSSNODE_NAME), json.dumps(host_records, indent=1, default=str),
                          create_dir=True)
    write_file_atomic(os.path.join(run_dir, PAIRS_NAME), json.dumps(summary, indent=1, default=str), create_dir=True)
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.blame", description="blame a pairwise NCCL run")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("pairs", help="judge every host from all rounds' outcomes and write the results")
    p.add_argument("--rails", required=True, help="JSON file {host: {rails, error}} (nccl_pair rails on each host)")
    p.add_argument("--outcomes", nargs="*", default=[], help="every round's outcome files (nccl_pair collect)")
    p.add_argument("--run-dir", required=True, help="the fleet run directory (<run>/<host>/ gets the results)")
    args = parser.parse_args(argv)
    try:
        reported = load_json_bounded(args.rails, what="--rails")
        if not isinstance(reported, dict):
            raise ValueError("--rails is not a JSON object")
        outcomes = load_outcomes(args.outcomes)
        summary = write_pairwise(args.run_dir, reported, outcomes)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"blame pairs: {exc}", file=sys.stderr)
        return 2
    for finding in summary["findings"]:
        print(f"{finding['status']}: {finding['reason']}")
    if not summary["findings"]:
        print(f"PASS: {len(summary['outcomes'])} rail tests between {len(summary['hosts'])} hosts, no one blamed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
