"""Topology: each GPU's nearest RDMA HCA sits on the same PCIe switch, or the same NUMA node, where the
hardware profile says so (`"topology": {"gpu_hca_same": "pcie_switch" | "numa" | null}`).

GPU-direct RDMA moves data between a GPU and an HCA over PCIe peer-to-peer; NCCL only uses it when the
two are close (NCCL_NET_GDR_LEVEL, default PXB), so a GPU whose HCA sits across the host bridge or the
socket interconnect sends its inter-node traffic through host memory. The distance is the one
`nvidia-smi topo -m` prints (PIX < PXB < PHB < NODE < SYS), worked out from sysfs: the PCI bridges
above each device (the realpath of /sys/bus/pci/devices/<bdf>) and its numa_node. When sysfs lists no
NVIDIA GPU (some containers hide the bus), `nvidia-smi topo -m` is read instead.
"""
from __future__ import annotations

import os
import re
from typing import Optional

from verify.checks.common import result, skip
from verify.checks.health_common import ROLE, profile
from verify.checks.health_pcie import hcas
from verify.facts.pci import driver_reason, gpu_indices, nvidia_gpus_on_bus, short_bdf
from verify.node import Node
from verify.result import Status

# nvidia-smi's names, nearest first (its legend: PIX at most one bridge, PXB several bridges without the
# host bridge, PHB through a host bridge, NODE between host bridges of one NUMA node, SYS across the
# socket interconnect). "SOC" is what drivers before R384 printed for SYS.
LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
WANTS = {"pcie_switch": "PXB", "numa": "NODE"}  # the farthest level each requirement accepts
MEANING = {"PIX": "behind the same PCIe switch port", "PXB": "under the same PCIe switch",
           "PHB": "only through the CPU's PCIe host bridge", "NODE": "on the same NUMA node, across host bridges",
           "SYS": "on another NUMA node (across the socket interconnect)"}
TOPO_ARGV = ["nvidia-smi", "topo", "-m"]
REMEDIATION = ("compare the slot population with the platform's reference layout (which HCA belongs under "
               "which GPU's PCIe switch) and the BIOS PCIe/NUMA settings; until fixed, GPU-direct RDMA for this "
               "GPU goes through host memory (NCCL_NET_GDR_LEVEL)")
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_NV = re.compile(r"^NV\d+$")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


class TopoParseError(ValueError):
    pass


# ---- sysfs ---------------------------------------------------------------------------------------------

def bridges_above(node: Node, address: str) -> list:
    """The PCI path from the host bridge down to the device, device excluded: e.g. ['pci0000:00',
    '0000:00:01.0', '0000:01:00.0', '0000:02:04.0'] for a device behind a switch's downstream port."""
    real = os.path.realpath(node.path(f"/sys/bus/pci/devices/{address}"))
    parts = real.split(os.sep)
    start = next((i for i, part in enumerate(parts) if part.startswith("pci") and ":" in part), None)
    if start is None:
        return []
    chain = [parts[start]] + [part for part in parts[start + 1:] if _BDF.match(part)]
    return chain[:-1] if chain and chain[-1] == address else chain


def numa_of(node: Node, address: str) -> Optional[int]:
    """The device's NUMA node, None where the firmware does not say (-1) or the file is absent."""
    text = node.read_value(f"/sys/bus/pci/devices/{address}/numa_node")
    if text is None or not re.fullmatch(r"-?\d{1,4}", text):
        return None
    value = int(text)
    return value if value >= 0 else None


def numa_nodes(node: Node) -> int:
    return sum(1 for name in node.listdir("/sys/devices/system/node") if re.fullmatch(r"node\d+", name))


def distance(a_chain: list, b_chain: list, a_numa: Optional[int], b_numa: Optional[int], single_numa: bool) -> str:
    """nvidia-smi's level between two devices from their bridge chains and NUMA nodes."""
    common = 0
    for left, right in zip(a_chain, b_chain):
        if left != right:
            break
        common += 1
    if common >= 2:  # share a PCI bridge below the host bridge
        below = max(len(a_chain), len(b_chain)) - common  # bridges between the shared one and the farther device
        return "PIX" if below <= 1 else "PXB"
    if common == 1:
        return "PHB"
    if single_numa or (a_numa is not None and a_numa == b_numa):
        return "NODE"
    if a_numa is None or b_numa is None:
        return "NODE?"  # across host bridges, NUMA node unknown: judged as unknown, not as SYS
    return "SYS"


def sysfs_matrix(node: Node, gpus: list, devices: list) -> dict:
    """GPU address -> {HCA name: level}."""
    single = numa_nodes(node) <= 1
    hca_info = {name: (bridges_above(node, address), numa_of(node, address)) for name, address in devices}
    matrix = {}
    for gpu in gpus:
        chain, numa = bridges_above(node, gpu), numa_of(node, gpu)
        matrix[gpu] = {name: distance(chain, other, numa, other_numa, single)
                       for name, (other, other_numa) in hca_info.items()}
    return matrix


# ---- nvidia-smi topo -m ----------------------------------------------------------------------------------

def _cell(text: str, where: str) -> str:
    cell = text.strip().upper()
    if cell == "SOC":
        return "SYS"
    if cell == "X" or cell in LEVELS or _NV.match(cell):
        return cell
    raise TopoParseError(f"{where}: {text.strip()[:20]!r} is not a topology level (X, PIX, PXB, PHB, NODE, SYS, NV#)")


def parse_topo(text: str) -> dict:
    """`nvidia-smi topo -m` -> {"GPU0": {"NIC0" or "mlx5_0": level, ...}}: GPU rows by HCA columns, HCA
    columns named from the "NIC Legend" when there is one. Raises TopoParseError naming the line."""
    lines = text.replace("\x1b[4m", "").replace("\x1b[0m", "").splitlines()
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line)), None)
    if header_at is None:
        raise TopoParseError(f"no header line with GPU0 in {text.strip()[:80]!r}")
    header = lines[header_at].split()
    end = next((i for i, word in enumerate(header) if word in ("CPU", "NUMA", "GPU") and i + 1 < len(header)
                and header[i + 1] in ("Affinity", "NUMA")), len(header))
    columns = header[:end]
    if not columns or len(set(columns)) != len(columns):
        raise TopoParseError(f"line {header_at + 1}: device columns {columns[:12]} are empty or repeated")
    legend = {}
    for line in lines:
        match = _LEGEND.match(line)
        if match:
            legend[match.group(1)] = match.group(2)
    matrix: dict = {}
    for number, line in enumerate(lines[header_at + 1:], header_at + 2):
        words = line.split()
        if not words or words[0] == "Legend:":
            if words:
                break
            continue
        label = words[0]
        if not re.fullmatch(r"GPU\d+", label):
            continue
        cells = words[1:1 + len(columns)]
        if len(cells) < len(columns):
            raise TopoParseError(f"line {number}: {label} has {len(cells)} cells for {len(columns)} devices")
        row = {}
        for column, cell in zip(columns, cells):
            if not re.fullmatch(r"GPU\d+", column):
                row[legend.get(column, column)] = _cell(cell, f"line {number} ({label}, {column})")
        matrix[label] = row
    if not matrix:
        raise TopoParseError("no GPU row under the header")
    return matrix


# ---- the check -------------------------------------------------------------------------------------------

def requirement(spec: dict, node: Node) -> tuple:
    """(wanted, source) from the profile's "topology" block; wanted None when it asks for nothing."""
    chosen = profile(spec, node) or {}
    block = chosen.get("topology") or {}
    wanted = block.get("gpu_hca_same") if isinstance(block, dict) else None
    return wanted, (chosen.get("sources") or {}).get("topology", "")


def judge(gpu_name: str, check_id: str, row: dict, wanted: str, source: str, origin: str):
    """One GPU: its nearest HCA against the farthest level the requirement accepts."""
    limit = LEVELS.index(WANTS[wanted])
    same = "same PCIe switch" if wanted == "pcie_switch" else "same NUMA node"
    expected = f"nearest HCA at {WANTS[wanted]} or nearer ({same})"
    ranked = sorted(row.items(), key=lambda item: (_rank(item[1]), item[0]))
    nearest, level = ranked[0]
    details = {"levels": dict(sorted(row.items())), "nearest": nearest, "wanted": wanted, "source": source,
               "read_from": origin}
    observed = f"{nearest} {level}"
    if level == "NODE?":
        return result(check_id, ROLE, Status.WARN, expected, observed,
                      f"{gpu_name}: nearest HCA {nearest} is across PCIe host bridges and sysfs gives no NUMA node "
                      "(numa_node -1): cannot tell NODE from SYS", details=details, fix=REMEDIATION)
    if _rank(level) <= limit:
        return result(check_id, ROLE, Status.PASS, expected, observed, details=details)
    return result(check_id, ROLE, Status.FAIL, expected, observed,
                  f"{gpu_name}: nearest HCA {nearest} is {level}: {MEANING[level]}", details=details, fix=REMEDIATION)


def _rank(level: str) -> int:
    return LEVELS.index("NODE") if level == "NODE?" else LEVELS.index(level)


def run(spec: dict, node: Node) -> list:
    wanted, source = requirement(spec, node)
    if wanted is None:
        return [skip("health.topology", ROLE, "the hardware profile does not ask for GPU-HCA locality "
                                              "(no topology.gpu_hca_same)")]
    if wanted not in WANTS:  # validate_profile refuses this; a hand-made profile dict may not have passed it
        return [result("health.topology", ROLE, Status.ERROR, None, wanted,
                       f"topology.gpu_hca_same {wanted!r} is not one of {', '.join(WANTS)} or null")]
    devices = hcas(node)
    if not devices:
        return [skip("health.topology", ROLE, "no RDMA HCA in /sys/class/infiniband: no GPU-HCA locality to judge")]
    gpus = nvidia_gpus_on_bus(node)
    if gpus:
        indices = gpu_indices(node)
        matrix = sysfs_matrix(node, gpus, devices)
        return [judge(_gpu_name(address, indices), f"health.topology.{address}", matrix[address], wanted, source,
                      "sysfs") for address in gpus]
    return _from_smi(node, wanted, source)


def _gpu_name(address: str, indices: dict) -> str:
    index = indices.get(short_bdf(address))
    return f"GPU {index} ({address})" if index is not None else f"GPU at {address}"


def _from_smi(node: Node, wanted: str, source: str) -> list:
    reason = driver_reason(node)
    if reason:
        return [skip("health.topology", ROLE, f"no NVIDIA GPU on the PCI bus in sysfs, and {reason}")]
    out = node.run(TOPO_ARGV, timeout_s=20.0)
    if out.missing:
        return [skip("health.topology", ROLE, "no NVIDIA GPU in sysfs and nvidia-smi is not installed")]
    if not out.ok:
        message = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[0]
        return [result("health.topology", ROLE, Status.ERROR, None, None,
                       f"nvidia-smi topo -m failed: {message[:160]}")]
    try:
        matrix = parse_topo(out.stdout)
    except TopoParseError as exc:
        return [result("health.topology", ROLE, Status.ERROR, None, None, f"nvidia-smi topo -m: {exc}")]
    results = []
    for label, row in sorted(matrix.items(), key=lambda item: int(item[0][3:])):
        if not row:
            results.append(skip(f"health.topology.{label.lower()}", ROLE, f"{label}: nvidia-smi topo -m lists no NIC"))
            continue
        results.append(judge(label.replace("GPU", "GPU "), f"health.topology.{label.lower()}", row, wanted, source,
                             "nvidia-smi topo -m"))
    return results
