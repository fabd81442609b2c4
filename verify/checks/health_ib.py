"""InfiniBand / RoCE ports from /sys/class/infiniband: state ACTIVE, physical state LinkUp, rate at
the expected rate, error counters under a ceiling. One result per port.

Without a profile rate (`ib_port_rate_gbps`), a port slower than the fastest port of the same link
layer on this node is a WARN: mixed NICs are legitimate, a port trained down is not.
"""
from __future__ import annotations

import re
from typing import Optional

from verify.checks.common import result, skip
from verify.checks.health_common import ROLE, threshold
from verify.judging.thresholds import Threshold
from verify.node import Node
from verify.result import Status

COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "link_error_recovery",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors")
# rdma-core's ibqueryerrors(8) ships SymbolErrorCounter=10 / LinkErrorRecoveryCounter=10 as its
# example error_thresholds; any error at all is a WARN.
DERIVED_ERRORS = Threshold(limit=10, warn=0, kind="max", source=(
    "derived: rdma-core ibqueryerrors(8) example error_thresholds (SymbolErrorCounter=10, "
    "LinkErrorRecoveryCounter=10); any error is a WARN"))
RESEAT_CABLE = ("drain the node, reseat or replace the cable / transceiver of {port}, check the switch port; "
                "RMA the HCA if it stays")
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


def parse_rate(text: Optional[str]) -> Optional[float]:
    """'400 Gb/sec (4X NDR)' -> 400.0."""
    match = _RATE.match(text or "")
    return float(match.group(1)) if match else None


def _state_name(text: Optional[str]) -> str:
    """'4: ACTIVE' -> 'ACTIVE', '5: LinkUp' -> 'LinkUp'."""
    return (text or "").split(":", 1)[-1].strip()


def read_port(node: Node, device: str, port: str) -> dict:
    base = f"/sys/class/infiniband/{device}/ports/{port}"
    counters = {}
    for name in COUNTERS:
        value = node.read_value(f"{base}/counters/{name}")
        if value is not None and value.isdigit():
            counters[name] = int(value)
    return {"port": f"{device}/{port}", "state": _state_name(node.read_value(f"{base}/state")),
            "phys_state": _state_name(node.read_value(f"{base}/phys_state")),
            "rate_gbps": parse_rate(node.read_value(f"{base}/rate")),
            "link_layer": node.read_value(f"{base}/link_layer") or "InfiniBand", "counters": counters}


def judge_port(port: dict, rate: Threshold, ceiling: Threshold, strict: bool):
    """strict: RDMA is expected on this node (gpu_rdma_expected or a profile rate), so a port down
    or slow is a FAIL; otherwise an unused port of a dual-port NIC is only a WARN."""
    check_id = f"health.ib.{port['port']}"
    name = f"port {port['port']} ({port['link_layer']})"
    if port["phys_state"] == "Disabled":
        return skip(check_id, ROLE, f"{name} is disabled (phys_state Disabled): not in use")
    fix = RESEAT_CABLE.format(port=port["port"])
    down = Status.FAIL if strict else Status.WARN
    findings = []
    if port["state"] != "ACTIVE":
        findings.append((down, f"state {port['state'] or '?'}, not ACTIVE"))
    if port["phys_state"] != "LinkUp":
        findings.append((down, f"physical state {port['phys_state'] or '?'}, not LinkUp"))
    observed_rate = port["rate_gbps"]
    if observed_rate is not None and port["state"] == "ACTIVE":
        status, why = rate.judge(observed_rate)
        if status is not Status.PASS:
            status = status if strict else Status.WARN
            findings.append((status, f"rate {observed_rate:g} Gb/s: {why}"))
    for counter, count in sorted(port["counters"].items()):
        status, _ = ceiling.judge(count)
        if status is not Status.PASS:
            findings.append((status, f"{counter} {count}"))
    details = dict(port, thresholds={"rate": rate.to_dict(), "errors": ceiling.to_dict()})
    expected = f"ACTIVE, LinkUp, {rate.describe()} Gb/s, errors {ceiling.describe()}"
    observed = f"{port['state']}, {port['phys_state']}, {observed_rate if observed_rate is not None else '?'} Gb/s"
    if not findings:
        return result(check_id, ROLE, Status.PASS, expected, observed, details=details)
    status = Status.FAIL if any(s is Status.FAIL for s, _ in findings) else Status.WARN
    return result(check_id, ROLE, status, expected, observed, f"{name}: " + "; ".join(t for _, t in findings),
                  details=details, fix=fix)


def run(spec: dict, node: Node) -> list:
    ports = [read_port(node, device, port) for device in node.listdir("/sys/class/infiniband")
             for port in node.listdir(f"/sys/class/infiniband/{device}/ports")]
    if not ports:
        return [skip("health.ib", ROLE, "no RDMA device in /sys/class/infiniband")]
    ceiling = threshold("ib_port_error_count", spec, node, DERIVED_ERRORS)
    configured = threshold("ib_port_rate_gbps", spec, node, None)
    strict = configured is not None or bool((spec.get("gpu") or {}).get("rdma_expected"))
    results = []
    for port in ports:
        rate = configured
        if rate is None:
            peers = [p["rate_gbps"] for p in ports if p["link_layer"] == port["link_layer"] and p["rate_gbps"]]
            rate = Threshold(limit=max(peers, default=1e-9), kind="min",
                             source=f"derived: the fastest {port['link_layer']} port of this node")
        results.append(judge_port(port, rate, ceiling, strict))
    return results
