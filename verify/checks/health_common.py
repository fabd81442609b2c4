"""What the hardware health checks share: gates, the expected hardware from the profile, thresholds,
PCI address forms and the remediations a fleet operator acts on.

Health is judged whatever the roles' switches say (a tuned node can still be bad hardware), so
these checks never SKIP on `<role>_enabled: false`; they SKIP when there is nothing to read.
"""
from __future__ import annotations

import re
from typing import Optional

from verify.bench.common import Threshold
from verify.node import Node

ROLE = "health"
NVIDIA_VENDOR = "0x10de"
# What the operator does next, from least to most disruptive.
RESET_GPU = "drain the GPU's jobs and reset it (nvidia-smi -r -i {index}); if it recurs, drain the node and RMA the GPU"
DRAIN_RMA = "drain the node and open an RMA for the GPU (hardware fault)"
REBOOT = "drain the node and reboot it (the fix is applied at the next driver load); RMA if it recurs"
RESEAT = "drain the node, reseat the card / riser / cable of {what}, check the slot in the BIOS; RMA if it stays"
CHECK_COOLING = "check the GPU's cooling and power feed (fans, airflow, PSU, BMC power brake events)"
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


def profile(spec: dict, node: Node) -> Optional[dict]:
    """The hardware profile the desired state names (`verify_profile`), `auto` resolved from the
    node's GPUs; None when none is named or none matches. Memoised for the run."""
    if "health_profile" in node.memo:
        return node.memo["health_profile"]
    from verify.profiles import ProfileError, load_profile, pick_profile

    name = (spec.get("verify") or {}).get("profile")
    chosen = None
    try:
        if name == "auto":
            from verify.checks.gpu_query import query_gpus

            chosen = pick_profile({"gpus": query_gpus(node).to_dict()})
        elif name:
            chosen = load_profile(str(name))
    except ProfileError:
        chosen = None  # the CLI refuses a bad --profile before checks run; here it is just absent
    node.memo["health_profile"] = chosen
    return chosen


def threshold(key: str, spec: dict, node: Node, derived: Optional[Threshold]) -> Optional[Threshold]:
    from verify.profiles import resolve_threshold

    return resolve_threshold(key, profile(spec, node), spec, derived)


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
    from verify.checks import health_smi

    gpus, _ = health_smi.query(node)
    return {short_bdf(gpu.bus_id): gpu.index for gpu in gpus}
