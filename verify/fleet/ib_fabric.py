"""The fabric side of every host's InfiniBand links: `ibqueryerrors` from one node with fabric access,
joined to the hosts of a fleet run, each finding shown on the host the switch port faces (opt-in).

A node reads its own HCA ports' counters (verify.checks.health_ib); the switch port at the other end of the
cable counts the errors the node's transmitter and the cable cause, and only the fabric can read it. One
`ibqueryerrors -r` on a node with fabric access (or a capture of it handed in) names every port with a
counter above zero and, with `-r`, the port at the far end of its link (verify.facts.ib_fabric). Each line is
joined to a host of the run through the `ib_ports` fact every node report carries (port GUID, node GUID,
node description):
- a switch port whose link leads to a host's HCA port: "switch <name> (<GUID>) port N, facing mlx5_0/1";
- an HCA port's own counters as the fabric reads them.
The counters are judged by health_ib's one judge (counter_findings: the same thresholds, congestion
counters WARN at most, switch relay errors recorded only), as a rate per minute where an earlier run of the
same report directory kept a reading (<run>/ib-fabric/fabric.json), else as a count since the counters were
last cleared. A FAIL is `drain-rma` of the link: the cable / transceiver between the switch port and the
HCA, then the switch port itself (docs/verdicts.md).

Each host gets <run>/<host>/crossnode-ib-fabric.json (the fleet report reads crossnode-*.json, verify.fleet.
model); the run keeps the capture, the reading and a summary under <run>/ib-fabric/ (switch ports that face
no host of the run, an ibdiagnet stage table when one was given). Off unless asked: playbooks/verify.yml runs
it only with `verify_node_ib_fabric: true` (roles/verify_node/defaults/main.yml).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Optional, Sequence

from verify.bounded_load import BoundedLoadError, load_json_bounded
from verify.checks import health_ib
from verify.facts.ib_fabric import (
    FabricErrors,
    FabricPort,
    guid_text,
    parse_ibdiagnet_summary,
    parse_ibqueryerrors,
)
from verify.fleet.model import load_fleet_dir
from verify.judging import verdicts
from verify.result import CheckResult, Status
from verify.safe_io import for_terminal, is_plain_component, read_trusted_file, write_file_atomic

CHECK_ID = "fleet.ib_fabric"
ROLE = "fleet"
CROSSNODE_NAME = "crossnode-ib-fabric.json"
FABRIC_DIR = "ib-fabric"  # never at the run's top: the fleet report reads <run>/*.json as host reports
READING_NAME = "fabric.json"
SUMMARY_NAME = "summary.json"
MAX_CAPTURE_BYTES = 64 << 20  # ibqueryerrors of a 10,000-node fabric with errors everywhere
# Counters that stop at their width's maximum (IBA PortCounters: 8, 16 and 32 bits): the count is a floor.
SATURATED = {255, 65535, 4294967295}
RATES = {"errors": health_ib.DERIVED_ERRORS_PER_MIN, health_ib.FLAP_COUNTER: health_ib.DERIVED_FLAPS_PER_MIN}
CEILING = health_ib.DERIVED_ERRORS
FIX_SWITCH_PORT = ("drain {host}; reseat or replace the cable / transceiver between switch {switch} port {port} and "
                   "{host} {hca}; if the errors stay, move the cable to another switch port and service switch "
                   "port {port}")
# A reading's time is a Unix time no earlier than this (2001-09-09: no fabric this check reads was read before)
# and no later than now plus a clock's skew between the hosts that read and judge it; an interval between two
# readings longer than MAX_INTERVAL_S says nothing per minute (a reading kept for months). Outside these the
# interval is not known and the counters are judged as counts since they were last cleared, never as a rate
# that a far-away or future time makes small (a reading dated inf let 65,535 symbol errors PASS).
TIME_FLOOR_S = 1_000_000_000
MAX_SKEW_S = 300
MAX_INTERVAL_S = 30 * 86400
WITHOUT_LINKS = ("switch ports with errors that name no far end: run ibqueryerrors with -r (--report-port) so "
                 "each names the HCA it faces")


class HostIndex:
    """Which host and HCA port a GUID or node description belongs to, from the node reports' ib_ports."""

    def __init__(self, nodes: list) -> None:
        self.by_port_guid: dict = {}
        self.by_desc: dict = {}
        self.ports: dict = {}  # host -> [HCA port names]
        for node in nodes:
            for item in node.ib_ports:
                self.ports.setdefault(node.host, []).append(item["port"])
                if item["port_guid"]:
                    self.by_port_guid[item["port_guid"]] = (node.host, item["port"])
                desc = item["node_desc"].strip()
                if desc:
                    device = item["port"].split("/", 1)[0]
                    self.by_desc[desc] = (node.host, device)

    def own(self, port: FabricPort) -> Optional[tuple]:
        """(host, HCA port, how) when the line is a host's HCA port itself."""
        found = self.by_port_guid.get(port.port_guid)
        if found:
            return found[0], found[1], "port GUID"
        named = self.by_desc.get(port.node_name.strip())
        if named and not port.switch and port.port is not None:
            return named[0], f"{named[1]}/{port.port}", "node description"
        return None

    def facing(self, port: FabricPort) -> Optional[tuple]:
        """(host, HCA port, how) when the line's link leads to a host's HCA port."""
        link = port.link
        if link is None:
            return None
        found = self.by_port_guid.get(link.remote_guid) if link.remote_guid else None
        if found:
            return found[0], found[1], "the far end's port GUID"
        named = self.by_desc.get(link.remote_name.strip()) if link.remote_name else None
        if named and link.remote_port is not None:
            return named[0], f"{named[1]}/{link.remote_port}", "the far end's node description"
        return None


def judged_counters(port: FabricPort) -> dict:
    """The counters health_ib judges on a node's own port (VL15Dropped and the like are recorded only)."""
    return {c: n for c, n in port.counters.items() if c in health_ib.COUNTERS}


def _judged(port: FabricPort, previous: Optional[dict], minutes: Optional[float]) -> tuple:
    """([(status, text)], per-minute figures) of one fabric port's counters, by health_ib's judge.
    previous: the earlier reading of the same port ({counter: count}; {} when the earlier complete reading
    did not list it, i.e. every counter 0), None when there is none."""
    counters = judged_counters(port)
    before = None if previous is None else {c: previous.get(c, 0) for c in counters}
    findings, _, per_min = health_ib.counter_findings({"counters": counters}, RATES, CEILING, before or {},
                                                      minutes if before is not None else None)
    said = []
    for status, text in findings:
        text = text.replace("since driver load", "since the counters were last cleared")
        saturated = [c for c, n in counters.items() if n in SATURATED and text.startswith(c + " ")]
        said.append((status, text + (" (saturated: at least this many)" if saturated else "")))
    return said, per_min


def _switch_name(port: FabricPort) -> str:
    guid = guid_text(port.node_guid or port.port_guid)
    return f"{port.node_name} ({guid})" if port.node_name else guid


def host_port_result(host: str, hca: str, sides: list, previous: Optional[dict],
                     minutes: Optional[float]) -> CheckResult:
    """One HCA port of a host judged from the fabric's lines about it: sides = [(role, FabricPort, how)]
    with role "switch" (the switch port facing it) or "hca" (the port itself as the fabric reads it)."""
    check_id = f"{CHECK_ID}.{hca}"
    expected = (f"errors {CEILING.describe()} since cleared, or {RATES['errors'].describe()}/min and flaps "
                f"{RATES[health_ib.FLAP_COUNTER].describe()}/min since the last reading")
    findings, details, switch_side = [], {"source": "ibqueryerrors", "lines": []}, None
    for role, port, how in sides:
        # A port the earlier complete reading did not list had every counter at 0.
        judged, per_min = _judged(port, previous.get(port.key, {}) if previous is not None else None, minutes)
        details["lines"].append(dict(port.to_dict(), role=role, joined_by=how, counters_per_min=per_min or None))
        if role == "switch":
            where = f"switch {_switch_name(port)} port {port.port} facing {hca}"
            switch_side = switch_side or port
            if port.link is not None and (port.link.state, port.link.phys_state) != ("Active", "LinkUp"):
                judged.append((Status.WARN, f"link {port.link.state or '?'}/{port.link.phys_state or '?'}"))
        else:
            where = f"{hca} as the fabric reads it"
        if judged:  # one finding per side: its worst status, every counter it names
            worst = Status.FAIL if any(s is Status.FAIL for s, _ in judged) else Status.WARN
            findings.append((worst, f"{where}: " + ", ".join(text for _, text in judged)))
    details["thresholds"] = {"errors": CEILING.to_dict(), "errors_per_min": RATES["errors"].to_dict(),
                             "link_downed_per_min": RATES[health_ib.FLAP_COUNTER].to_dict()}
    if minutes is not None and previous is not None:
        details["interval_min"] = round(minutes, 3)
    if switch_side is not None:
        details["switch_port"] = {"switch": switch_side.node_name, "switch_guid": guid_text(
            switch_side.node_guid or switch_side.port_guid), "port": switch_side.port}
    if not findings:
        observed = "no error counter above zero" + (" on the switch port facing it" if switch_side else "")
        return CheckResult(check_id, ROLE, Status.PASS, expected, observed,
                           f"{host} {hca}: the fabric reports no error on it or the switch port it faces",
                           details=details)
    status = Status.FAIL if any(s is Status.FAIL for s, _ in findings) else Status.WARN
    details[verdicts.ACTION_KEY] = verdicts.DRAIN_RMA if status is Status.FAIL else verdicts.WATCH
    if status is Status.FAIL and switch_side is not None:
        fix = FIX_SWITCH_PORT.format(host=host, hca=hca, switch=_switch_name(switch_side), port=switch_side.port)
    elif status is Status.FAIL:
        fix = health_ib.RESEAT_CABLE.format(port=f"{host} {hca}")
    else:
        fix = verdicts.WORDS[verdicts.WATCH]
    texts = "; ".join(text for _, text in findings)
    return CheckResult(check_id, ROLE, status, expected, texts[:400], f"{host} {hca}: {texts}",
                       remediation=fix, details=details)


def fabric_records(fabric: FabricErrors, nodes: list, previous: Optional[dict], minutes: Optional[float]) -> tuple:
    """({host: [result dict]}, summary) for every host of the run."""
    index = HostIndex(nodes)
    sides: dict = {}  # (host, HCA port) -> [(role, FabricPort, how)]
    unjoined = []
    for port in fabric.ports:
        if port.port is None:
            continue  # "port ALL": a switch's sum over its ports, which face many hosts
        own = index.own(port)
        facing = None if own else index.facing(port)
        if own:
            sides.setdefault((own[0], own[1]), []).append(("hca", port, own[2]))
        elif facing:
            sides.setdefault((facing[0], facing[1]), []).append(("switch", port, facing[2]))
        elif judged_counters(port):
            unjoined.append(port)
    # Without -r no switch port names its far end: where some switch ports have errors, the side of the link
    # a host's port faces is not known, and a host with nothing else against it is "could not check".
    switch_unknown = bool(unjoined) and not any(p.link for p in fabric.ports)
    records = {}
    for node in nodes:
        results = []
        hca_ports = index.ports.get(node.host, [])
        if fabric.why_unreadable:
            results.append(CheckResult(CHECK_ID, ROLE, Status.ERROR, "ibqueryerrors output", "unreadable",
                                       f"{node.host}: the fabric capture could not be read: {fabric.why_unreadable}"))
        elif not hca_ports:
            results.append(CheckResult(CHECK_ID, ROLE, Status.SKIP, "an IB port", "none",
                                       f"{node.host}: its report lists no InfiniBand port (facts.ib_ports)"))
        for hca in hca_ports if not fabric.why_unreadable else []:
            said = sides.get((node.host, hca), [])
            judged = host_port_result(node.host, hca, said, previous, minutes)
            if judged.status is Status.PASS and not fabric.complete:
                judged = CheckResult(judged.check_id, ROLE, Status.ERROR, judged.expected, "not known",
                                     f"{node.host} {hca}: the ibqueryerrors output ends before its summary (cut "
                                     "short): a port it did not reach is not known clean", details=judged.details)
            elif judged.status is Status.PASS and switch_unknown:
                judged = CheckResult(judged.check_id, ROLE, Status.ERROR, judged.expected, "switch side not known",
                                     f"{node.host} {hca}: no error on the port itself, but the switch port it faces "
                                     f"is not named: {len(unjoined)} {WITHOUT_LINKS}", details=judged.details)
            results.append(judged)
        records[node.host] = [r.to_dict() for r in results]
    summary = {"complete": fabric.complete, "nodes_checked": fabric.nodes_checked,
               "ports_checked": fabric.ports_checked, "bad_ports": fabric.bad_ports,
               "pma_failures": fabric.pma_failures, "unreadable_lines": fabric.unreadable_lines,
               "why_unreadable": fabric.why_unreadable, "interval_min": minutes,
               "unjoined": [p.to_dict() for p in unjoined],
               "hosts": {host: sorted({r["status"] for r in recs}) for host, recs in records.items()}}
    if switch_unknown:
        summary["note"] = WITHOUT_LINKS
    return records, summary


def reading_time(value: object, now: float) -> Optional[float]:
    """A reading's time as a float when it is a plausible Unix time (TIME_FLOOR_S .. now + MAX_SKEW_S), else None:
    a bool, text, NaN, an infinity, an integer too large for a float, a date in the future or before 2001."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) and TIME_FLOOR_S <= seconds <= now + MAX_SKEW_S else None


def interval_min(before: object, read_at: object, now: float) -> tuple:
    """(minutes between an earlier reading and this one, "") or (None, why the interval is not known)."""
    earlier, later = reading_time(before, now), reading_time(read_at, now)
    if later is None:
        return None, f"this reading's time {str(read_at)[:40]} is not a Unix time up to now"
    if earlier is None:
        return None, f"the earlier reading's time {str(before)[:40]} is not a Unix time up to now"
    if not 0 <= later - earlier <= MAX_INTERVAL_S:
        return None, (f"the earlier reading is {later - earlier:.0f} s before this one (0 to {MAX_INTERVAL_S} s "
                      "make a rate)")
    return (later - earlier) / 60.0, ""


def snapshot_of(fabric: FabricErrors, read_at: float) -> dict:
    """What the next run compares against: every listed port's counters (a port not listed read 0)."""
    return {"read_at": read_at, "complete": fabric.complete,
            "ports": {p.key: dict(p.counters) for p in fabric.ports if p.port is not None}}


def previous_reading(run_dir: str) -> tuple:
    """(ports {key: counters}, read_at) of the newest earlier run beside this one that kept a complete fabric
    reading; (None, None) when none did. Run directories are named by their UTC start (verify.fleet.rundir)."""
    parent, own = os.path.split(os.path.abspath(run_dir))
    try:
        names = sorted((n for n in os.listdir(parent) if n < own and is_plain_component(n)), reverse=True)
    except OSError:
        return None, None
    for name in names[:64]:
        path = os.path.join(parent, name, FABRIC_DIR, READING_NAME)
        if not os.path.isfile(path):
            continue
        try:
            data = load_json_bounded(path, what="an earlier fabric reading")
        except (OSError, BoundedLoadError):
            continue
        if not isinstance(data, dict):
            continue
        ports, read_at = data.get("ports"), data.get("read_at")
        if isinstance(ports, dict) and data.get("complete") is True:
            clean = {str(k): {str(c): n for c, n in v.items() if isinstance(n, int) and not isinstance(n, bool)}
                     for k, v in ports.items() if isinstance(v, dict)}
            return clean, read_at  # judged by interval_min: any JSON value, never converted here
    return None, None


def collect(run_dir: str, capture: str, read_at: float, ibdiagnet: str = "", failed: str = "",
            now: Optional[float] = None) -> dict:
    """Judge one capture against the run's node reports and write every host's crossnode result. failed: why
    no capture could be had (the tool failed, the file was refused): every host then says so (ERROR). now: the
    clock the reading times are held to (default the controller's)."""
    now = time.time() if now is None else now
    fabric = FabricErrors(why_unreadable=failed) if failed else parse_ibqueryerrors(capture)
    nodes, _ = load_fleet_dir(run_dir)
    previous, before = previous_reading(run_dir)
    minutes, no_interval = interval_min(before, read_at, now) if previous is not None else (None, "")
    records, summary = fabric_records(fabric, nodes, previous if minutes is not None else None, minutes)
    if no_interval:
        summary["interval_unknown"] = f"{no_interval}: counters judged as counts since they were last cleared"
    if ibdiagnet:
        summary["ibdiagnet"] = [vars(stage) for stage in parse_ibdiagnet_summary(ibdiagnet)]
    for host, host_records in records.items():
        if not is_plain_component(host):
            raise ValueError(f"host name {host!r} cannot name a report directory")
        write_file_atomic(os.path.join(run_dir, host, CROSSNODE_NAME), json.dumps(host_records, indent=1),
                          create_dir=True)
    fabric_dir = os.path.join(run_dir, FABRIC_DIR)
    if fabric.complete and reading_time(read_at, now) is not None:  # a reading of no plausible time is not kept
        write_file_atomic(os.path.join(fabric_dir, READING_NAME), json.dumps(snapshot_of(fabric, read_at)),
                          create_dir=True)
    write_file_atomic(os.path.join(fabric_dir, SUMMARY_NAME), json.dumps(summary, indent=1), create_dir=True)
    summary["records"] = records
    return summary


def _read_at(text: str) -> float:
    """--read-at: a Unix time from 2001 up to now (argparse names the option and the value when refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a Unix time") from None
    if reading_time(value, time.time()) is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a Unix time between {TIME_FLOOR_S} and now")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.ib_fabric",
                                     description="judge the fabric side of every host's IB links (ibqueryerrors -r)")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("collect", help="join an ibqueryerrors capture to a fleet run and write each host's result")
    p.add_argument("--run-dir", required=True, help="the fleet run directory (<run>/<host>/report.json)")
    p.add_argument("--input", required=True, help="the output of `ibqueryerrors -r` (captured or pasted)")
    p.add_argument("--ibdiagnet", default="", help="optional: ibdiagnet's screen output, for its stage table")
    p.add_argument("--read-at", type=_read_at, default=None,
                   help="when the capture was taken (Unix time, up to now; default now)")
    p.add_argument("--tool-failed", default="", help="why ibqueryerrors gave no capture (the playbook passes its exit "
                   "status and stderr): each host's result says so instead of judging --input")
    args = parser.parse_args(argv)
    # A capture that cannot be had or read costs this check only: every host gets an ERROR naming why, and the
    # fleet report is still built (exit 1).
    failed = f"ibqueryerrors could not read the fabric: {args.tool_failed[:300]}" if args.tool_failed else ""
    capture = ibdiagnet = ""
    try:
        if not failed:
            capture = read_trusted_file(args.input, MAX_CAPTURE_BYTES)
    except OSError as exc:
        failed = f"--input {args.input}: {exc.strerror or exc}"
    try:
        ibdiagnet = read_trusted_file(args.ibdiagnet, MAX_CAPTURE_BYTES) if args.ibdiagnet else ""
    except OSError as exc:  # the stage table is a note beside the check: its loss costs only itself
        print(f"ib_fabric collect: --ibdiagnet {args.ibdiagnet}: {exc.strerror or exc}", file=sys.stderr)
    read_at = args.read_at if args.read_at is not None else time.time()
    try:
        summary = collect(args.run_dir, capture, read_at, ibdiagnet, failed)
    except (OSError, ValueError) as exc:
        print(f"ib_fabric collect: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 2
    if failed:
        print(f"ERROR: {failed}", file=sys.stderr)
    for _host, recs in sorted(summary["records"].items()):
        for rec in recs:
            if rec["status"] not in ("PASS", "SKIP"):
                print(for_terminal(f"{rec['status']}: {rec['reason']}"))
    for port in summary["unjoined"]:  # a switch's node description is whatever its firmware was given
        print(for_terminal(f"UNJOINED: {port['node_name']} {port['port_guid']} port {port['port']}: "
                           f"{port['counters']}"))
    if summary.get("note"):
        print(f"NOTE: {summary['note']}")
    if summary.get("interval_unknown"):
        print(f"NOTE: {summary['interval_unknown']}")
    for stage in summary.get("ibdiagnet", []):
        if stage["errors"]:
            print(f"IBDIAGNET: stage {stage['stage']}: {stage['errors']} errors, {stage['warnings']} warnings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
