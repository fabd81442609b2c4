"""MTU per tuned interface: /sys/class/net/<if>/mtu against network_mtu."""
from __future__ import annotations

from verify.checks.common import result, role_disabled, section, skip
from verify.checks.interfaces import nothing_selected_reason, select_interfaces
from verify.node import Node
from verify.result import Status

ROLE = "network"


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, "network.mtu")
    if disabled:
        return [disabled]
    network = section(spec, ROLE)
    expected = network.get("mtu")
    if not expected:
        return [skip("network.mtu", ROLE, "network_mtu is not set")]
    selection = select_interfaces(network, node)
    results = [
        result(f"network.mtu.{name}", ROLE, Status.FAIL, expected, None,
               f"interface {name} named in network_interfaces is not present", "network_interfaces")
        for name in selection.missing
    ]
    for name in selection.present:
        observed = node.read_int(f"/sys/class/net/{name}/mtu")
        status = Status.PASS if observed == int(expected) else Status.FAIL
        reason = "" if status is Status.PASS else f"{name} has MTU {observed}, the desired state says {expected}"
        results.append(result(f"network.mtu.{name}", ROLE, status, int(expected), observed, reason, "network_mtu"))
    if not results:
        results.append(skip("network.mtu", ROLE, nothing_selected_reason(), expected))
    return results
