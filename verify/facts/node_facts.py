"""The node's facts for reports and the fleet: host, OS, kernel, CPU/NUMA, memory, GPUs, NICs, block
devices, libraries, tool versions and firmware. Every part is best effort (`gather_facts`)."""
from __future__ import annotations

import platform
import socket
import traceback
from typing import Optional

from verify import __version__
from verify.facts import versions
from verify.facts.firmware import firmware_facts
from verify.facts.gpu_query import query_gpus
from verify.facts.ib_fabric import port_identities
from verify.node import Node, ReadError, parse_cpulist


def _os_release(node: Node) -> dict:
    fields = {}
    for line in (node.read("/etc/os-release") or "").splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            fields[key.strip()] = value.strip().strip('"')
    return {"name": fields.get("NAME"), "version_id": fields.get("VERSION_ID"),
            "pretty_name": fields.get("PRETTY_NAME"), "id": fields.get("ID")}


def _cpu(node: Node) -> dict:
    model, sockets = None, set()
    for line in (node.read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "physical id":
            sockets.add(value.strip())
    online = node.read_value("/sys/devices/system/cpu/online") or ""
    numa = {}
    for name in node.listdir("/sys/devices/system/node"):
        if name.startswith("node") and name[4:].isdigit():
            numa[name[4:]] = node.read_value(f"/sys/devices/system/node/{name}/cpulist")
    return {"model": model, "sockets": len(sockets) or None,
            "cpus_online": len(parse_cpulist(online)) if online else None, "numa_nodes": numa}


def _memory_kib(node: Node) -> Optional[int]:
    for number, line in enumerate((node.read("/proc/meminfo") or "").splitlines(), 1):
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) < 2 or not fields[1].isascii() or not fields[1].isdigit() or len(fields[1]) > 18:
                raise ReadError(f"/proc/meminfo line {number}: no MemTotal in kB: {line[:60]!r}")
            return int(fields[1])
    return None


def _int_or_none(node: Node, path: str) -> Optional[int]:
    text = node.read_value(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _nics(node: Node) -> list:
    nics = []
    for name in node.listdir("/sys/class/net"):
        if name == "lo":
            continue
        base = f"/sys/class/net/{name}"
        speed = _int_or_none(node, f"{base}/speed")
        nics.append({
            "name": name,
            "mtu": _int_or_none(node, f"{base}/mtu"),
            "speed_mbps": speed if speed and speed > 0 else None,
            "numa_node": _int_or_none(node, f"{base}/device/numa_node"),
            "driver": node.readlink_name(f"{base}/device/driver"),
            "pci": node.readlink_name(f"{base}/device"),
            "operstate": node.read_value(f"{base}/operstate"),
        })
    return nics


def _block_devices(node: Node) -> list:
    devices = []
    for name in node.listdir("/sys/block"):
        base = f"/sys/block/{name}"
        sectors = _int_or_none(node, f"{base}/size")
        devices.append({
            "name": name,
            "size_bytes": sectors * 512 if sectors is not None else None,
            "rotational": _int_or_none(node, f"{base}/queue/rotational"),
            "model": node.read_value(f"{base}/device/model"),
            "scheduler": node.read_value(f"{base}/queue/scheduler"),
            "read_ahead_kb": _int_or_none(node, f"{base}/queue/read_ahead_kb"),
        })
    return devices


def _gpus(node: Node) -> dict:
    try:
        return query_gpus(node).to_dict()
    except ValueError as exc:
        return {"source": "none", "gpus": [], "unavailable_reason": str(exc)}


def _libraries(node: Node) -> dict:
    """NCCL (system and framework wheel) and CUDA runtime versions, for the fleet's drift report."""
    extra = node.memo.get("site_dirs") or (versions.live_site_dirs() if node.is_live else ())
    dirs = versions.site_dirs(node, tuple(extra))
    found = {"nccl_system": versions.system_nccl(node), "nccl_framework": versions.wheel_version(
        node, dirs, versions.WHEEL_NCCL), "cuda_runtime": versions.cuda_runtime(node, dirs)}
    return {key: value[0] if value else None for key, value in found.items()}


def _hostname(node: Node) -> str:
    if node.is_live:
            return socket.gethostname()
    return node.read_value("/etc/hostname") or node.read_value("/proc/sys/kernel/hostname") or "unknown"


def _tool_versions(node: Node) -> dict:
    versions = {"tunefleet": __version__, "python": platform.python_version()}
    if node.is_live:
        for tool, argv in (("ethtool", ["ethtool", "--version"]), ("ping", ["ping", "-V"])):
            out = node.run(argv, timeout_s=3.0)
            first = (out.stdout or out.stderr).strip().splitlines()
            versions[tool] = first[0] if out.ok and first else None
    return versions


def _firmware(node: Node) -> dict:
    """GPU VBIOS and HCA firmware, for the fleet's uniformity report."""
    return firmware_facts(node)


def gather_facts(node: Node) -> dict:
    """Host, OS, kernel, CPU/NUMA, memory, GPUs, NICs, block devices and tool versions.

    Every part is best effort: a fact that cannot be read is None, never an exception (any
    exception: a bug in one part costs that part, with its traceback kept in `fact_errors`).
    """
    facts: dict = {"host": _hostname(node), "root": node.root}
    parts = (("os", _os_release), ("cpu", _cpu), ("memory_kib", _memory_kib), ("gpus", _gpus),
             ("nics", _nics), ("block_devices", _block_devices), ("libraries", _libraries),
             ("tool_versions", _tool_versions), ("firmware", _firmware), ("ib_ports", port_identities))
    facts["kernel"] = node.read_value("/proc/sys/kernel/osrelease")
    # One kernel, one machine: containers (or hosts of a test fleet) with the same boot id share its
    # devices, so their benchmark figures contend for one disk (verify.fleet.summary says so).
    facts["boot_id"] = node.read_value("/proc/sys/kernel/random/boot_id")
    banner = node.read_value("/proc/driver/nvidia/version")
    facts["nvidia_driver_banner"] = banner.splitlines()[0] if banner else None
    for key, gather in parts:
        try:
            facts[key] = gather(node)
        except Exception as exc:  # noqa: BLE001 - one unreadable fact must not end the run
            facts[key] = None
            facts.setdefault("fact_errors", {})[key] = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, (OSError, ValueError)):  # a bug, not bad input: keep where it was
                facts.setdefault("fact_tracebacks", {})[key] = traceback.format_exc(limit=8)
    return facts
