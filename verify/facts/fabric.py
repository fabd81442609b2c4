"""The NVSwitch fabric as each GPU and the node see it: NVML's GPU fabric information (state, status, clique
and cluster ids) per GPU, the NVSwitches on the PCI bus, and nvidia-fabricmanager's service state and version.

Two sources of the per-GPU state, the same numbers: the scheduler's in-process NVML reading
(verify.scheduler.nvml.read_raw reads (state, status) per index, nvml_facts.prime puts it in node.memo[MEMO_FABRIC]) and
`nvidia-smi -q`'s "Fabric" section, parsed here (`parse_smi_fabric`, a pure function of the text).
NVML's names: nvmlGpuFabricState_t NOT_SUPPORTED 0, NOT_STARTED 1, IN_PROGRESS 2, COMPLETED 3 (nvml.h);
nvidia-smi prints them "N/A", "Not Started", "In Progress", "Completed" and the status as "Success" or the
NVML error's text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from verify.facts import smi_failure, smi_q
from verify.facts.pci import NVIDIA_VENDOR, live_reason, pci_devices
from verify.node import Node

FABRIC_NOT_SUPPORTED, FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 0, 1, 2, 3
FABRIC_NAMES = {FABRIC_NOT_STARTED: "not started", FABRIC_IN_PROGRESS: "in progress", FABRIC_COMPLETED: "completed"}
_SMI_STATES = {"N/A": FABRIC_NOT_SUPPORTED, "Not Supported": FABRIC_NOT_SUPPORTED, "Not Started": FABRIC_NOT_STARTED,
               "In Progress": FABRIC_IN_PROGRESS, "Completed": FABRIC_COMPLETED}
UNREADABLE = "could not read"  # how a present output that cannot be read starts its reason (judged ERROR)
MEMO_FABRIC = "gpu_fabric"  # index -> (state, status) where NVML reports a fabric (the scheduler's reading)
SMI_ARGV = ["nvidia-smi", "-q"]
MANAGER_UNIT = "nvidia-fabricmanager"
MANAGER_STATE_ARGV = ["systemctl", "is-active", MANAGER_UNIT]
MANAGER_VERSION_ARGV = ["nv-fabricmanager", "--version"]
NVSWITCH_CLASS = "0x0680"  # NVSwitches are "bridge: other" functions of NVIDIA's on the host's bus (HGX)
_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)*)\b")


@dataclass
class GpuFabric:
    index: int
    bus_id: str
    state: int
    status: Optional[int]  # 0 success; None where not reported (N/A while registering)
    status_text: str = ""
    clique_id: str = ""
    cluster_uuid: str = ""
    guid: str = ""
    health: dict = field(default_factory=dict)  # "Fabric / Health" as printed: Summary, Bandwidth, Route Unhealthy...

    def to_dict(self) -> dict:
        return {"index": self.index, "bus_id": self.bus_id, "state": FABRIC_NAMES.get(self.state, "not supported"),
                "status": self.status_text or ("Success" if self.status == 0 else self.status),
                "clique_id": self.clique_id, "cluster_uuid": self.cluster_uuid, "guid": self.guid,
                "health": dict(self.health)}


class FabricParseError(ValueError):
    """nvidia-smi -q printed a fabric state this parser does not know; the message quotes it."""


def _field(line: str) -> tuple:
    key, _, value = line.partition(":")
    return key.strip(), value.strip()


def parse_smi_fabric(text: str) -> list:
    """`nvidia-smi -q` -> one GpuFabric per "GPU <bus id>" block, in the order printed (= index order).
    Raises FabricParseError for a fabric state it does not know (read_gpu_fabric says so as unreadable)."""
    gpus: list = []
    current: Optional[GpuFabric] = None
    in_fabric = in_health = False
    for line in text.splitlines():
        if line.startswith("GPU "):
            current = GpuFabric(len(gpus), line[4:].strip(), FABRIC_NOT_SUPPORTED, None)
            gpus.append(current)
            in_fabric = in_health = False
            continue
        if current is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, value = _field(line)
        if key == "GPU Fabric GUID":
            current.guid = "" if value == "N/A" else value
        if indent == 4:
            in_fabric = key == "Fabric" and not value
            continue
        if in_fabric and in_health and indent == 12:
            current.health[key] = value  # the fabric's health block (R550+; "N/A" where it has none)
            continue
        if not in_fabric or indent != 8:
            continue
        in_health = key == "Health" and not value
        if key == "State":
            if value not in _SMI_STATES:
                raise FabricParseError(f"GPU {current.bus_id}: unknown fabric state {value[:40]!r}")
            current.state = _SMI_STATES[value]
        elif key == "Status":
            current.status_text = value
            current.status = None if value == "N/A" else (0 if value == "Success" else 1)
        elif key == "CliqueId":
            current.clique_id = "" if value == "N/A" else value
        elif key == "ClusterUUID":
            current.cluster_uuid = "" if value == "N/A" else value
    return gpus


def driver_version_of(smi_text: str) -> str:
    for line in smi_text.splitlines():
        key, value = _field(line)
        if key == "Driver Version":
            return value
    return ""


def read_gpu_fabric(node: Node) -> tuple:
    """([GpuFabric], driver version, why not) from the scheduler's NVML reading when there is one, else
    `nvidia-smi -q` on the live node."""
    if MEMO_FABRIC in node.memo:
        bus_ids = {g.index: g.bus_id for g in getattr(node.memo.get("gpus"), "gpus", [])}
        driver = getattr(node.memo.get("gpus"), "driver_version", "") or ""
        found = [GpuFabric(index, bus_ids.get(index, "?"), state, status)
                 for index, (state, status) in sorted(node.memo[MEMO_FABRIC].items())]
        return found, driver, ""
    why = live_reason(node, "the GPU fabric state")
    if why:
        return [], "", why
    output = node.run(SMI_ARGV, timeout_s=60.0)
    if output.missing:
        return [], "", "nvidia-smi is not installed"
    failures = smi_failure.classify(output.stdout, output.stderr, output.returncode)
    if output.returncode != 0 or failures and not smi_q.parse(output.stdout):
        said = "; ".join(f.said() for f in failures) or (output.stderr or output.stdout).strip()[:200]
        return [], "", f"nvidia-smi -q exited {output.returncode}: {said} (health.gpu.presence judges it)"
    try:
        found = parse_smi_fabric(output.stdout)
    except FabricParseError as exc:  # a state a newer driver prints: said as unreadable (ERROR), never a crash
        return [], driver_version_of(output.stdout), f"{UNREADABLE} nvidia-smi -q: {exc}"
    why = smi_q.unreadable(output.stdout, smi_q.parse(output.stdout), sum(1 for f in failures if f.bus_id))
    if why:
        return [], driver_version_of(output.stdout), f"{UNREADABLE} nvidia-smi -q: {why}"
    return found, driver_version_of(output.stdout), ""


def nvswitches(node: Node) -> list:
    """PCI addresses of the NVSwitches on this host's bus (HGX boards; GB200 trays have none: their switch
    trays hold them)."""
    return [address for address, vendor, klass in pci_devices(node)
            if vendor == NVIDIA_VENDOR and klass.startswith(NVSWITCH_CLASS)]


@dataclass
class ManagerState:
    active: Optional[bool]  # None: could not tell (no systemctl)
    state_text: str
    version: str  # '' when the binary is not installed or says nothing parsable


def parse_manager_version(text: str) -> str:
    """'Fabric Manager version is : 535.129.03' -> '535.129.03'."""
    match = _VERSION.search(text or "")
    return match.group(1) if match else ""


def read_manager(node: Node) -> ManagerState:
    state = node.run(MANAGER_STATE_ARGV, timeout_s=10.0)
    text = (state.stdout or "").strip() or ("systemctl is not installed" if state.missing else "unknown")
    active = None if state.missing else text == "active"
    version = node.run(MANAGER_VERSION_ARGV, timeout_s=10.0)
    return ManagerState(active, text, "" if version.missing else parse_manager_version(version.stdout))


# The Fabric Manager's own log (its default LOG_FILE_NAME; NVIDIA Fabric Manager User Guide, "Log file"), one
# line per event: "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on
# NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33" (the lines leptonai/gpud's fabric-manager-log
# component quotes from its nodes). Stamps are the node's local time, no year zone: read on the node itself.
MANAGER_LOG = "/var/log/fabricmanager.log"
_MANAGER_LINE = re.compile(r"^\[(?P<stamp>[A-Z][a-z]{2} +\d{1,2} \d{4} \d{2}:\d{2}:\d{2})\] \[(?P<level>[A-Z]+)\] "
                           r"(?:\[tid \d+\] )?(?P<message>.*?)\s*$")


@dataclass
class ManagerLogLine:
    at: Optional[float]  # Unix time (the node's local clock), None where the stamp does not parse
    level: str
    message: str


def parse_manager_log(text: str) -> list:
    """The log's event lines, in order; other lines (continuations, foreign text) are not events. Total."""
    import time

    found = []
    for line in (text or "").splitlines()[-200_000:]:
        match = _MANAGER_LINE.match(line)
        if not match:
            continue
        try:
            at = time.mktime(time.strptime(" ".join(match.group("stamp").split()), "%b %d %Y %H:%M:%S"))
        except (ValueError, OverflowError):
            at = None
        found.append(ManagerLogLine(at, match.group("level"), match.group("message")[:400]))
    return found


def read_manager_log(node: Node) -> tuple:
    """([ManagerLogLine] of this boot, why not): the lines stamped after the kernel booted (/proc/stat btime);
    ([], '') where the log is absent, ([], 'could not read ...') where it is present and unreadable."""
    if not node.exists(MANAGER_LOG):
        return [], ""
    text = node.read(MANAGER_LOG)
    if text is None:
        return [], f"{UNREADABLE} {MANAGER_LOG} (too large or not a regular file)"
    boot = next((int(line.split()[1]) for line in (node.read("/proc/stat") or "").splitlines()
                 if line.startswith("btime ") and line.split()[1:2] and line.split()[1].isascii()
                 and line.split()[1].isdigit()), None)
    lines = parse_manager_log(text)
    return [line for line in lines if boot is None or line.at is None or line.at >= boot], ""
