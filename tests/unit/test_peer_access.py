"""Peer access (issue 31 item 3, issue 39 item 3): the driver's P2P status per ordered pair of GPUs, read
without a CUDA context (NVML in the scheduler's hooks, else `nvidia-smi topo -p2p r` and `w`), judged
against what joins each pair (health.p2p).

The nvidia-smi matrices are public pastes (tests/fixtures/node/peer_access/README.md); `nvidia-smi topo -m`
and `nvlink -s` are the 2x H200 machine's real captures. The check runs on the real Node with an injected
runner that answers those commands and records every argv (no engine, no Python process may appear). The
NVML path is the scheduler's real `prime` fed the raw readings read_raw returns.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from verify import checks
from verify.checks import health_p2p
from verify.facts import peer_access
from verify.facts.gpu_query import Gpu, GpuInventory
from verify.judging import verdicts
from verify.node import Node
from verify.result import Status
from verify.runner import CommandOutput
from verify.scheduler import nvml_facts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
CAPTURED = FIXTURES / "peer_access"
H200X2 = FIXTURES / "health" / "h200x2" / "cmd"  # real 2x H200, NV18 between them, driver 580.159.04
TOPO_NV18 = (H200X2 / "topo-m.stdout").read_text()
NVLINK_S = (H200X2 / "nvlink-s.stdout").read_text()
# The same capture with the pair joined by one PCIe switch instead (as a PCIe-card server prints it).
TOPO_PIX = TOPO_NV18.replace("NV18", "PIX")
P2P_OK = (CAPTURED / "gpux2-p2p-ok.stdout").read_text()
P2P_GNS = (CAPTURED / "rtx5090x2-p2p-gns.stdout").read_text()
H200_BUSES = ("00000000:00:06.0", "00000000:00:07.0")  # the capture's query-gpu
P2P_R, P2P_W = ["nvidia-smi", "topo", "-p2p", "r"], ["nvidia-smi", "topo", "-p2p", "w"]


def refused_one_way(cell: str) -> str:
    """The healthy paste with GPU0 -> GPU1 refused (`cell`), the reverse still OK: a planted fault in the
    captured format."""
    return P2P_OK.replace(" GPU0\tX\tOK\t", f" GPU0\tX\t{cell}\t")


class Runner:
    """Answers `topo -p2p r|w`, `topo -m`, `nvlink --status`, systemctl and nv-fabricmanager; records each argv."""

    def __init__(self, read: str = P2P_OK, write=None, topo: str = TOPO_NV18, manager: str = "active\n",
                 p2p_rc: int = 0):
        self.p2p = {"r": read, "w": read if write is None else write}
        self.topo, self.manager, self.p2p_rc = topo, manager, p2p_rc
        self.calls: list = []

    def __call__(self, argv, timeout_s=60.0, env=None, cwd=None) -> CommandOutput:
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        if argv[:3] == ["nvidia-smi", "topo", "-p2p"] and self.p2p.get(argv[3]) is not None:
            if self.p2p_rc:
                return CommandOutput(argv, self.p2p_rc, "", "Failed to initialize NVML: Unknown Error\n", 0.1)
            return CommandOutput(argv, 0, self.p2p[argv[3]], "", 0.1)
        if argv == peer_access.TOPO_ARGV and self.topo is not None:
            return CommandOutput(argv, 0, self.topo, "", 0.1)
        if argv == ["nvidia-smi", "nvlink", "--status"]:
            return CommandOutput(argv, 0, NVLINK_S, "", 0.1)
        if argv[:2] == ["systemctl", "is-active"]:
            return CommandOutput(argv, 0 if self.manager == "active\n" else 3, self.manager, "", 0.1)
        if argv[0] == "nv-fabricmanager":
            return CommandOutput(argv, 0, "Fabric Manager version is : 580.159.04\n", "", 0.1)
        return CommandOutput(argv, None, "", f"[Errno 2] No such file or directory: '{argv[0]}'", 0.0, missing=True)

    def no_engine(self) -> bool:
        """No argv started Python (an engine: verify.engine.engine_argv) nor anything but the tools above."""
        return all(argv[0] != sys.executable and "python" not in argv[0] and not any("engine" in a for a in argv)
                   for argv in self.calls)


def gpu_node(tmp_path, runner, buses=H200_BUSES, switches: int = 0) -> Node:
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", "NVRM version: 580.159.04\n")
    for i in range(switches):  # NVSwitches on the host's bus, as HGX boards have them (class 0x0680)
        tree.write(f"/sys/bus/pci/devices/0000:1{i}:00.0/vendor", "0x10de\n")
        tree.write(f"/sys/bus/pci/devices/0000:1{i}:00.0/class", "0x068000\n")
    node = tree.node(runner=runner, live=True)
    node.memo["gpus"] = GpuInventory("nvidia-smi", [Gpu(i, bus, "NVIDIA H200", True) for i, bus in enumerate(buses)])
    return node


def p2p(tmp_path, runner, **kwargs):
    rows = health_p2p.run(desired_state(), gpu_node(tmp_path, runner, **kwargs))
    assert len(rows) == 1
    return rows[0]


# ---- the parsers on public pastes and real captures -----------------------------------------------------

def test_the_public_matrices_parse_to_each_pairs_status():
    assert peer_access.parse_p2p_matrix(P2P_GNS) == {(0, 1): 2, (1, 0): 2}  # GNS = GPU_NOT_SUPPORTED
    assert peer_access.parse_p2p_matrix(P2P_OK) == {(0, 1): 0, (1, 0): 0}
    five = peer_access.parse_p2p_matrix((CAPTURED / "gpux5-p2p-p-ok.stdout").read_text())
    assert len(five) == 20 and set(five.values()) == {peer_access.STATUS_OK} and (4, 3) in five


@pytest.mark.parametrize("cell, status", [("CNS", "CHIPSET_NOT_SUPPORTED"), ("GNS", "GPU_NOT_SUPPORTED"),
                                          ("TNS", "IOH_TOPOLOGY_NOT_SUPPORTED"), ("DR", "DISABLED_BY_REGKEY"),
                                          ("NS", "NOT_SUPPORTED"), ("U", "UNKNOWN")])
def test_every_legend_cell_is_nvmls_status_of_the_same_name(cell, status):
    statuses = peer_access.parse_p2p_matrix(refused_one_way(cell))
    assert peer_access.status_name(statuses[(0, 1)]) == status and statuses[(1, 0)] == peer_access.STATUS_OK


def test_a_cell_that_is_no_status_is_an_error_naming_the_line_and_pair():
    with pytest.raises(peer_access.P2pParseError, match=r"line 2 \(GPU0, GPU1\): 'Yes' is not a P2P status"):
        peer_access.parse_p2p_matrix(refused_one_way("Yes"))
    with pytest.raises(peer_access.P2pParseError, match="GPU1 has 1 cells for 2 GPUs"):
        peer_access.parse_p2p_matrix(P2P_OK.replace(" GPU1\tOK\tX\t", " GPU1\tOK\t"))
    with pytest.raises(peer_access.P2pParseError, match="no header line"):
        peer_access.parse_p2p_matrix("Failed to initialize NVML: Unknown Error\n")


def test_the_h100_topology_capture_has_no_gpu_pair():
    assert peer_access.parse_topo_gpu_links((CAPTURED / "h100x1-topo-m.stdout").read_text()) == {}


def test_the_h200_topology_capture_joins_the_pair_by_18_nvlinks():
    links = peer_access.parse_topo_gpu_links(TOPO_NV18)
    assert links == {(0, 1): "NV18", (1, 0): "NV18"}
    assert peer_access.nvlink_count(links[(0, 1)]) == 18 and peer_access.nvlink_count("PIX") == 0


def test_a_topology_cell_that_is_no_level_is_an_error_naming_the_line():
    with pytest.raises(peer_access.TopoParseError, match=r"line 3 \(GPU1, GPU0\)"):
        peer_access.parse_topo_gpu_links(TOPO_NV18.replace("GPU1\tNV18", "GPU1\tNV?"))


# ---- health.p2p through nvidia-smi (verify --local, drills) ---------------------------------------------

def test_every_pair_ok_passes_saying_where_the_answer_came_from(tmp_path):
    runner = Runner()
    result = p2p(tmp_path, runner)
    assert result.status is Status.PASS and result.observed == "2 of 2 pairs"
    assert result.reason.endswith("(2 ordered pairs; nvidia-smi topo -p2p r and w)")
    assert result.details["source"] == peer_access.SOURCE_SMI
    both_ok = {"read": "OK", "write": "OK"}
    assert result.details["p2p_status"] == {"0->1": both_ok, "1->0": both_ok}
    assert runner.calls == [P2P_R, P2P_W] and runner.no_engine()


def test_the_public_gns_pair_over_pcie_warns_naming_the_status(tmp_path):
    result = p2p(tmp_path, Runner(P2P_GNS, topo=TOPO_PIX), switches=4)
    assert result.status is Status.WARN and result.details[verdicts.ACTION_KEY] == verdicts.WATCH
    assert result.reason == ("peer access refused over PCIe: 0->1 (PIX; read GPU_NOT_SUPPORTED, write "
                             "GPU_NOT_SUPPORTED), 1->0 (PIX; read GPU_NOT_SUPPORTED, write GPU_NOT_SUPPORTED) "
                             "(nvidia-smi topo -p2p r and w)")
    assert "pcie.acs" in result.remediation and "pcie.iommu" in result.remediation
    assert "fabricmanager" not in result.reason  # the manager is NVLink's business only


def test_refused_over_active_nvlink_fails_and_with_the_manager_down_says_so(tmp_path):
    runner = Runner(write=refused_one_way("NS"), manager="inactive\n")
    result = p2p(tmp_path, runner, switches=4)
    assert result.status is Status.FAIL and result.details[verdicts.ACTION_KEY] == verdicts.REBOOT
    assert ("peer access refused over active NVLink (nvidia-smi topo -m): 0->1 (NV18; write NOT_SUPPORTED); "
            "NVSwitches on the bus and nvidia-fabricmanager is inactive (see health.fabric)") in result.reason
    assert "1->0" not in result.reason and result.observed == "1 of 2 pairs refused"
    assert "drain the node and reboot it" in result.remediation and "nvidia-fabricmanager" in result.remediation
    assert runner.no_engine()


def test_without_topo_both_gpus_with_active_nvlinks_count_as_joined(tmp_path):
    """`nvidia-smi topo -m` unreadable: the real `nvlink --status` of the H200 pair (18 links each) decides."""
    result = p2p(tmp_path, Runner(refused_one_way("U"), topo=None))
    assert result.status is Status.FAIL and "0->1 (read UNKNOWN, write UNKNOWN)" in result.reason
    assert "active NVLinks on both GPUs" in result.details["link_basis"]


@pytest.mark.parametrize("runner, said", [
    (Runner(p2p_rc=255), "nvidia-smi topo -p2p r exited 255: Failed to initialize NVML: Unknown Error"),
    (Runner(read="GPU0 GPU1\nGPU0 X maybe\n"), "line 2 (GPU0, GPU1): 'maybe' is not a P2P status"),
    (Runner(write=(CAPTURED / "gpux5-p2p-p-ok.stdout").read_text()), "list different GPU pairs"),
])
def test_an_answer_that_cannot_be_read_is_an_error_not_a_verdict(tmp_path, runner, said):
    result = p2p(tmp_path, runner)
    assert result.status is Status.ERROR and said in result.reason
    assert result.details["source"] == peer_access.SOURCE_SMI


def test_without_nvidia_smi_it_skips_saying_so(tmp_path):
    result = p2p(tmp_path, Runner(read=None))
    assert result.status is Status.SKIP
    assert result.reason == "peer access cannot be read here: nvidia-smi is not installed"


def test_one_gpu_skips_and_asks_nothing(tmp_path):
    runner = Runner()
    result = p2p(tmp_path, runner, buses=("00000000:00:06.0",))
    assert result.status is Status.SKIP and result.reason == "1 GPU on this node: no pair to access peer to peer"
    assert runner.calls == []


def test_no_driver_skips_without_asking(tmp_path):
    runner = Runner()
    [result] = health_p2p.run(desired_state(), FakeTree(tmp_path).node(runner=runner, live=True))
    assert result.status is Status.SKIP
    assert "no NVIDIA driver" in result.reason and runner.calls == []


def test_the_check_is_registered_and_runs_through_the_registry(tmp_path):
    assert checks.REGISTRY["health.p2p"] == ("health", "verify.checks.health_p2p:run")
    node = gpu_node(tmp_path, Runner())
    rows = checks.run_checks(desired_state(), node, names=["health.p2p"])
    assert [(r.check_id, r.status) for r in rows] == [("health.p2p", Status.PASS)]


# ---- health.p2p from the scheduler's NVML session (node.memo, no command) --------------------------------

def raw_gpu(index: int, p2p: dict) -> dict:
    """One GPU as verify.scheduler.nvml.read_raw(P2P_CAPS) returns it (the fields prime reads)."""
    return {"index": index, "bus_id": H200_BUSES[index], "name": "NVIDIA H200", "uuid": f"GPU-{index}",
            "persistence": True, "memory_mib": 143771, "p2p": p2p}


def test_nvmls_reading_primed_by_the_hook_is_judged_and_no_command_runs_for_it(tmp_path):
    runner = Runner()
    node = gpu_node(tmp_path, runner)
    ok = {"read": 0, "write": 0}
    nvml_facts.prime(node, "580.159.04", [raw_gpu(0, {1: ok}), raw_gpu(1, {0: ok})])
    [result] = health_p2p.run(desired_state(), node)
    assert result.status is Status.PASS and result.details["source"] == peer_access.SOURCE_NVML
    assert result.reason.endswith("(2 ordered pairs; NVML P2P status, read and write)")
    assert runner.calls == []  # neither nvidia-smi nor an engine: the hook's one NVML session answered


def test_an_nvml_refusal_over_nvlink_names_the_status(tmp_path):
    node = gpu_node(tmp_path, Runner())
    refused, fine = {"read": 5, "write": 5}, {"read": 0, "write": 0}
    nvml_facts.prime(node, "580.159.04", [raw_gpu(0, {1: refused}), raw_gpu(1, {0: fine})])
    [result] = health_p2p.run(desired_state(), node)
    assert result.status is Status.FAIL
    assert "0->1 (NV18; read NOT_SUPPORTED, write NOT_SUPPORTED)" in result.reason
    assert result.reason.endswith("(NVML P2P status, read and write)")


def test_a_gpu_nvml_gave_no_p2p_row_leaves_the_answer_to_nvidia_smi(tmp_path):
    runner = Runner()
    node = gpu_node(tmp_path, runner)
    nvml_facts.prime(node, "580.159.04", [raw_gpu(0, {1: {"read": 0, "write": 0}}), raw_gpu(1, None)])
    assert peer_access.MEMO_P2P not in node.memo
    [result] = health_p2p.run(desired_state(), node)
    assert result.details["source"] == peer_access.SOURCE_SMI and runner.calls[:2] == [P2P_R, P2P_W]


def test_cudas_answer_from_the_benchmark_phase_is_judged_the_same_way():
    access = peer_access.PeerAccess(gpus={0: "NVIDIA H200", 1: "NVIDIA H200"},
                                    can_access={(0, 1): False, (1, 0): True}, source=peer_access.SOURCE_CUDA,
                                    torch_version="2.11.0+cu130", mapped_by="bus id")
    result = health_p2p.judge(access, {(0, 1): "NV18"}, {(0, 1)}, "nvidia-smi topo -m")
    assert result.status is Status.FAIL and result.reason.endswith("0->1 (NV18) (CUDA cudaDeviceCanAccessPeer)")
    assert result.details["torch"] == "2.11.0+cu130" and result.details["source"] == "cuda"
