"""Peer to peer: every GPU can map every other GPU's memory, as the driver answers it without a CUDA
context (NVML's P2P status per ordered pair, READ and WRITE: in-process in the scheduler's hooks, else
`nvidia-smi topo -p2p r` and `w`; verify.facts.peer_access), judged by what joins each pair
(`nvidia-smi topo -m`). The check runs beside users' jobs (the health hook): it never creates a CUDA
context, which would take memory from the job and cannot be made on a GPU in EXCLUSIVE_PROCESS mode.
`judge` also takes CUDA's own answer (a PeerAccess with source "cuda") from the benchmark phase.

NVLink that reads Active while the driver refuses peer access is the silent failure on NVSwitch boards: a
Fabric Manager that is down or at the wrong version leaves the links trained while the fabric carries nothing
(NVIDIA Fabric Manager User Guide, "Fabric Manager": it configures the NVSwitch memory fabric that NVLink
peer traffic crosses), and NCCL then falls back to PCIe or host memory with no error. Such a pair is a
FAIL, action `reboot` (NVIDIA Health Validation, NVLink checks: drain, then reset GPU -> restart OS ->
service; start nvidia-fabricmanager first where it is down, health.fabric judges it). A pair refused
over PCIe is a WARN, action `watch`: ACS redirect on the bridges between them or a translating IOMMU
(NCCL troubleshooting guide, "GPU Direct", "PCI Access Control Services (ACS)" and "IOMMU"; the pcie.acs
and pcie.iommu checks read both), or a platform without PCIe P2P (NVML's CHIPSET / GPU / IOH_TOPOLOGY
NOT_SUPPORTED, named in the verdict), where NCCL copies through host memory.
Fewer than two GPUs, no nvidia-smi where NVML was not read: SKIP with the reason.
"""
from __future__ import annotations

from verify.checks.common import result, skip
from verify.checks.health_common import ROLE
from verify.facts.fabric import nvswitches, read_manager
from verify.facts.gpu_query import query_gpus
from verify.facts.hardware import detect
from verify.facts.pci import driver_reason
from verify.facts.peer_access import (
    SOURCE_CUDA,
    SOURCE_NVML,
    SOURCE_SMI,
    PeerAccess,
    nvlink_count,
    read_gpu_links,
    read_peer_access,
)
from verify.judging import verdicts
from verify.node import Node
from verify.result import CheckResult, Status

CHECK_ID = "health.p2p"
PCIE_FIX = ("peer traffic between these GPUs crosses PCIe: read pcie.acs (ACS redirect bits on the bridges "
            "between them; the pcie role clears them) and pcie.iommu (pt or off for peer traffic); "
            "until then NCCL copies through host memory")
MAX_PAIRS_SAID = 8


def _pair_said(pair: tuple, links: dict, access: PeerAccess) -> str:
    """'0->1 (NV18; read NOT_SUPPORTED, write NOT_SUPPORTED)': the link, then each capability not OK."""
    notes = [links[pair]] if pair in links else []
    refused = ", ".join(f"{capability} {status}" for capability, status in access.status.get(pair, {}).items()
                        if status != "OK")
    if refused:
        notes.append(refused)
    return f"{pair[0]}->{pair[1]}" + (f" ({'; '.join(notes)})" if notes else "")


def _pairs_text(pairs: list, links: dict, access: PeerAccess) -> str:
    said = [_pair_said(pair, links, access) for pair in pairs[:MAX_PAIRS_SAID]]
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


def _source_said(access: PeerAccess) -> str:
    return {SOURCE_NVML: "NVML P2P status, read and write", SOURCE_SMI: "nvidia-smi topo -p2p r and w",
            SOURCE_CUDA: "CUDA cudaDeviceCanAccessPeer"}.get(access.source, access.source or "unknown source")


def judge(access: PeerAccess, links: dict, joined: set, basis: str, hint: str = "") -> CheckResult:
    """The verdict on one reading (a PeerAccess with at least two GPUs, from any source)."""
    count = len(access.gpus)
    pairs = len(access.can_access)
    refused = access.refused
    source = _source_said(access)
    details = {"gpus": {str(k): v for k, v in sorted(access.gpus.items())},
               "can_access": {f"{a}->{b}": can for (a, b), can in sorted(access.can_access.items())},
               "links": {f"{a}->{b}": level for (a, b), level in sorted(links.items())},
               "link_basis": basis, "source": access.source}
    if access.status:
        details["p2p_status"] = {f"{a}->{b}": named for (a, b), named in sorted(access.status.items())}
    if access.source == SOURCE_CUDA:
        details.update(mapped_by=access.mapped_by, torch=access.torch_version)
    if access.problems:
        details["payload_problems"] = access.problems
    expected = f"peer access between all {count * (count - 1)} ordered pairs"
    if not refused:
        return result(CHECK_ID, ROLE, Status.PASS, expected, f"{pairs} of {pairs} pairs",
                      f"all {count} GPUs can access each other peer to peer ({pairs} ordered pairs; {source})",
                      details=details)
    over_nvlink = [p for p in refused if p in joined]
    over_pcie = [p for p in refused if p not in joined]
    observed = f"{len(refused)} of {pairs} pairs refused"
    parts = []
    if over_nvlink:
        parts.append(f"peer access refused over active NVLink ({basis}): "
                     f"{_pairs_text(over_nvlink, links, access)}{hint}")
    if over_pcie:
        parts.append(f"peer access refused over PCIe: {_pairs_text(over_pcie, links, access)}")
    action = verdicts.REBOOT if over_nvlink else verdicts.WATCH
    details[verdicts.ACTION_KEY] = action
    fix = (verdicts.WORDS[verdicts.REBOOT] + "; where nvidia-fabricmanager is down, start it first (health.fabric)"
           if over_nvlink else PCIE_FIX)
    return result(CHECK_ID, ROLE, verdicts.status_of(action), expected, observed,
                  "; ".join(parts) + f" ({source})", details=details, fix=fix)


def run(spec: dict, node: Node) -> list:
    reason = driver_reason(node)
    if reason:
        return [skip(CHECK_ID, ROLE, reason)]
    try:  # the GPU inventory every check shares (NVML, else nvidia-smi; read once per run)
        listed = len(query_gpus(node).gpus)
    except ValueError:
        listed = None  # unknown here: the P2P matrix lists what the driver sees
    if listed is not None and listed < 2:  # one GPU has no pair to ask about
        return [skip(CHECK_ID, ROLE, f"{listed} GPU on this node: no pair to access peer to peer")]
    access = read_peer_access(node)  # NVML or nvidia-smi: never a CUDA context
    if access.skip_reason:
        return [skip(CHECK_ID, ROLE, f"peer access cannot be read here: {access.skip_reason}")]
    if access.error:
        return [result(CHECK_ID, ROLE, Status.ERROR, reason=access.error,
                       details={"source": access.source, "partial_output": access.raw,
                                "payload_problems": access.problems})]
    if len(access.gpus) < 2:
        return [skip(CHECK_ID, ROLE, f"{len(access.gpus)} GPU in {_source_said(access)}: "
                                     "no pair to access peer to peer")]
    refused = access.refused
    links, joined, basis = nvlinked(node, refused) if refused else ({}, set(), "")
    hint = fabric_hint(node) if joined else ""
    return [judge(access, links, joined, basis, hint)]
