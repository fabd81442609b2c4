"""The transport NCCL used for a cross-node figure, read from NCCL's own NCCL_DEBUG=INFO output
(verify.bench.nccl_parse.parse_nccl_debug), shown in the row ("NET/Socket over lo", "NET/IB mlx5_0:1/RoCE
GPUDirect RDMA") and judged against what the desired state expects.

What a channel rode is the evidence: "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0" names the NET
plugin and the index of its device, which NCCL's "NET/Socket : Using [0]lo:127.0.0.1<0>" (or "NET/IB : Using
[0]mlx5_0:1/RoCE") turns into a name. Without channel lines, the plugin the communicator got ("Using network
IB", "Assigned NET plugin IB to comm") is what its inter-node traffic used: weaker, and said so.

A node whose desired state expects RDMA (gpu_rdma_expected, which profiles set through their "vars") and
whose cross-node figure rode NCCL's socket transport is FAIL with the cause class SOCKET_NOT_RDMA
(verify.bench.causes.CAUSE_CLASSES: fix-config). A cross-node figure whose channels never crossed a network
transport (both ranks on one host, P2P or SHM) is no cross-node figure: ERROR.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from verify.bench.nccl_parse import NcclTransport, parse_nccl_debug
from verify.judging.peaks import Peak, socket_transport_bound
from verify.result import CheckResult, Status

# What every cross-node run asks NCCL to print: INIT carries the channel and "Using network" lines, NET the
# device lists, ENV the settings it read (NCCL documentation, "NCCL_DEBUG_SUBSYS").
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET"}
SOCKET, RDMA = "socket", "rdma"
SOCKET_NOT_RDMA = "nccl-socket-not-rdma"  # the cause class (verify.bench.causes.CAUSE_CLASSES)
# NET plugin name -> what it moves bytes over. NCCL's built-in plugins are "Socket" (TCP, through host memory:
# it says "GPU Direct RDMA Disabled" for every device) and "IB" (verbs: InfiniBand and RoCE); the NCCL RDMA
# SHARP plugin calls itself "IBext" or "IBext_vN" (nccl-tests#373, nccl#1029, nccl#1814), aws-ofi-nccl
# "Libfabric" / "AWS Libfabric" (EFA's RDMA). A plugin not listed is shown by name, never judged.
NET_PLUGINS = (("Socket", SOCKET), ("IB", RDMA), ("IBext", RDMA), ("Libfabric", RDMA), ("AWS Libfabric", RDMA))
_NET_PATH = re.compile(r"^NET/([^/]+)/(\d{1,4})(?:\((\d{1,9})\))?(.*)$", re.ASCII)
# Both "nodes" of a test on one machine (tests/device/pairwise_two_gpus.sh): each side its own NCCL host
# (NCCL_HOSTID replaces the hostname and boot id NCCL hashes to tell hosts apart, src/misc/utils.cc
# getHostHash), and NCCL's intra-node transports off, so the ranks meet over NCCL's network transport.
ONE_MACHINE_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}


def plugin_kind(plugin: Optional[str]) -> Optional[str]:
    """SOCKET, RDMA or None (a plugin NET_PLUGINS does not know)."""
    if not plugin:
        return None
    for name, kind in NET_PLUGINS:
        if plugin == name or re.fullmatch(re.escape(name) + r"_v\d+", plugin):
            return kind
    return None


def one_machine_env(host_id: str) -> dict:
    """The environment of one "node" of a cross-node test run on one machine (see ONE_MACHINE_ENV)."""
    return dict(ONE_MACHINE_ENV, NCCL_HOSTID=f"tunefleet-{host_id}")


@dataclass(frozen=True)
class CrossNode:
    """What NCCL's inter-node traffic rode, as its output says."""

    plugin: Optional[str]  # "Socket", "IB", "IBext_v8", ... (None: no network transport seen)
    devices: tuple = ()  # the plugin's devices the channels used ("lo", "mlx5_0:1/RoCE")
    gdr: bool = False  # a channel said /GDRDMA (GPUDirect RDMA)
    evidence: str = ""  # "channels" (what the channels rode) or "network" (the plugin the comm was assigned)
    intra_only: tuple = ()  # channels seen, none over a network transport: the paths they took

    @property
    def kind(self) -> Optional[str]:
        return plugin_kind(self.plugin)

    def describe(self) -> str:
        if self.plugin is None:
            if self.intra_only:
                return f"no network transport: {', '.join(self.intra_only)}"
            return "transport not reported"
        words = f"NET/{self.plugin}"
        if self.devices:
            words += (" over " if self.kind == SOCKET else " ") + ", ".join(self.devices)
        if self.gdr:
            words += " GPUDirect RDMA"
        return words if self.evidence == "channels" else f"{words} (the plugin NCCL assigned; no channel line seen)"

    def to_dict(self) -> dict:
        return {"described": self.describe(), "plugin": self.plugin, "kind": self.kind, "devices": list(self.devices),
                "gdr": self.gdr, "evidence": self.evidence, "intra_only": list(self.intra_only)}


def _device_key(plugin: str) -> str:
    # The RDMA SHARP plugin lists its HCAs under "NET/IB" (nccl#1029: "P2P plugin IBext", "NET/IB : Using ...").
    return "IB" if plugin.startswith("IB") else plugin


def crossnode(transport: NcclTransport) -> CrossNode:
    """What the inter-node traffic of this output rode (CrossNode(None) when NCCL did not say)."""
    plugins: dict = {}
    devices: list = []
    gdr = False
    for path, count in transport.paths.items():
        match = _NET_PATH.match(path)
        if not match:
            continue
        plugin, index = match.group(1), int(match.group(2))
        plugins[plugin] = plugins.get(plugin, 0) + count
        gdr = gdr or "/GDRDMA" in match.group(4)
        name = (transport.net_devices.get(_device_key(plugin)) or {}).get(index, f"device {index}")
        if name not in devices:
            devices.append(name)
    if plugins:
        plugin = max(plugins, key=plugins.get)
        return CrossNode(plugin, tuple(devices), gdr, "channels")
    if transport.paths:
        return CrossNode(None, intra_only=tuple(sorted(transport.paths)))
    if transport.networks:
        plugin = transport.networks[-1]
        listed = transport.net_devices.get(_device_key(plugin)) or {}
        return CrossNode(plugin, tuple(listed[i] for i in sorted(listed)), False, "network")
    return CrossNode(None)


def rdma_expected(spec: Optional[dict], profile: Optional[dict] = None) -> bool:
    """Whether this node's traffic between nodes must ride RDMA: the desired state's gpu.rdma_expected
    (gpu_rdma_expected, which a hardware profile sets in its "vars")."""
    gpu = (spec or {}).get("gpu") if isinstance(spec, dict) else None
    profile_vars = (profile or {}).get("vars") if isinstance(profile, dict) else None
    return (isinstance(gpu, dict) and gpu.get("rdma_expected") is True) or (
        isinstance(profile_vars, dict) and profile_vars.get("gpu_rdma_expected") is True)


def judge_crossnode(row: CheckResult, transport: NcclTransport, expects_rdma: bool,
                    socket_bound: Optional[Peak] = None) -> CrossNode:
    """Show the transport in `row` and judge it (in place): a figure that never crossed a network transport
    is ERROR; a figure above the socket transport's bound (verify.judging.peaks.socket_transport_bound) where
    sockets carried it is ERROR; RDMA expected and sockets taken is FAIL (cause SOCKET_NOT_RDMA); RDMA expected
    and NCCL silent about its transport is ERROR (nothing proves it), never PASS."""
    from verify.bench import causes

    found = crossnode(transport)
    if not isinstance(row.details, dict):
        row.details = {}
    row.details["transport"] = transport.to_dict()
    row.details["crossnode_transport"] = found.to_dict()
    row.reason = f"NCCL {found.describe()}: {row.reason}"  # first: a pair outcome keeps 300 characters
    if found.intra_only:
        row.status = Status.ERROR
        row.reason += ": the ranks never met over a network transport (both on one host?), not a cross-node figure"
        return found
    if found.kind == SOCKET and socket_bound is not None:
        row.details["crossnode_transport"]["bound"] = socket_bound.to_dict()
        if isinstance(row.observed, (int, float)) and not isinstance(row.observed, bool) \
                and row.observed > socket_bound.gbps:
            row.status = Status.ERROR
            row.reason += f": above what the socket transport can carry ({socket_bound.source}), not a measurement"
            return found
    if not expects_rdma:
        return found
    if found.kind == SOCKET:
        absent = f"; NCCL said: {'; '.join(transport.net_absent)}" if transport.net_absent else ""
        causes.name_cause(row, SOCKET_NOT_RDMA, f"NCCL used {found.describe()} between the nodes, gpu_rdma_expected "
                                                f"is true{absent}", Status.FAIL)
    elif found.plugin is None and row.status in (Status.PASS, Status.WARN):
        row.status = Status.ERROR
        row.reason += (f": RDMA is expected and NCCL named no transport in {transport.info_lines} INFO lines "
                       "(NCCL_DEBUG=INFO not honoured?)")
    return found


def judged_record(record: dict, output: str, expects_rdma: bool, socket_bound: Optional[Peak] = None) -> dict:
    """judge_crossnode on a fleet record (a CheckResult as a dict, its role kept), from the launcher's whole
    output (NCCL_DEBUG=INFO lines of the ranks it started)."""
    row = CheckResult.from_dict(record)
    judge_crossnode(row, parse_nccl_debug(output), expects_rdma, socket_bound)
    row.details["crossnode_transport"]["lines"] = evidence_lines(output)
    data = row.to_dict()
    data["role"] = record.get("role", data["role"])
    return data


def evidence_lines(output: str, most: int = 12) -> list:
    """NCCL's own lines the transport was read from (its NET device lists, the plugin it got, the first channel
    lines), at most `most`, each cut to 300 characters: the evidence a report shows beside the verdict."""
    wanted = re.compile(r"NCCL INFO (?:NET/\S+\s*:\s*(?:Using|No device)|Using network|Assigned NET plugin|"
                        r"Failed to initialize NET plugin|(?:Channel|Ring) .*\bvia\b)")
    return [line[:300] for line in output.splitlines() if wanted.search(line)][:most]


def judged_if_measured(record: dict, output: str, backend: str, spec: Optional[dict], profile: Optional[dict] = None,
                       speed_mbits: Optional[int] = None, ifname: str = "") -> dict:
    """What a cross-node launcher (verify.fleet.nccl_pair, verify.fleet.multinode) calls on its record: the
    transport judged where NCCL measured something on this host (the record has a curve), else the record as it
    is (gloo, a run that failed, a host that only took part). The socket transport's bound is this node's GPU
    PCIe link (and the NIC's speed where it has one)."""
    if backend != "nccl" or "curve" not in (record.get("details") or {}):
        return record
    return judged_record(record, output, rdma_expected(spec, profile),
                         socket_transport_bound(local_pcie_peak(), speed_mbits, ifname))


def local_pcie_peak() -> Optional[Peak]:
    """The fastest GPU PCIe link of this node (sysfs, verify.facts.hardware), None when it cannot be read."""
    from verify.facts.hardware import detect
    from verify.node import Node

    try:
        return detect(Node()).pcie_peak()
    except (OSError, ValueError):
        return None
