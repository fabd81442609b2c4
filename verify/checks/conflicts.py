"""Settings that fight GPU networking, each named with the sysctl file that sets it.

These are WARNs, not FAILs: tunefleet does not own these knobs (a hardening baseline or the
distribution does), but each one silently costs bandwidth or breaks a transport:
- rp_filter=1 (strict) on rails that share a subnet drops replies that leave by another rail;
- arp_ignore/arp_announce 0 on such rails lets any rail answer ARP for every rail ("ARP flux");
- ip_forward=0 on a container host cuts containers (and Kubernetes pods) off the network;
- kernel.yama.ptrace_scope above 1 blocks the cross-process memory attach that UCX CMA and
  CUDA IPC handle sharing rely on (openucx/ucx#3046);
- swap in use: host swapping is a "catastrophic, multiple-orders-of-magnitude slowdown" (seeds P-20);
- NCCL debug switches left on (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_DEBUG=INFO; seeds P-13).
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Dict, List, Optional

from verify.checks.common import result, skip
from verify.kernel_rules import normalise_value
from verify.node import Node
from verify.result import CheckResult, Status

ROLE = "conflicts"
# systemd-sysctl / `sysctl --system` read files by name across these directories (an earlier
# directory's file hides a same-named later one), then /etc/sysctl.conf; the last assignment wins.
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
CONTAINER_RUNTIME_PATHS = (
    "/usr/bin/dockerd", "/usr/bin/containerd", "/usr/local/bin/containerd", "/usr/bin/podman", "/usr/bin/crio",
    "/usr/bin/kubelet", "/usr/local/bin/kubelet", "/run/containerd/containerd.sock", "/var/run/docker.sock",
)
NCCL_ENV_FILES = ("/etc/environment", "/etc/bash.bashrc")
NCCL_DEBUG_SWITCHES = {
    "NCCL_P2P_DISABLE": ("1",), "NCCL_SHM_DISABLE": ("1",), "NCCL_DEBUG": ("INFO", "TRACE"),
}
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)\s*=\s*['\"]?([^'\"#\s]*)")


# ---------------------------------------------------------------- where a sysctl value comes from

@dataclass(frozen=True)
class Assignment:
    key: str  # dotted; may hold a glob (`net.ipv4.conf.*.rp_filter`)
    value: str
    source: str  # "path:line"


def normalize_key(key: str) -> str:
    """sysctl.d(5): a leading '-' only silences errors; a key whose first separator is '/' uses '/' throughout."""
    key = key.strip().lstrip("-")
    return key.replace("/", ".") if "/" in key and "." not in key.split("/")[0] else key


def parse_sysctl_conf(text: str, path: str) -> List[Assignment]:
    assignments = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;" or "=" not in stripped:
            continue
        key, value = stripped.split("=", 1)
        assignments.append(Assignment(normalize_key(key), normalise_value(value), f"{path}:{number}"))
    return assignments


def sysctl_files(node: Node) -> List[str]:
    chosen: Dict[str, str] = {}
    for directory in SYSCTL_DIRS:
        for name in node.listdir(directory):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{directory}/{name}"
    files = [chosen[name] for name in sorted(chosen)]
    # Debian links /etc/sysctl.d/99-sysctl.conf to ../sysctl.conf: read it once.
    if "99-sysctl.conf" not in chosen:
        files.append("/etc/sysctl.conf")
    return files


def persisted_assignments(node: Node) -> List[Assignment]:
    """Every assignment the next `sysctl --system` (or boot) applies, in order."""
    assignments: List[Assignment] = []
    for path in sysctl_files(node):
        text = node.read(path)
        if text is not None:
            assignments.extend(parse_sysctl_conf(text, path))
    return assignments


def persisted(assignments: List[Assignment], key: str) -> Optional[Assignment]:
    """The assignment that wins for key (exact or glob), or None when no file sets it."""
    winner = None
    for assignment in assignments:
        if assignment.key == key or ("*" in assignment.key and fnmatch.fnmatchcase(key, assignment.key)):
            winner = assignment
    return winner


def origin(assignments: List[Assignment], key: str) -> str:
    found = persisted(assignments, key)
    if found is None:
        return f"{key}: no sysctl file sets it (kernel default, or set at runtime by a tool)"
    return f"{key} = {found.value} set by {found.source}"


def _int(node: Node, path: str) -> Optional[int]:
    value = node.read_value(path)
    return int(value) if value is not None and value.isascii() and value.lstrip("-").isdigit() else None


# ---------------------------------------------------------------- multi-rail, same subnet

def connected_subnets(route_text: str) -> Dict[str, set]:
    """Directly connected IPv4 subnets per interface, from /proc/net/route (hex, little-endian)."""
    subnets: Dict[str, set] = {}
    for line in route_text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[2] != "00000000" or fields[7] == "00000000":
            continue
        destination = ".".join(str(b) for b in reversed(bytes.fromhex(fields[1])))
        prefix = bin(int(fields[7], 16)).count("1")
        subnets.setdefault(fields[0], set()).add(f"{destination}/{prefix}")
    return subnets


def same_subnet_rails(route_text: str, interfaces: List[str]) -> Dict[str, List[str]]:
    """subnet -> the interfaces (two or more) that each have a connected route into it."""
    by_subnet: Dict[str, List[str]] = {}
    for interface, subnets in sorted(connected_subnets(route_text).items()):
        if interface not in interfaces:
            continue
        for subnet in subnets:
            by_subnet.setdefault(subnet, []).append(interface)
    return {subnet: names for subnet, names in sorted(by_subnet.items()) if len(names) > 1}


def cluster_interfaces(spec: dict, node: Node) -> List[str]:
    named = (spec.get("network") or {}).get("interfaces") or []
    if named:
        return list(named)
    # None named: every interface backed by a device (not lo, bridges, veths, container links).
    return [name for name in node.listdir("/sys/class/net") if node.exists(f"/sys/class/net/{name}/device")]


def effective(node: Node, setting: str, interface: str) -> Optional[int]:
    """rp_filter, arp_ignore and arp_announce take the larger of conf/all and conf/<interface>."""
    values = [_int(node, f"/proc/sys/net/ipv4/conf/{scope}/{setting}") for scope in ("all", interface)]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def judge_rp_filter(rails: Dict[str, List[str]], values: Dict[str, Optional[int]], default: Optional[int],
                    assignments: List[Assignment], roce: List[str]) -> CheckResult:
    check_id = "conflicts.rp_filter"
    if not rails:
        return skip(check_id, ROLE, "no two cluster interfaces share a subnet: rp_filter cannot bite")
    strict = sorted(name for names in rails.values() for name in names if values.get(name) == 1)
    if not strict and default != 1:
        return result(check_id, ROLE, Status.PASS, "rp_filter 0 or 2", {n: values.get(n) for n in sorted(values)})
    keys = ["net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter"]
    keys += [f"net.ipv4.conf.{name}.rp_filter" for name in strict]
    sources = [origin(assignments, key) for key in keys]
    shared = "; ".join(f"{subnet}: {', '.join(names)}" for subnet, names in rails.items())
    who = ", ".join(strict) if strict else "interfaces created later (conf.default)"
    kind = "RoCE rails" if roce else "rails"
    return result(
        check_id, ROLE, Status.WARN, "rp_filter 0 or 2 (loose) on rails sharing a subnet",
        {n: values.get(n) for n in sorted(values)} | {"default": default},
        f"strict reverse-path filtering (rp_filter=1) on {who}: {kind} sharing a subnet ({shared}) drop "
        f"replies routed out through another rail",
        details={"sources": sources, "shared_subnets": rails, "roce_interfaces": roce},
        fix="role sysctl: set sysctl_extra_settings net.ipv4.conf.all.rp_filter: 2 and "
            "net.ipv4.conf.default.rp_filter: 2 (and per rail), and remove the rp_filter=1 from the file in "
            "details.sources",
    )


def judge_arp(rails: Dict[str, List[str]], ignore: Dict[str, Optional[int]], announce: Dict[str, Optional[int]],
              assignments: List[Assignment]) -> CheckResult:
    check_id = "conflicts.arp_flux"
    if not rails:
        return skip(check_id, ROLE, "no two cluster interfaces share a subnet: no ARP flux possible")
    loose = sorted(n for names in rails.values() for n in names if ignore.get(n) == 0 or announce.get(n) == 0)
    observed = {n: {"arp_ignore": ignore.get(n), "arp_announce": announce.get(n)} for n in sorted(ignore)}
    if not loose:
        return result(check_id, ROLE, Status.PASS, "arp_ignore>=1, arp_announce>=1", observed)
    sources = [origin(assignments, f"net.ipv4.conf.{scope}.{s}") for scope in ("all", *loose)
               for s in ("arp_ignore", "arp_announce")]
    return result(
        check_id, ROLE, Status.WARN, "arp_ignore 1 and arp_announce 2 on rails sharing a subnet", observed,
        f"ARP flux on {', '.join(loose)}: with arp_ignore=0/arp_announce=0 any rail answers ARP for every rail's "
        "address, so traffic meant for one NIC lands on another",
        details={"sources": sources, "shared_subnets": rails},
        fix="role sysctl: set sysctl_extra_settings net.ipv4.conf.all.arp_ignore: 1 and "
            "net.ipv4.conf.all.arp_announce: 2",
    )


# ---------------------------------------------------------------- single-key conflicts

def judge_ip_forward(container_host: List[str], live: Optional[int], assignments: List[Assignment]) -> CheckResult:
    check_id = "conflicts.ip_forward"
    if not container_host:
        return skip(check_id, ROLE, "no container runtime found (docker, containerd, podman, cri-o, kubelet)")
    key = "net.ipv4.ip_forward"
    winner = persisted(assignments, key)
    persisted_zero = winner is not None and winner.value == "0"
    if live == 1 and not persisted_zero:
        return result(check_id, ROLE, Status.PASS, 1, 1)
    when = "now" if live == 0 else "after the next `sysctl --system` or reboot"
    return result(
        check_id, ROLE, Status.WARN, 1, {"live": live, "persisted": winner.value if winner else None},
        f"net.ipv4.ip_forward is 0 {when} on a container host ({', '.join(container_host)}): containers and "
        "pods lose their network",
        details={"sources": [origin(assignments, key)]},
        fix="role sysctl: set sysctl_extra_settings net.ipv4.ip_forward: 1 and remove the 0 from the file in "
            "details.sources",
    )


def judge_ptrace_scope(live: Optional[int], assignments: List[Assignment]) -> CheckResult:
    check_id = "conflicts.ptrace_scope"
    key = "kernel.yama.ptrace_scope"
    if live is None:
        return skip(check_id, ROLE, "no Yama LSM (/proc/sys/kernel/yama/ptrace_scope absent): ptrace is not restricted")
    winner = persisted(assignments, key)
    persisted_value = int(winner.value) if winner and winner.value.isascii() and winner.value.isdigit() else None
    if live <= 1 and (persisted_value is None or persisted_value <= 1):
        return result(check_id, ROLE, Status.PASS, "<= 1", live)
    return result(
        check_id, ROLE, Status.WARN, "<= 1", {"live": live, "persisted": persisted_value},
        f"kernel.yama.ptrace_scope {max(live, persisted_value or 0)} forbids the cross-process attach that UCX CMA "
        "and CUDA IPC between ranks of one node need (1 works: they call prctl(PR_SET_PTRACER))",
        details={"sources": [origin(assignments, key)]},
        fix="role sysctl: set sysctl_extra_settings kernel.yama.ptrace_scope: 1 (a value of 3 only a reboot undoes)",
    )


def judge_swap(swaps_text: Optional[str], swappiness: Optional[int]) -> CheckResult:
    check_id = "conflicts.swap"
    if swaps_text is None:
        return skip(check_id, ROLE, "/proc/swaps is unreadable")
    active = [line.split()[0] for line in swaps_text.splitlines()[1:] if line.strip()]
    if not active:
        return result(check_id, ROLE, Status.PASS, "no swap", "no swap")
    return result(
        check_id, ROLE, Status.WARN, "no swap", {"swap": active, "vm.swappiness": swappiness},
        f"swap is on ({', '.join(active)}; vm.swappiness {swappiness}): a training process that spills to swap "
        "slows by orders of magnitude instead of failing",
        fix="swapoff -a and remove the swap entries from /etc/fstab (tunefleet does not manage swap); "
            "role sysctl keeps vm.swappiness 0 meanwhile",
    )


def nccl_debug_findings(node: Node, conf_path: str, wanted: dict) -> Optional[List[str]]:
    """`file:line NAME=VALUE` for each debug switch found outside what the desired state asks for;
    None when there is no file to read at all."""
    paths = [conf_path, *NCCL_ENV_FILES, *(f"/etc/profile.d/{n}" for n in node.listdir("/etc/profile.d")
                                          if n.endswith(".sh"))]
    texts = {path: node.read(path) for path in paths}
    if all(text is None for text in texts.values()):
        return None
    findings = []
    for path, text in texts.items():
        for number, line in enumerate((text or "").splitlines(), start=1):
            match = _ENV_LINE.match(line)
            if not match:
                continue
            name, value = match.groups()
            intended = str(wanted.get(name, "")).upper() == value.upper()
            if value.upper() in NCCL_DEBUG_SWITCHES.get(name, ()) and not intended:
                findings.append(f"{path}:{number} {name}={value}")
    return findings


def judge_nccl_debug(findings: Optional[List[str]]) -> CheckResult:
    check_id = "conflicts.nccl_debug_env"
    if findings is None:
        return skip(check_id, ROLE, "no nccl.conf, /etc/environment or profile script to read")
    if not findings:
        return result(check_id, ROLE, Status.PASS, "no NCCL debug switches", "none found")
    return result(
        check_id, ROLE, Status.WARN, "no NCCL debug switches", findings,
        "NCCL debug switches left on: disabling P2P/SHM drops intra-node bandwidth from hundreds to tens of GB/s, "
        "INFO/TRACE logging adds latency",
        details={"sources": findings},
        fix="remove them from the files named, or set them in gpu_nccl_conf if they are intended",
    )


# ---------------------------------------------------------------- the check

def run(spec: dict, node: Node) -> list:
    assignments = persisted_assignments(node)
    interfaces = cluster_interfaces(spec, node)
    rails = same_subnet_rails(node.read("/proc/net/route") or "", interfaces)
    railed = sorted({n for names in rails.values() for n in names})
    roce = [n for n in railed if node.listdir(f"/sys/class/net/{n}/device/infiniband")]
    results = [
        judge_rp_filter(rails, {n: effective(node, "rp_filter", n) for n in railed},
                        _int(node, "/proc/sys/net/ipv4/conf/default/rp_filter"), assignments, roce),
        judge_arp(rails, {n: effective(node, "arp_ignore", n) for n in railed},
                  {n: effective(node, "arp_announce", n) for n in railed}, assignments),
        judge_ip_forward([p for p in CONTAINER_RUNTIME_PATHS if node.exists(p)],
                         _int(node, "/proc/sys/net/ipv4/ip_forward"), assignments),
        judge_ptrace_scope(_int(node, "/proc/sys/kernel/yama/ptrace_scope"), assignments),
        judge_swap(node.read("/proc/swaps"), _int(node, "/proc/sys/vm/swappiness")),
    ]
    gpu = spec.get("gpu") or {}
    results.append(judge_nccl_debug(nccl_debug_findings(node, gpu.get("nccl_conf_path") or "/etc/nccl.conf",
                                                        gpu.get("nccl_conf") or {})))
    return results
