"""Who is to blame when path MTU fails between hosts: the one host everybody fails to reach.

Each host pings every other at the full MTU (network.path_mtu.<address>). A single host whose
interface or switch port is left at 1500 makes every *other* host fail its check towards it,
so, read node by node, the whole fleet looks bad. Read across the fleet, the failures point at
one address: that host is blamed (FAIL), and the others' failures towards it become WARN with
the blamed host named.
"""
from __future__ import annotations

from dataclasses import replace

from verify.result import CheckResult, Status

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
