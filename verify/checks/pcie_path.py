"""The PCIe path between GPUs and NICs: each device's path (root complex, root port, switch ports) for the
report, the ACS control bits of every bridge on those paths, and the IOMMU mode, judged against the pcie
role's desired state.

ACS: with Source Validation, P2P Request / Completion Redirect or Upstream Forwarding on in a bridge, peer
traffic between the GPUs and NICs below it is sent up to the root complex (or blocked), and NCCL falls back
to slower paths with no error (NCCL troubleshooting guide, "PCI Access Control Services (ACS)"). Where peer
traffic is expected (two GPUs, or a GPU and an RDMA NIC with gpu_rdma_expected) a bridge with one of those
bits on is a FAIL naming the bridge and the bits when the pcie role owns ACS (pcie_enabled and
pcie_acs_disable), else a WARN that says which variable fixes it. A virtual machine's bridges are emulated:
SKIP. Config space beyond 256 bytes is readable only by root: SKIP naming that.

IOMMU: a translating IOMMU (the default DMA domain) on bare metal puts every GPUDirect RDMA transfer through
address translation (NVIDIA GPUDirect RDMA documentation, "IOMMU"; NCCL troubleshooting guide, "IOMMU"):
the desired mode is passthrough (iommu=pt) or off. The mode in force is read from the IOMMU groups' default
domain type (/sys/kernel/iommu_groups/N/type: identity = passthrough), /sys/class/iommu and /proc/cmdline.
"""
from __future__ import annotations

from verify.checks.common import result, skip
from verify.facts.pci_path import IommuState, read_iommu, read_paths, virtualization
from verify.judging import verdicts
from verify.node import Node
from verify.pci_config import EXT_CAP_START
from verify.result import Status

ROLE = "pcie"
DEFAULTS = {"enabled": False, "acs_disable": True, "iommu": "leave"}
IOMMU_WANTED = ("pt", "off")


def settings(spec: dict) -> dict:
    """The pcie section of the desired state; a document written before the role existed gets the defaults."""
    section = spec.get("pcie") if isinstance(spec.get("pcie"), dict) else {}
    return dict(DEFAULTS, **section)


def p2p_expected(spec: dict, paths: list) -> str:
    """Why peer traffic is expected among these devices ('' when it is not)."""
    gpus = [p for p in paths if p.role == "GPU"]
    nics = [p for p in paths if p.role != "GPU"]
    if len(gpus) >= 2:
        return f"{len(gpus)} GPUs"
    if gpus and nics and (spec.get("gpu") or {}).get("rdma_expected"):
        return "a GPU and an RDMA NIC with gpu_rdma_expected"
    return ""


def path_results(paths: list) -> list:
    rows = []
    for path in paths:
        rows.append(result(f"pcie.path.{path.address}", ROLE, Status.PASS, None, path.text(),
                           f"{path.role} {path.address}: {len(path.bridges)} bridge(s) to the root complex",
                           details={"role": path.role, "hops": [hop.to_dict() for hop in path.hops]}))
    return rows


def judge_bridge(hop, below: list, owned: bool, why: str) -> object:
    """One bridge's ACS control bits; below: the devices whose path passes it."""
    check_id = f"pcie.acs.{hop.address}"
    expected = "SrcValid- ReqRedir- CmpltRedir- UpstreamFwd-"
    details = dict(hop.to_dict(), devices=below)
    if hop.acs is None and hop.config_bytes <= EXT_CAP_START:
        return skip(check_id, ROLE, f"bridge {hop.address}: only {hop.config_bytes} bytes of config space readable "
                                    "(the ACS capability lies beyond 256 bytes: run as root)", expected)
    if hop.acs is None:
        return result(check_id, ROLE, Status.PASS, expected, "no ACS capability",
                      f"bridge {hop.address} ({hop.kind}) has no ACS capability: nothing redirects", details=details)
    on = hop.acs.blocking_on()
    if not on:
        return result(check_id, ROLE, Status.PASS, expected, hop.acs.text(), details=details)
    names = ", ".join(on)
    reason = (f"bridge {hop.address} ({hop.kind}) has ACS {names} on: peer traffic of {', '.join(below)} "
              f"goes through the root complex ({why})")
    if owned:
        return result(check_id, ROLE, Status.FAIL, expected, hop.acs.text(), reason,
                      details=dict(details, **{verdicts.ACTION_KEY: None}),
                      fix="role pcie: re-run playbooks/site.yml (pcie_acs_disable); the boot unit re-applies it")
    return result(check_id, ROLE, Status.WARN, expected, hop.acs.text(), reason + "; the pcie role does not own ACS",
                  details=dict(details, **{verdicts.ACTION_KEY: verdicts.WATCH}),
                  fix="role pcie: set pcie_enabled: true (pcie_acs_disable: true) and re-run playbooks/site.yml "
                      "on bare metal")


def acs_results(spec: dict, node: Node, paths: list, virtual: str) -> list:
    wanted = settings(spec)
    if virtual:
        return [skip("pcie.acs", ROLE, f"virtual machine ({virtual}): its bridges are emulated, the host owns ACS")]
    why = p2p_expected(spec, paths)
    if not why:
        return [skip("pcie.acs", ROLE, "no peer traffic expected (fewer than two GPUs, and no GPU with an RDMA NIC "
                                       "and gpu_rdma_expected)")]
    bridges: dict = {}
    below: dict = {}
    for path in paths:
        for hop in path.bridges:
            bridges.setdefault(hop.address, hop)
            below.setdefault(hop.address, []).append(f"{path.role} {path.address}")
    if not bridges:
        return [skip("pcie.acs", ROLE, "no bridge between the GPUs / NICs and the root complex")]
    owned = bool(wanted["enabled"]) and bool(wanted["acs_disable"])
    return [judge_bridge(bridges[address], below[address], owned, why) for address in sorted(bridges)]


def judge_iommu(state: IommuState, wanted: dict, rdma: bool) -> object:
    check_id = "pcie.iommu"
    mode = state.mode()
    details = {"mode": mode, "cmdline": state.cmdline, "units": state.units, "group_types": state.group_types}
    owned = bool(wanted["enabled"]) and wanted["iommu"] in IOMMU_WANTED
    expected = wanted["iommu"] if owned else "pt or off"
    if owned and mode == wanted["iommu"]:
        return result(check_id, ROLE, Status.PASS, expected, mode, details=details)
    if mode in IOMMU_WANTED:
        if owned:  # pt asked, off found (or the reverse): both leave GPUDirect alone; the boot may be pending
            return result(check_id, ROLE, Status.WARN, expected, mode,
                          f"IOMMU is {mode}, pcie_iommu asks {wanted['iommu']} (a reboot pending?)",
                          details=dict(details, **{verdicts.ACTION_KEY: verdicts.WATCH}),
                          fix="reboot the node where the pcie role set pcie_reboot_required")
        return result(check_id, ROLE, Status.PASS, expected, mode, details=details)
    if mode == "unknown":
        return skip(check_id, ROLE, "the IOMMU mode cannot be read (no group type, no iommu= on the command line)",
                    expected)
    reason = (f"the IOMMU translates device DMA ({', '.join(sorted(set(state.group_types.values())))} domains): "
              "GPUDirect RDMA and peer traffic pay address translation")
    if owned:
        return result(check_id, ROLE, Status.FAIL, expected, mode, reason, details=dict(details, **{
            verdicts.ACTION_KEY: None}), fix="role pcie: pcie_iommu is set; reboot the node (pcie_reboot_required)")
    status = Status.WARN if rdma else Status.PASS
    return result(check_id, ROLE, status, expected, mode, reason if rdma else "no GPUDirect RDMA expected",
                  details=dict(details, **{verdicts.ACTION_KEY: verdicts.WATCH}) if rdma else details,
                  fix="role pcie: set pcie_enabled: true and pcie_iommu: pt, re-run playbooks/site.yml and reboot")


def iommu_result(spec: dict, node: Node, paths: list, virtual: str) -> object:
    if virtual:
        return skip("pcie.iommu", ROLE, f"virtual machine ({virtual}): GPUDirect and the IOMMU mode are the host's")
    if not paths:
        return skip("pcie.iommu", ROLE, "no NVIDIA GPU and no RDMA NIC on the PCI bus")
    state = read_iommu(node, [p.address for p in paths])
    return judge_iommu(state, settings(spec), bool((spec.get("gpu") or {}).get("rdma_expected")))


def run(spec: dict, node: Node) -> list:
    paths: list = read_paths(node)
    if not paths:
        return [skip("pcie.path", ROLE, "no NVIDIA GPU and no RDMA NIC on the PCI bus")]
    virtual = virtualization(node)
    return path_results(paths) + acs_results(spec, node, paths, virtual) + [iommu_result(spec, node, paths, virtual)]

