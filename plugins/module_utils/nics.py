# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""The cluster NICs, by name or by driver/PCI glob, with what the network role plans with (NUMA
node, local CPUs, MSI IRQs, MTU, driver, PCI address) and how the node persists network settings
(netplan, NetworkManager, systemd-networkd, ifupdown). Read by preflight once, before any role
(node_reads.py). Reads only. Standard library only: this runs on the node's own python3."""
from __future__ import annotations

import fnmatch
import glob
import os
import re
import shutil

from ansible_collections.tunefleet.gpu_node.plugins.module_utils.sysfs import read_text

BACKENDS = ("auto", "netplan", "networkmanager", "networkd", "ifupdown", "none")
MATCH_KEYS = ("driver", "pci")


def pci_device_dir(device_dir: str):
    """The PCI function behind a netdev: the device itself (mlx5, ice) or its parent (virtio_net)."""
    candidate = os.path.realpath(device_dir)
    for _ in range(2):
        if os.path.basename(os.path.realpath(os.path.join(candidate, "subsystem"))) == "pci":
            return candidate
        candidate = os.path.dirname(candidate)
    return None


def read_nic(sysfs_root: str, name: str) -> dict:
    netdir = os.path.join(sysfs_root, "class", "net", name)
    device = os.path.join(netdir, "device")
    driver_link = os.path.join(device, "driver")
    pci = pci_device_dir(device) if os.path.exists(device) else None
    numa = read_text(os.path.join(pci, "numa_node")) if pci else None
    try:
        irqs = sorted(int(entry) for entry in os.listdir(os.path.join(pci, "msi_irqs"))) if pci else []
    except (OSError, ValueError):
        irqs = []
    mtu = read_text(os.path.join(netdir, "mtu"))
    return {
        "name": name,
        "driver": os.path.basename(os.path.realpath(driver_link)) if os.path.exists(driver_link) else None,
        "pci_address": os.path.basename(pci) if pci else None,
        "numa_node": int(numa) if numa and re.fullmatch(r"-?[0-9]{1,6}", numa) else -1,
        "local_cpulist": read_text(os.path.join(pci, "local_cpulist")) if pci else None,
        "irqs": irqs,
        "mtu": int(mtu) if mtu and re.fullmatch(r"[0-9]{1,9}", mtu) else None,
        "type": read_text(os.path.join(netdir, "type")),
    }


def matches(nic: dict, match: dict) -> bool:
    """Both globs must match when both are set; an empty match selects nothing."""
    checks = [(key, match.get(key)) for key in ("driver", "pci") if match.get(key)]
    if not checks:
        return False
    fields = {"driver": nic.get("driver"), "pci": nic.get("pci_address")}
    return all(fields[key] is not None and fnmatch.fnmatchcase(fields[key], pattern) for key, pattern in checks)


def select_nics(sysfs_root: str, names: list, match: dict) -> tuple:
    present = sorted(os.listdir(os.path.join(sysfs_root, "class", "net")))
    missing = [name for name in names if name not in present]
    selected = []
    for name in present:
        nic = read_nic(sysfs_root, name)
        if name in names or matches(nic, match):
            selected.append(nic)
    return selected, missing


def detect_backend(etc_root: str, active_services: set, has_binary) -> str:
    """The first network stack that owns this node's configuration, in the order a distro layers them."""
    netplan_files = glob.glob(os.path.join(etc_root, "netplan", "*.yaml")) + glob.glob(
        os.path.join(etc_root, "netplan", "*.yml")
    )
    if netplan_files and has_binary("netplan"):
        return "netplan"
    if "NetworkManager" in active_services:
        return "networkmanager"
    if "systemd-networkd" in active_services:
        return "networkd"
    if os.path.exists(os.path.join(etc_root, "network", "interfaces")) and has_binary("ifup"):
        return "ifupdown"
    return "none"


_NETWORK_FILE = re.compile(r"^\s*Network File:\s*(\S+)\s*$", re.MULTILINE)


def parse_networkd_file(networkctl_status: str):
    """The .network file networkd applied to a link, from `networkctl status LINK`; None if unmanaged."""
    found = _NETWORK_FILE.search(networkctl_status)
    if not found or found.group(1) in ("n/a", "-"):
        return None
    return found.group(1)


def netplan_defines(netplan_get_output: str) -> bool:
    """`netplan get ethernets.NAME` prints `null` for an ID no netplan file defines."""
    return netplan_get_output.strip() not in ("", "null")


def _binary_finder(name: str) -> bool:
    return any(
        shutil.which(name, path=directory) for directory in ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
    )


def discover(sysfs_root: str, names: list, match: dict, backend: str, which, run) -> dict:
    """The selected NICs with what the network role plans with, the names that are missing, and the
    backend that persists network settings (detected when `auto`). which(name) -> path or None;
    run(argv) -> (rc, stdout, stderr), as AnsibleModule.get_bin_path and run_command."""
    nics, missing = select_nics(sysfs_root, names, match)
    if backend == "auto":
        active = set()
        systemctl = which("systemctl")
        if systemctl:
            for service in ("NetworkManager", "systemd-networkd"):
                if run([systemctl, "is-active", "--quiet", service])[0] == 0:
                    active.add(service)
        backend = detect_backend("/etc", active, _binary_finder)
    for nic in nics:
        nic["networkd_file"] = None
        nic["netplan_defined"] = False
    netplan = which("netplan") if backend == "netplan" else None
    networkctl = which("networkctl") if backend == "networkd" else None
    for nic in nics:
        if netplan:
            rc, out, _err = run([netplan, "get", f"ethernets.{nic['name']}"])
            nic["netplan_defined"] = rc == 0 and netplan_defines(out)
        if networkctl:
            rc, out, _err = run([networkctl, "status", "--no-pager", nic["name"]])
            nic["networkd_file"] = parse_networkd_file(out) if rc == 0 else None
    return {"nics": nics, "missing": missing, "backend": backend}
