"""Peer to peer: every GPU can map every other GPU's memory, as CUDA answers it (cudaDeviceCanAccessPeer
through torch, verify.facts.peer_access), judged by what joins each pair (`nvidia-smi topo -m`).

NVLink that reads Active while CUDA refuses peer access is the silent failure on NVSwitch boards: a Fabric
Manager that is down or at the wrong version leaves the links trained while the fabric carries nothing
(NVIDIA Fabric Manager User Guide, "Fabric Manager": it configures the NVSwitch memory fabric that NVLink
peer traffic crosses), and NCCL then falls back to PCIe or host memory with no error. Such a pair is a
FAIL, action `reboot` (NVIDIA Health Validation, NVLink checks: drain, then reset GPU -> restart OS ->
service; start nvidia-fabricmanager first where it is down, health.fabric judges it). A pair refused
over PCIe is a WARN, action `watch`: ACS redirect on the bridges between them or a translating IOMMU
(NCCL troubleshooting guide, "GPU Direct", "PCI Access Control Services (ACS)" and "IOMMU"; the pcie.acs
and pcie.iommu checks read both), or a platform without PCIe P2P, where NCCL copies through host memory.
Fewer than two GPUs, no torch, no CUDA device: SKIP with the reason.
"""
from __future__ import annotations

from verify.checks.common import result, skip
from verify.checks.health_common import ROLE
from verify.facts.fabric import nvswitches, read_manager
from verify.facts.gpu_query import query_gpus
from verify.facts.hardware import detect
from verify.facts.pci import driver_reason
from verify.facts.peer_access import PeerAccess, nvlink_count, read_gpu_links, read_peer_access
from verify.judging import verdicts
from verify.node import Node
from verify.result import CheckResult, Status

CHECK_ID = "health.p2p"
PCIE_FIX = ("peer traffic between these GPUs crosses PCIe: read pcie.acs (ACS redirect bits on the bridges "
            "between them; the pcie role clears them) and pcie.iommu (pt or off for peer traffic); "
            "until then NCCL copies through host memory")
MAX_PAIRS_SAID = 8


def _pairs_text(pairs: list, links: dict) -> str:
    said = [f"{a}->{b}" + (f" ({links[(a, b)]})" if (a, b) in links else "") for a, b in pairs[:MAX_PAIRS_SAID]]
    more = f" and {len(pairs) - MAX_PAIRS_SAID} more" if len(pairs) > MAX_PAIRS_SAID else ""
    return ", ".join(said) + more


def nvlinked(node: Node, pairs: list) -> tuple:
    """({(a, b): topo level}, which pairs NVLink joins, what said so): `nvidia-smi topo -m` per pair; where it
    cannot be read, both GPUs having active NVLinks (verify.facts.hardware) counts as joined."""
    links, why = read_gpu_links(node)
    if not why:
        return links, {p for p in pairs if nvlink_count(links.get(p, ""))}, "nvidia-smi topo -m"
    hardware = detect(node)
    active = {g.index for g in hardware.gpus if g.nvlink_links > 0} if not hardware.nvlink_reason else set()
    return {}, {(a, b) for a, b in pairs if a in active and b in active}, (
        f"active NVLinks on both GPUs (nvidia-smi nvlink --status; {why})")


def fabric_hint(node: Node) -> str:
    """Why NVLink peers may be refused on this board, where the node says: the Fabric Manager down."""
    if not nvswitches(node):
        return ""
    manager = read_manager(node)
    if manager.active is False:
        return f"; NVSwitches on the bus and nvidia-fabricmanager is {manager.state_text} (see health.fabric)"
    return ""


def judge(access: PeerAccess, links: dict, joined: set, basis: str, hint: str = "") -> CheckResult:
    """The verdict on one reading (a PeerAccess with at least two GPUs)."""
    count = len(access.gpus)
    pairs = len(access.can_access)
    refused = access.refused
    details = {"gpus": {str(k): v for k, v in sorted(access.gpus.items())},
               "can_access": {f"{a}->{b}": can for (a, b), can in sorted(access.can_access.items())},
               "links": {f"{a}->{b}": level for (a, b), level in sorted(links.items())},
               "link_basis": basis, "mapped_by": access.mapped_by, "torch": access.torch_version}
    if access.problems:
        details["payload_problems"] = access.problems
    expected = f"peer access between all {count * (count - 1)} ordered pairs"
    if not refused:
        return result(CHECK_ID, ROLE, Status.PASS, expected, f"{pairs} of {pairs} pairs",
                      f"all {count} GPUs can access each other peer to peer ({pairs} ordered pairs)",
                      details=details)
    over_nvlink = [p for p in refused if p in joined]
    over_pcie = [p for p in refused if p not in joined]
    observed = f"{len(refused)} of {pairs} pairs refused"
    parts = []
    if over_nvlink:
        parts.append(f"peer access refused over active NVLink ({basis}): {_pairs_text(over_nvlink, links)}{hint}")
    if over_pcie:
        parts.append(f"peer access refused over PCIe: {_pairs_text(over_pcie, links)}")
    action = verdicts.REBOOT if over_nvlink else verdicts.WATCH
    details[verdicts.ACTION_KEY] = action
    fix = (verdicts.WORDS[verdicts.REBOOT] + "; where nvidia-fabricmanager is down, start it first (health.fabric)"
           if over_nvlink else PCIE_FIX)
    return result(CHECK_ID, ROLE, verdicts.status_of(action), expected, observed, "; ".join(parts),
                  details=details, fix=fix)


def run(spec: dict, node: Node) -> list:
    reason = driver_reason(node)
    if reason:
        return [skip(CHECK_ID, ROLE, reason)]
    try:  # the GPU inventory every check shares (NVML, else nvidia-smi; read once per run)
        listed = len(query_gpus(node).gpus)
    except ValueError:
        listed = None  # unknown here: the engine counts what CUDA sees
    if listed is not None and listed < 2:  # one GPU needs no engine started
        return [skip(CHECK_ID, ROLE, f"{listed} GPU on this node: no pair to access peer to peer")]
    access = read_peer_access(node)
    if access.skip_reason:
        return [skip(CHECK_ID, ROLE, f"CUDA peer access cannot be asked here: {access.skip_reason}")]
    if access.error:
        return [result(CHECK_ID, ROLE, Status.ERROR, reason=access.error,
                       details={"partial_output": access.raw, "payload_problems": access.problems})]
    if len(access.gpus) < 2:
        return [skip(CHECK_ID, ROLE, f"{len(access.gpus)} GPU visible to CUDA: no pair to access peer to peer")]
    refused = access.refused
    links, joined, basis = nvlinked(node, refused) if refused else ({}, set(), "")
    hint = fabric_hint(node) if joined else ""
    return [judge(access, links, joined, basis, hint)]
