"""Which NICs the network role tunes: the named ones plus those matching driver / PCI globs."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Optional

from verify.node import Node


@dataclass
class Selection:
    present: list  # interface names to check
    missing: list  # named in network_interfaces but absent on the node


def interface_driver(node: Node, name: str):
    return node.readlink_name(f"/sys/class/net/{name}/device/driver")


def interface_pci(node: Node, name: str):
    return node.readlink_name(f"/sys/class/net/{name}/device")


def select_interfaces(network: dict, node: Node) -> Selection:
    named = [str(n) for n in (network.get("interfaces") or [])]
    match = network.get("interface_match") or {}
    all_present = [n for n in node.listdir("/sys/class/net") if n != "lo"]
    chosen = [n for n in named if n in all_present]
    missing = [n for n in named if n not in all_present]
    driver_glob = match.get("driver")
    pci_glob = match.get("pci")
    if driver_glob or pci_glob:
        for name in all_present:
            if name in chosen:
                continue
            if driver_glob and not fnmatch.fnmatch(interface_driver(node, name) or "", str(driver_glob)):
                continue
            if pci_glob and not fnmatch.fnmatch(interface_pci(node, name) or "", str(pci_glob)):
                continue
            chosen.append(name)
    return Selection(chosen, missing)


def nothing_selected_reason(selection: Optional[Selection] = None) -> str:
    """Why a NIC check has no NIC to judge (it SKIPs: a check needs the hardware it judges)."""
    if selection is not None and selection.missing:
        return (f"no interface selected: {', '.join(selection.missing)} named in network_interfaces "
                f"{'is' if len(selection.missing) == 1 else 'are'} not on this node and network_interface_match "
                "matches none")
    return "no interface selected (network_interfaces is empty and network_interface_match matches none)"
