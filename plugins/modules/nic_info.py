#!/usr/bin/python
# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import fnmatch
import glob
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: nic_info
short_description: Find the cluster NICs by name or match and read their NUMA, IRQ and MTU facts from sysfs
description:
  - Selects interfaces named in I(names) plus those whose driver and/or PCI address match the
    globs in I(match) (both globs must match when both are given).
  - For each one reads C(device/numa_node), C(device/local_cpulist), C(device/msi_irqs), the driver,
    the PCI address and the MTU from sysfs, and detects how the node persists network settings
    (netplan, NetworkManager, systemd-networkd, ifupdown); under netplan, whether each NIC is an
    C(ethernets) ID there, and under networkd, the .network file that manages it.
  - Reads only; safe in check mode.
options:
  names:
    description: Interface names that must exist.
    type: list
    elements: str
    default: []
  match:
    description: Globs on C(driver) (e.g. C(mlx5_core)) and/or C(pci) (e.g. C(0000:3b:*)).
    type: dict
    default: {}
  backend:
    description: The network stack that persists settings; C(auto) detects it.
    type: str
    choices: [auto, netplan, networkmanager, networkd, ifupdown, none]
    default: auto
  sysfs_root:
    description: Where sysfs is mounted (tests point this at a fake tree).
    type: path
    default: /sys
author:
  - tunefleet developers
"""

EXAMPLES = r"""
- name: Read the cluster NICs
  tunefleet.gpu_node.nic_info:
    names: [ens1f0]
    match:
      driver: mlx5_core
  register: cluster_nics
"""

RETURN = r"""
nics:
  description: The selected interfaces, sorted by name.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "ens1f0", "driver": "mlx5_core", "pci_address": "0000:3b:00.0", "numa_node": 0,
            "local_cpulist": "0-15,32-47", "irqs": [101, 102], "mtu": 1500}]
missing:
  description: Names from I(names) that are not present on the node.
  returned: always
  type: list
  elements: str
backend:
  description:
    - How this node persists network settings (netplan, networkmanager, networkd, ifupdown or none).
    - I(backend) itself unless it is C(auto).
  returned: always
  type: str
"""


def _read(path: str):
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


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
    numa = _read(os.path.join(pci, "numa_node")) if pci else None
    try:
        irqs = sorted(int(entry) for entry in os.listdir(os.path.join(pci, "msi_irqs"))) if pci else []
    except (OSError, ValueError):
        irqs = []
    mtu = _read(os.path.join(netdir, "mtu"))
    return {
        "name": name,
        "driver": os.path.basename(os.path.realpath(driver_link)) if os.path.exists(driver_link) else None,
        "pci_address": os.path.basename(pci) if pci else None,
        "numa_node": int(numa) if numa and re.fullmatch(r"-?[0-9]{1,6}", numa) else -1,
        "local_cpulist": _read(os.path.join(pci, "local_cpulist")) if pci else None,
        "irqs": irqs,
        "mtu": int(mtu) if mtu and re.fullmatch(r"[0-9]{1,9}", mtu) else None,
        "type": _read(os.path.join(netdir, "type")),
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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "default": []},
            "match": {"type": "dict", "default": {}},
            "backend": {
                "type": "str",
                "default": "auto",
                "choices": ["auto", "netplan", "networkmanager", "networkd", "ifupdown", "none"],
            },
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    unknown = sorted(set(module.params["match"]) - {"driver", "pci"})
    if unknown:
        module.fail_json(msg=f"network_interface_match: unknown key(s) {unknown}; use driver and/or pci")
    nics, missing = select_nics(module.params["sysfs_root"], module.params["names"], module.params["match"])

    backend = module.params["backend"]
    if backend == "auto":
        active = set()
        systemctl = module.get_bin_path("systemctl")
        if systemctl:
            for service in ("NetworkManager", "systemd-networkd"):
                rc, _out, _err = module.run_command([systemctl, "is-active", "--quiet", service])
                if rc == 0:
                    active.add(service)
        backend = detect_backend("/etc", active, _binary_finder)

    for nic in nics:
        nic["networkd_file"] = None
        nic["netplan_defined"] = False
    if backend == "netplan":
        netplan = module.get_bin_path("netplan")
        for nic in nics:
            if netplan:
                rc, out, _err = module.run_command([netplan, "get", f"ethernets.{nic['name']}"])
                nic["netplan_defined"] = rc == 0 and netplan_defines(out)
    if backend == "networkd":
        networkctl = module.get_bin_path("networkctl")
        for nic in nics:
            if networkctl:
                rc, out, _err = module.run_command([networkctl, "status", "--no-pager", nic["name"]])
                nic["networkd_file"] = parse_networkd_file(out) if rc == 0 else None
    module.exit_json(changed=False, nics=nics, missing=missing, backend=backend)


if __name__ == "__main__":
    main()
