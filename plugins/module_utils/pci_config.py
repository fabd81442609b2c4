#!/usr/bin/python3
"""PCIe ACS control registers in sysfs config space: find them, read them, clear the redirect bits.

Standard library only, and runnable on its own: the pcie role installs this very file as the boot
script its unit runs (`python3 tunefleet-pcie-acs.py BDF...`), since the ACS bits return to the
firmware's values at every boot. The pcie_acs module imports it for the live change.

PCI Express Base Specification, "ACS Extended Capability": extended capability id 0x000D; control
register at +6; bits SV 0, TB 1, RR 2, CR 3, UF 4, EC 5, DT 6 (Linux include/uapi/linux/pci_regs.h).
The role clears SV, RR, CR and UF, the bits NCCL's troubleshooting guide says redirect or block
peer-to-peer traffic ("PCI Access Control Services (ACS)").
"""
from __future__ import annotations

import os
import re
import struct
import sys
from typing import List, Optional, Tuple

ACS_CAP_ID = 0x000D
EXT_CAP_START = 0x100
CONFIG_MAX = 4096
# The bits NCCL's guide names: on, they force peer traffic up to the root complex; the role clears them.
CLEARED_BITS = 0x01 | 0x04 | 0x08 | 0x10  # SrcValid, ReqRedir, CmpltRedir, UpstreamFwd
# (lspci's name, bit, what it does), in the order lspci prints ACSCap / ACSCtl.
ACS_BITS = (
    ("SrcValid", 0x01, "Source Validation"),
    ("TransBlk", 0x02, "Translation Blocking"),
    ("ReqRedir", 0x04, "P2P Request Redirect"),
    ("CmpltRedir", 0x08, "P2P Completion Redirect"),
    ("UpstreamFwd", 0x10, "Upstream Forwarding"),
    ("EgressCtrl", 0x20, "P2P Egress Control"),
    ("DirectTrans", 0x40, "Direct Translated P2P"),
)
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$")
_PATH_PART = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
NVIDIA, MELLANOX = "0x10de", "0x15b3"
# DMI strings of hypervisors (systemd src/basic/virt.c, the common ones).
HYPERVISOR_DMI = ("KVM", "QEMU", "VMware", "VMW", "innotek GmbH", "VirtualBox", "Xen", "Bochs", "Parallels",
                  "BHYVE", "Microsoft Corporation Virtual Machine", "Google Compute Engine", "OpenStack Nova",
                  "Firecracker")


class PciConfigError(ValueError):
    """Bad input or a config space that cannot be used; the message names the bridge."""


def on_root(root: str, path: str) -> str:
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def bits_text(control: int) -> str:
    return " ".join(f"{name}{'+' if control & bit else '-'}" for name, bit, _ in ACS_BITS)


def find_ext_capability(config: bytes, cap_id: int) -> Optional[int]:
    """Offset of the extended capability `cap_id` in a config space dump, None when absent or when the dump
    stops at 256 bytes (sysfs gives non-root readers only the first 64 or 256); a list that loops or
    leaves the extended space is refused, never followed."""
    offset, seen = EXT_CAP_START, set()
    while offset and len(config) >= offset + 4:
        if offset in seen or offset < EXT_CAP_START or offset % 4:
            raise PciConfigError(f"extended capability list loops or leaves the list (offset {offset:#x})")
        seen.add(offset)
        header = struct.unpack_from("<I", config, offset)[0]
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == cap_id:
            return offset
        offset = (header >> 20) & 0xFFC
    return None


def find_acs(config: bytes) -> Optional[int]:
    """Offset of the ACS extended capability, None when the bridge has none."""
    return find_ext_capability(config, ACS_CAP_ID)


def config_path(root: str, bdf: str) -> str:
    if not BDF.match(bdf):
        raise PciConfigError(f"{bdf!r} is not a PCI address of the form 0000:3b:00.0")
    return on_root(root, f"/sys/bus/pci/devices/{bdf}/config")


def read_config(root: str, bdf: str) -> bytes:
    path = config_path(root, bdf)
    try:
        with open(path, "rb") as handle:
            return handle.read(CONFIG_MAX)
    except OSError as exc:
        raise PciConfigError(f"bridge {bdf}: config space unreadable ({exc.strerror})") from None


def read_acs(root: str, bdf: str) -> Optional[Tuple[int, int]]:
    """(ACS capability offset, control register) or None where the bridge has no ACS."""
    config = read_config(root, bdf)
    if len(config) <= EXT_CAP_START:
        raise PciConfigError(f"bridge {bdf}: only {len(config)} bytes of config space readable (not root?)")
    try:
        offset = find_acs(config)
    except PciConfigError as exc:
        raise PciConfigError(f"bridge {bdf}: {exc}") from None
    if offset is None or len(config) < offset + 8:
        return None
    return offset, struct.unpack_from("<H", config, offset + 6)[0]


def write_control(root: str, bdf: str, offset: int, value: int) -> None:
    """Write the 16-bit ACS control register; the file is the kernel's (no link is followed at the leaf)."""
    fd = os.open(config_path(root, bdf), os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.pwrite(fd, struct.pack("<H", value & 0xFFFF), offset + 6)
    finally:
        os.close(fd)


def endpoints(root: str) -> List[str]:
    """NVIDIA GPUs (class 0x03) and Mellanox network functions (class 0x02) on the bus."""
    found = []
    base = on_root(root, "/sys/bus/pci/devices")
    def value(address: str, name: str) -> str:
        try:
            with open(os.path.join(base, address, name), encoding="ascii", errors="replace") as handle:
                return handle.read().strip().lower()
        except OSError:
            return ""

    for address in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        vendor, klass = value(address, "vendor"), value(address, "class")
        if (vendor == NVIDIA and klass.startswith("0x03")) or (vendor == MELLANOX and klass.startswith("0x02")):
            found.append(address)
    return found


def bridges_above(root: str, address: str) -> List[str]:
    """The PCI bridges on a device's sysfs path, root port first (the device itself excluded)."""
    real = os.path.realpath(on_root(root, f"/sys/bus/pci/devices/{address}"))
    parts = [part for part in real.split(os.sep) if _PATH_PART.match(part)]
    return parts[:-1] if parts and parts[-1] == address else []


def default_bridges(root: str) -> List[str]:
    found: List[str] = []
    for address in endpoints(root):
        found += [bridge for bridge in bridges_above(root, address) if bridge not in found]
    return sorted(found)


def virtualization(root: str) -> str:
    """Why this is a virtual machine ('' on bare metal): the CPU's hypervisor flag or the DMI vendor."""
    try:
        with open(on_root(root, "/proc/cpuinfo"), encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags") and "hypervisor" in line.split(":", 1)[-1].split():
                    return "the CPU reports the hypervisor flag (/proc/cpuinfo)"
    except OSError:
        pass
    for name in ("sys_vendor", "product_name", "bios_vendor"):
        try:
            with open(on_root(root, f"/sys/class/dmi/id/{name}"), encoding="ascii", errors="replace") as handle:
                value = handle.read().strip()
        except OSError:
            continue
        if any(value.startswith(vendor) for vendor in HYPERVISOR_DMI):
            return f"DMI {name} is {value!r} (/sys/class/dmi/id)"
    return ""


def vfio_devices(root: str) -> List[str]:
    """Devices bound to vfio-pci (passed through to guests: their isolation needs ACS)."""
    base = on_root(root, "/sys/bus/pci/drivers/vfio-pci")
    try:
        return sorted(name for name in os.listdir(base) if _PATH_PART.match(name))
    except OSError:
        return []


def clear(root: str, bdfs: List[str]) -> List[str]:
    """The boot unit's work: clear the redirect bits on each bridge; one line per bridge changed."""
    said = []
    for bdf in bdfs:
        found = read_acs(root, bdf)
        if found is None or not found[1] & CLEARED_BITS:
            continue
        offset, control = found
        write_control(root, bdf, offset, control & ~CLEARED_BITS)
        said.append(f"{bdf}: ACS control {control:#06x} -> {control & ~CLEARED_BITS:#06x}")
    return said


def boot_main(argv: List[str]) -> int:
    try:
        for line in clear("/", argv):
            print(line)
    except (PciConfigError, OSError) as exc:
        print(f"tunefleet-pcie-acs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(boot_main(sys.argv[1:]))
