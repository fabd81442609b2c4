"""PCI addresses and functions as the kernel, NVML and the driver's log name them, and whether GPU
state can be read at all (a driver loaded, the live node rather than a --root tree)."""
from __future__ import annotations

import re

from verify.facts import health_smi
from verify.node import Node

NVIDIA_VENDOR = "0x10de"
_BDF = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?$")


def short_bdf(address: str) -> str:
    """Any PCI address form -> 'dddd:bb:dd.f' lower case: nvidia-smi's '00000000:3B:00.0', sysfs'
    '0000:3b:00.0' and the kernel log's Xid form '0000:3b:00' (no function: .0 assumed)."""
    match = _BDF.match(address.strip())
    if not match:
        raise ValueError(f"{address.strip()[:40]!r} is not a PCI address")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{device.lower()}.{function or '0'}"


def live_reason(node: Node, what: str) -> str:
    """Why command output cannot describe this node (a --root tree), or ''."""
    return "" if node.is_live else f"{what} is read on the live node only (--root is set)"


def driver_reason(node: Node) -> str:
    if not node.exists("/proc/driver/nvidia/version"):
        return "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)"
    return live_reason(node, "GPU state")


def pci_devices(node: Node) -> list:
    """Every PCI function under /sys/bus/pci/devices: (address, vendor, class) as the kernel names them."""
    found = []
    for address in node.listdir("/sys/bus/pci/devices"):
        base = f"/sys/bus/pci/devices/{address}"
        found.append((address, (node.read_value(f"{base}/vendor") or "").lower(),
                      (node.read_value(f"{base}/class") or "").lower()))
    return found


def nvidia_gpus_on_bus(node: Node) -> list:
    """Sysfs addresses of NVIDIA display/3D controllers (class 0x03xxxx): what the slots hold,
    whether or not the driver still talks to them. NVSwitches (class 0x0680) are not GPUs."""
    return [address for address, vendor, klass in pci_devices(node)
            if vendor == NVIDIA_VENDOR and klass.startswith("0x03")]


def gpu_indices(node: Node) -> dict:
    """Short bus id -> GPU index, where the driver's list is at hand (to name GPUs in results)."""
    if driver_reason(node):
        return {}
    gpus, _ = health_smi.query(node)
    return {short_bdf(gpu.bus_id): gpu.index for gpu in gpus}
