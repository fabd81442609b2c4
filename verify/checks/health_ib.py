"""InfiniBand / RoCE ports from /sys/class/infiniband, judged against their siblings: one result per port.

Ports are grouped by HCA model (`hca_type`, e.g. MT4129 = ConnectX-7, with `board_id` where sysfs gives
it) and link layer. Within a group:
- a port not ACTIVE / LinkUp (Down, Disabled, Polling, Init) while a sibling is Active is FAIL naming it,
  unless the desired state lists it as unused (`verify.unused_ports`: "mlx5_2/1", or "mlx5_2" for every
  port of the device). rdma-core's ibcheckstate(8) reports "any ports which have a port state other than
  Active or a port physical state other than LinkUp"; Polling is the port looking for a link partner
  (cable, transceiver or switch port), Disabled a port shut by command or by its firmware (NVIDIA
  MLNX-OS "Link Diagnostic Per Port": "Port is close by command", cable / signal-integrity codes). The
  action is `drain-rma` of the cable / transceiver: reseat it first, replace it, then the HCA.
- the group's own fastest Active port is the rate bar (a 100G NIC beside 400G HCAs is another group and
  is not flagged); the profile rate (`ib_port_rate_gbps`) raises the bar of the node's fastest group only.
- a group with no Active port at all: Disabled is SKIP (not in use); otherwise FAIL where RDMA is expected
  (`gpu.rdma_expected` or a profile rate), else WARN.
Error counters are judged per port as a rate: the increase since the last check per minute of the interval
(node.memo["previous_counters"], key "health.ib.<dev>/<port>": {counter: count}, and when it was read:
health_common.remember_previous) against `ib_port_errors_per_min`, link flaps (`link_downed`) against
`ib_link_downed_per_min`; with no earlier reading (or after a driver reload: a count went down) the count
since the driver loaded against the ceiling `ib_port_error_count`.
"""
from __future__ import annotations

import re
from typing import Optional

from verify.checks.common import result, skip
from verify.checks.health_common import PREVIOUS_COUNTERS, ROLE, interval_min, judge_counter, threshold
from verify.facts.ib_counters import parse_perfquery
from verify.judging import verdicts
from verify.judging.thresholds import Threshold
from verify.node import Node
from verify.result import Status

COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "link_error_recovery",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors", "port_rcv_remote_physical_errors",
            "port_xmit_discards", "port_xmit_constraint_errors", "port_rcv_constraint_errors",
            "port_rcv_switch_relay_errors")
# Not a fault of the link: discards and constraint errors are congestion or partition/filter drops (a WARN to
# watch, never a cable FAIL); switch relay errors are rdma-core ibqueryerrors' one "common side effect"
# counter (`--suppress-common`): recorded, not judged.
CONGESTION = ("port_xmit_discards", "port_xmit_constraint_errors", "port_rcv_constraint_errors")
RECORDED_ONLY = ("port_rcv_switch_relay_errors",)
PERFQUERY_ARGV = ["perfquery", "-x", "-C", "{device}", "-P", "{port}"]
# rdma-core's ibqueryerrors(8) ships SymbolErrorCounter=10 / LinkErrorRecoveryCounter=10 as its
# example error_thresholds; any error at all is a WARN.
DERIVED_ERRORS = Threshold(limit=10, warn=0, kind="max", source=(
    "derived: rdma-core ibqueryerrors(8) example error_thresholds (SymbolErrorCounter=10, "
    "LinkErrorRecoveryCounter=10); any error is a WARN"))
# Per minute of the interval since the last check (health_common.judge_counter). A compliant link (BER better
# than 10^-12) shows at most 120 symbol errors an hour (IBTA, as Oracle's "Determine Which Links Are
# Experiencing Significant Errors" cites it; NVSentinel's NIC health monitor design takes the same bound as
# its predictor of link failure): above 2 a minute FAIL, any error in the interval a WARN.
DERIVED_ERRORS_PER_MIN = Threshold(limit=2.0, warn=0, kind="max", source=(
    "derived: IBTA's 120 symbol errors per hour (BER 10^-12), 2 per minute; any error is a WARN"))
# A flap (link_downed + 1) breaks the queue pairs of every job on the port: NVSentinel's NIC health monitor
# makes any increase fatal, Azure's HPC health checks fail a node with an IB link flap in the last 6 hours.
# As a rate: more than one flap per 6 hours FAILs (so one flap in a shorter interval does), one flap in a
# longer interval is a WARN.
DERIVED_FLAPS_PER_MIN = Threshold(limit=round(1 / 360, 5), warn=0, kind="max", source=(
    "derived: Azure HPC health checks (no IB link flap in 6 hours) and NVSentinel (any link_downed increase "
    "fatal): above 1 flap per 6 hours; any flap is a WARN"))
FLAP_COUNTER = "link_downed"
RESEAT_CABLE = ("drain the node, reseat or replace the cable / transceiver of {port}, check the switch port; "
                "RMA the HCA if it stays")
# sysfs prints "%d%s Gb/sec (%dX %s)" (drivers/infiniband/core/sysfs.c rate_show): a few digits, ".5"/".125"
_RATE = re.compile(r"^\s*(\d{1,6}(?:\.\d{1,6})?)\s*Gb/sec", re.ASCII)


def parse_rate(text: object) -> Optional[float]:
    """'400 Gb/sec (4X NDR)' -> 400.0; None when unreadable (anything else, a zero rate). Total on any input."""
    match = _RATE.match(text) if isinstance(text, str) else None
    rate = float(match.group(1)) if match else 0.0
    return rate if rate > 0 else None


def _state_name(text: Optional[str]) -> str:
    """'4: ACTIVE' -> 'ACTIVE', '5: LinkUp' -> 'LinkUp'."""
    return (text or "").split(":", 1)[-1].strip()


def read_port(node: Node, device: str, port: str) -> dict:
    base = f"/sys/class/infiniband/{device}/ports/{port}"
    counters = {}
    for name in COUNTERS:
        value = node.read_value(f"{base}/counters/{name}")
        if value is not None and value.isascii() and value.isdigit() and len(value) <= 20:
            counters[name] = int(value)
    source = "sysfs"
    if not counters:  # no sysfs counters (a tree, a container): the tool's own view, live or injected
        argv = [arg.format(device=device, port=port) for arg in PERFQUERY_ARGV]
        out = node.run(argv, timeout_s=10.0)
        tool = parse_perfquery(out.stdout) if out.ok else []
        if tool:
            counters = {k: v for k, v in tool[0].counters.items() if k in COUNTERS}
            source = " ".join(argv)
    model = " ".join(part for part in (node.read_value(f"/sys/class/infiniband/{device}/hca_type"),
                                       node.read_value(f"/sys/class/infiniband/{device}/board_id")) if part)
    return {"port": f"{device}/{port}", "state": _state_name(node.read_value(f"{base}/state")),
            "phys_state": _state_name(node.read_value(f"{base}/phys_state")),
            "rate_gbps": parse_rate(node.read_value(f"{base}/rate")),
            "link_layer": node.read_value(f"{base}/link_layer") or "InfiniBand", "counters": counters,
            "counters_source": source, "hca_model": model or "unknown HCA"}


def _is_active(port: dict) -> bool:
    return port["state"] == "ACTIVE" and port["phys_state"] == "LinkUp"


def _group(port: dict) -> tuple:
    return port["hca_model"], port["link_layer"]


def _unused(port: dict, unused: list) -> bool:
    device = port["port"].split("/", 1)[0]
    return port["port"] in unused or device in unused


def counter_findings(port: dict, rates: dict, ceiling: Threshold, previous: dict, minutes) -> tuple:
    """([(status, text)], {counter: since driver load}, {counter: per minute}) where a previous reading is
    known. rates: {"errors": Threshold per minute, "link_downed": the flaps' Threshold per minute}. The one
    judge of IB port counters: this node's ports here, the switch ports facing them in verify.fleet.ib_fabric."""
    findings, since_load, per_min = [], {}, {}
    for counter, count in sorted(port["counters"].items()):
        if counter in RECORDED_ONLY:
            continue
        rate = rates[FLAP_COUNTER] if counter == FLAP_COUNTER else rates["errors"]
        verdict = judge_counter(counter, count, previous.get(counter), minutes, rate, ceiling)
        if verdict.increase is not None:
            since_load[counter] = count
        if verdict.per_min is not None:
            per_min[counter] = round(verdict.per_min, 4)
        if verdict.status is not Status.PASS:
            congestion = counter in CONGESTION
            findings.append((Status.WARN if congestion else verdict.status,
                             verdict.text + (" (congestion or filtering, not the cable)" if congestion else "")))
    return findings, since_load, per_min


def judge_port(port: dict, rate: Threshold, ceiling: Threshold, strict: bool, group_active: bool = False,
               unused: bool = False, previous: Optional[dict] = None, minutes: Optional[float] = None,
               rates: Optional[dict] = None):
    """group_active: a sibling port of the same HCA model and link layer is Active, so this one should be
    too. strict: RDMA is expected on this node, so a port down in a group with none up is a FAIL. minutes:
    since the previous reading (previous), whose increase is judged per minute against rates."""
    rates = rates or {"errors": DERIVED_ERRORS_PER_MIN, FLAP_COUNTER: DERIVED_FLAPS_PER_MIN}
    check_id = f"health.ib.{port['port']}"
    name = f"port {port['port']} ({port['hca_model']}, {port['link_layer']})"
    if unused:
        return skip(check_id, ROLE, f"{name}: listed in verify.unused_ports")
    if port["phys_state"] == "Disabled" and not group_active:
        return skip(check_id, ROLE, f"{name} is disabled (phys_state Disabled) and so is every port of its model: "
                    "not in use")
    findings = []  # (status, text)
    if not _is_active(port):
        down = Status.FAIL if (strict or group_active) else Status.WARN
        said = f"state {port['state'] or '?'}, physical state {port['phys_state'] or '?'}"
        findings.append((down, said + (" while its sibling ports are Active" if group_active else "")))
    observed_rate = port["rate_gbps"]
    if observed_rate is not None and _is_active(port):
        status, why = rate.judge(observed_rate)
        if status is not Status.PASS:
            findings.append((Status.FAIL, f"rate {observed_rate:g} Gb/s: {why}"))
    counted, since_load, per_min = counter_findings(port, rates, ceiling, previous or {}, minutes)
    findings += counted
    details = dict(port, thresholds={"rate": rate.to_dict(), "errors": ceiling.to_dict()})
    if since_load:
        details["counters_since_driver_load"] = since_load
    if per_min:  # the rate thresholds are shown where they judged something
        details["counters_per_min"] = per_min
        details["counters_interval_min"] = round(minutes, 3)
        details["thresholds"].update(errors_per_min=rates["errors"].to_dict(),
                                     link_downed_per_min=rates[FLAP_COUNTER].to_dict())
    errors = (f"errors {rates['errors'].describe()}/min, flaps {rates[FLAP_COUNTER].describe()}/min" if per_min
              else f"errors {ceiling.describe()}")
    expected = f"ACTIVE, LinkUp, {rate.describe()} Gb/s, {errors}"
    observed = f"{port['state']}, {port['phys_state']}, {observed_rate if observed_rate is not None else '?'} Gb/s"
    if not findings:
        return result(check_id, ROLE, Status.PASS, expected, observed, details=details)
    status = Status.FAIL if any(s is Status.FAIL for s, _ in findings) else Status.WARN
    # A port down or slow, or erroring past the ceiling: the cable / transceiver first, then the HCA (drain).
    # A few errors: look again at the next run.
    details[verdicts.ACTION_KEY] = verdicts.DRAIN_RMA if status is Status.FAIL else verdicts.WATCH
    fix = RESEAT_CABLE.format(port=port["port"]) if status is Status.FAIL else verdicts.WORDS[verdicts.WATCH]
    return result(check_id, ROLE, status, expected, observed, f"{name}: " + "; ".join(t for _, t in findings),
                  details=details, fix=fix)


def group_bars(ports: list, configured: Optional[Threshold]) -> dict:
    """{(HCA model, link layer): rate floor}: the group's own fastest Active port; the profile's rate for
    the node's fastest group (the fabric the profile describes), never for a slower NIC beside it."""
    fastest: dict = {}
    for port in ports:
        if _is_active(port) and port["rate_gbps"]:
            fastest[_group(port)] = max(fastest.get(_group(port), 0.0), port["rate_gbps"])
    top = max(fastest.values(), default=0.0)
    bars = {}
    for group in {_group(port) for port in ports}:
        own = fastest.get(group)
        if configured is not None and (own is None or own >= top):
            bars[group] = configured
        else:
            bars[group] = Threshold(limit=own or 1e-9, kind="min", source=(
                f"derived: the fastest Active port of the {group[0]} {group[1]} ports of this node"))
    return bars


def run(spec: dict, node: Node) -> list:
    ports = [read_port(node, device, port) for device in node.listdir("/sys/class/infiniband")
             for port in node.listdir(f"/sys/class/infiniband/{device}/ports")]
    if not ports:
        return [skip("health.ib", ROLE, "no RDMA device in /sys/class/infiniband")]
    ceiling = threshold("ib_port_error_count", spec, node, DERIVED_ERRORS)
    rates = {"errors": threshold("ib_port_errors_per_min", spec, node, DERIVED_ERRORS_PER_MIN),
             FLAP_COUNTER: threshold("ib_link_downed_per_min", spec, node, DERIVED_FLAPS_PER_MIN)}
    minutes = interval_min(node)
    configured = threshold("ib_port_rate_gbps", spec, node, None)
    strict = configured is not None or bool((spec.get("gpu") or {}).get("rdma_expected"))
    unused = [str(item) for item in ((spec.get("verify") or {}).get("unused_ports") or [])]
    previous = node.memo.get(PREVIOUS_COUNTERS) or {}
    bars = group_bars(ports, configured)
    active_groups = {_group(port) for port in ports if _is_active(port) and not _unused(port, unused)}
    return [judge_port(port, bars[_group(port)], ceiling, strict, _group(port) in active_groups,
                       _unused(port, unused), previous.get(f"health.ib.{port['port']}") or {}, minutes, rates)
            for port in ports]
