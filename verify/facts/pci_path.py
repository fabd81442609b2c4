"""The PCIe path of every GPU and RDMA NIC (root complex, root port, switch ports, device), the ACS
control bits of each bridge on those paths, the IOMMU mode in force and whether this is a virtual machine.

Split like the rest of verify: `find_ext_capability`, `parse_acs`, `acs_on` and `iommu_mode` are pure
functions from bytes or text; the readers take the `Node` (its root, so tests feed fake sysfs trees).

Sources: PCI Express Base Specification, "Extended Capabilities" (the list starts at 0x100, each header
is capability id [15:0], version [19:16], next offset [31:20]) and "ACS Extended Capability" (id 0x000D;
capability register at +4, control register at +6; bits SV 0, TB 1, RR 2, CR 3, UF 4, EC 5, DT 6); Linux
include/uapi/linux/pci_regs.h PCI_EXT_CAP_ID_ACS, PCI_ACS_SV ... PCI_ACS_DT. NCCL troubleshooting guide,
"PCI Access Control Services (ACS)": the redirect bits send peer-to-peer traffic up to the root complex.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from typing import Optional

from verify.node import Node
from verify.pci_config import (
    ACS_BITS,
    ACS_CAP_ID,
    CLEARED_BITS,
    CONFIG_MAX,
    HYPERVISOR_DMI,
    PciConfigError,
    find_ext_capability,
)

MELLANOX_VENDOR = "0x15b3"
NVIDIA_VENDOR = "0x10de"
# PCI Express capability (id 0x10) device/port type, bits 7:4 of its capabilities register.
PORT_TYPES = {4: "root port", 5: "switch upstream port", 6: "switch downstream port", 7: "PCIe-to-PCI bridge",
              8: "PCI-to-PCIe bridge"}
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ROOT_BUS = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
@dataclass(frozen=True)
class AcsRegisters:
    offset: int
    capability: int
    control: int

    def blocking_on(self) -> list:
        """lspci names of the P2P-blocking control bits that are on (the bits the pcie role clears)."""
        return [name for name, bit, _ in ACS_BITS if bit & CLEARED_BITS and self.control & bit]

    def text(self) -> str:
        return " ".join(f"{name}{'+' if self.control & bit else '-'}" for name, bit, _ in ACS_BITS)


def parse_acs(config: bytes) -> Optional[AcsRegisters]:
    offset = find_ext_capability(config, ACS_CAP_ID)
    if offset is None or len(config) < offset + 8:
        return None
    capability, control = struct.unpack_from("<HH", config, offset + 4)
    return AcsRegisters(offset, capability, control)


def port_type(config: bytes) -> Optional[str]:
    """The PCI Express port type from the standard capability list (needs the first 256 bytes)."""
    if len(config) < 0x40 or not struct.unpack_from("<H", config, 0x06)[0] & 0x10:
        return None
    pointer, seen = config[0x34] & 0xFC, set()
    while pointer and pointer + 4 <= len(config) and pointer not in seen:
        seen.add(pointer)
        if config[pointer] == 0x10:
            return PORT_TYPES.get((struct.unpack_from("<H", config, pointer + 2)[0] >> 4) & 0xF)
        pointer = config[pointer + 1] & 0xFC
    return None


@dataclass
class Hop:
    address: str  # 'pci0000:00' for the root complex, else a PCI address
    kind: str
    acs: Optional[AcsRegisters] = None
    config_bytes: int = 0  # how much config space could be read (256 or less: ACS not visible)

    def to_dict(self) -> dict:
        found = {"address": self.address, "kind": self.kind}
        if self.acs is not None:
            found.update(acs_offset=f"{self.acs.offset:#x}", acs_control=f"{self.acs.control:#06x}",
                         acs=self.acs.text())
        return found


@dataclass
class PciPath:
    address: str
    role: str  # 'GPU' or 'NIC <name>'
    hops: list = field(default_factory=list)  # root complex first, the device last

    @property
    def bridges(self) -> list:
        return [hop for hop in self.hops[1:-1]]

    def text(self) -> str:
        return " > ".join(hop.address if hop.kind in ("root complex", "device") else f"{hop.address} ({hop.kind})"
                          for hop in self.hops)


def _hop(node: Node, address: str, last: bool) -> Hop:
    if _ROOT_BUS.match(address):
        return Hop(address, "root complex")
    config = node.read_binary(f"/sys/bus/pci/devices/{address}/config", CONFIG_MAX) or b""
    kind = "device" if last else (port_type(config) or "bridge")
    try:
        acs = None if last else parse_acs(config)
    except PciConfigError:
        acs = None
    return Hop(address, kind, acs, len(config))


def device_path(node: Node, address: str, role: str) -> PciPath:
    """The hops from the root complex to the device, from the sysfs device path
    (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/... : each PCI address is a bridge the link passes)."""
    real = os.path.realpath(node.path(f"/sys/bus/pci/devices/{address}"))
    parts = [part for part in real.split(os.sep) if _ROOT_BUS.match(part) or _BDF.match(part)]
    if not parts or parts[-1] != address:
        parts = [address]
    return PciPath(address, role, [_hop(node, part, index == len(parts) - 1) for index, part in enumerate(parts)])


def endpoints(node: Node) -> list:
    """(address, role) of every NVIDIA GPU (class 0x03xxxx) and every RDMA or Mellanox network function."""
    found = {}
    for address in node.listdir("/sys/bus/pci/devices"):
        base = f"/sys/bus/pci/devices/{address}"
        vendor = (node.read_value(f"{base}/vendor") or "").lower()
        klass = (node.read_value(f"{base}/class") or "").lower()
        if vendor == NVIDIA_VENDOR and klass.startswith("0x03"):
            found[address] = "GPU"
        elif vendor == MELLANOX_VENDOR and klass.startswith("0x02"):
            found[address] = "NIC"
    for device in node.listdir("/sys/class/infiniband"):
        address = node.readlink_name(f"/sys/class/infiniband/{device}/device")
        if address:
            found[address] = f"NIC {device}"
    return sorted(found.items())


def read_paths(node: Node) -> list:
    """Every GPU's and NIC's PciPath; memoised for the run."""
    if "pci_paths" not in node.memo:
        node.memo["pci_paths"] = [device_path(node, address, role) for address, role in endpoints(node)]
    return node.memo["pci_paths"]


# ---- IOMMU ----------------------------------------------------------------------------------------------

@dataclass
class IommuState:
    cmdline: dict  # iommu= / intel_iommu= / amd_iommu= as the kernel was booted
    units: list  # /sys/class/iommu entries (dmar0, ivhd0 ...): an IOMMU the kernel drives
    group_types: dict  # PCI address -> its IOMMU group's default domain type (identity, DMA, DMA-FQ)

    def mode(self) -> str:
        """'off', 'pt' (passthrough: devices DMA to physical addresses), 'translated' or 'unknown'."""
        if not self.units and not self.group_types:
            return "off"
        types = set(self.group_types.values())
        if types and types <= {"identity"}:
            return "pt"
        if types & {"DMA", "DMA-FQ"}:
            return "translated"
        if self.cmdline.get("iommu") == "pt":
            return "pt"
        if "off" in (self.cmdline.get("intel_iommu"), self.cmdline.get("amd_iommu")):
            return "off"
        return "unknown"


CMDLINE_KEYS = ("iommu", "intel_iommu", "amd_iommu")


def parse_cmdline(text: str) -> dict:
    found = {}
    for word in text.split():
        key, _, value = word.partition("=")
        if key in CMDLINE_KEYS:
            found[key] = value
    return found


def read_iommu(node: Node, addresses: list) -> IommuState:
    groups = {}
    for address in addresses:
        group = node.readlink_name(f"/sys/bus/pci/devices/{address}/iommu_group")
        if group is not None:
            groups[address] = node.read_value(f"/sys/kernel/iommu_groups/{group}/type") or "unknown"
    return IommuState(parse_cmdline(node.read_value("/proc/cmdline") or ""), node.listdir("/sys/class/iommu"),
                      groups)


# ---- virtual machine -------------------------------------------------------------------------------------

def virtualization(node: Node) -> str:
    """Why this looks like a virtual machine ('' on bare metal): the CPU's hypervisor flag or the DMI vendor."""
    cpuinfo = node.read("/proc/cpuinfo") or ""
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and " hypervisor" in f" {line.split(':', 1)[-1]} ".replace("\t", " "):
            return "the CPU reports the hypervisor flag (/proc/cpuinfo)"
    for name in ("sys_vendor", "product_name", "bios_vendor"):
        value = node.read_value(f"/sys/class/dmi/id/{name}") or ""
        if any(value.startswith(vendor) for vendor in HYPERVISOR_DMI):
            return f"DMI {name} is {value!r} (/sys/class/dmi/id)"
    return ""
