# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""Filters for the network role: MTU and IRQ-affinity plans from the NICs preflight found
(module_utils/nics.py), ethtool ring/channel changes."""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import KernelRuleError, parse_cpulist

# ethtool -g / -l labels -> the argument names ethtool -G / -L take
_ETHTOOL_KEYS = {
    "RX": "rx",
    "RX Mini": "rx-mini",
    "RX Jumbo": "rx-jumbo",
    "TX": "tx",
    "Other": "other",
    "Combined": "combined",
}


def _cpus(cpulist: str) -> set:
    try:
        return parse_cpulist(cpulist)
    except KernelRuleError as exc:
        raise AnsibleFilterError(f"network_irq_plan: a NIC's local_cpulist is not a CPU list ({exc})") from None


def network_mtu_values(nics: list, mtu: int) -> dict:
    return {f"/sys/class/net/{nic['name']}/mtu": int(mtu) for nic in nics}


def network_irq_plan(nics: list) -> dict:
    """Each NIC IRQ -> the CPUs local to that NIC's NUMA node (device/local_cpulist), as smp_affinity_list writes.

    An IRQ shared by two selected NICs with different local CPUs cannot be pinned to both: refuse rather than guess.
    """
    plan, owner = {}, {}
    for nic in sorted(nics, key=lambda nic: nic["name"]):
        cpulist = (nic.get("local_cpulist") or "").strip()
        if not cpulist:
            continue
        for irq in nic.get("irqs") or []:
            path = f"/proc/irq/{int(irq)}/smp_affinity_list"
            if path in plan and _cpus(plan[path]) != _cpus(cpulist):
                raise AnsibleFilterError(
                    f"IRQ {irq} is shared by {owner[path]} (local CPUs {plan[path]}) and {nic['name']} "
                    f"(local CPUs {cpulist}); list only one of them in network_interfaces"
                )
            plan[path] = cpulist
            owner[path] = nic["name"]
    return plan


def network_irq_unpinnable(nics: list) -> list:
    """NICs with no PCI IRQs or no local CPU list (veth, dummy, bonds): nothing to pin."""
    return [nic["name"] for nic in nics if not nic.get("irqs") or not nic.get("local_cpulist")]


# A ring or channel count: ASCII digits, bounded before int() (a 5000-digit value raised ValueError).
_COUNT = re.compile(r"[0-9]{1,10}")


def network_ethtool_parse(text: str) -> dict:
    """`ethtool -g IF` or `ethtool -l IF` -> {'maximums': {...}, 'current': {...}}; n/a values are None.

    Total: a value that is not a count of at most 10 digits is None, as ethtool's own "n/a" (the NIC then
    cannot be set to it: network_ethtool_args refuses by name); text that is not a string is refused."""
    if not isinstance(text, str):
        raise AnsibleFilterError(f"network_ethtool_parse: ethtool's output is {type(text).__name__}, not text")
    sections = {"maximums": {}, "current": {}}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Pre-set maximums"):
            section = "maximums"
        elif stripped.startswith("Current hardware settings"):
            section = "current"
        elif section and ":" in stripped:
            label, value = (part.strip() for part in stripped.split(":", 1))
            if label in _ETHTOOL_KEYS:
                sections[section][_ETHTOOL_KEYS[label]] = int(value) if _COUNT.fullmatch(value) else None
    return sections


def network_ethtool_args(text: str, wanted: dict, interface: str = "") -> list:
    """The `ethtool -G/-L` arguments still needed to reach `wanted`; refuses values the NIC cannot take."""
    parsed = network_ethtool_parse(text)
    args = []
    for key, value in sorted((wanted or {}).items()):
        if key not in _ETHTOOL_KEYS.values():
            known = sorted(_ETHTOOL_KEYS.values())
            raise AnsibleFilterError(f"{interface}: unknown ethtool parameter {key!r} (use {known})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise AnsibleFilterError(f"{interface}: {key}={value!r} must be a non-negative integer")
        maximum = parsed["maximums"].get(key)
        if maximum is None:
            raise AnsibleFilterError(f"{interface}: the NIC does not support setting {key} (ethtool reports n/a)")
        if value > maximum:
            raise AnsibleFilterError(f"{interface}: {key}={value} exceeds the NIC's maximum {maximum}")
        if parsed["current"].get(key) != value:
            args.extend([key, str(value)])
    return args


class FilterModule:
    def filters(self):
        return {
            "network_mtu_values": network_mtu_values,
            "network_irq_plan": network_irq_plan,
            "network_irq_unpinnable": network_irq_unpinnable,
            "network_ethtool_parse": network_ethtool_parse,
            "network_ethtool_args": network_ethtool_args,
        }
