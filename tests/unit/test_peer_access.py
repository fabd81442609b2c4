"""Peer access (issue 31 item 3): CUDA's can-access-peer per ordered pair of GPUs, read by an engine
process (verify.facts.peer_access_engine) and judged against what joins each pair (health.p2p).

The engine is run for real here (no CUDA on this machine: it must say why and exit CANNOT_RUN), and its
output on the 1x H100 machine is replayed as captured (tests/fixtures/node/peer_access/README.md). The
judge runs on the real Node with an injected runner answering the engine with planted results in that
captured format, and `nvidia-smi topo -m` / `nvlink -s` with the 2x H200 machine's real captures.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from verify import checks
from verify.checks import health_p2p
from verify.engine import CANNOT_RUN, RESULT_MARKER
from verify.facts import peer_access
from verify.facts.gpu_query import Gpu, GpuInventory
from verify.judging import verdicts
from verify.node import Node
from verify.result import Status
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
CAPTURED = FIXTURES / "peer_access"
H200X2 = FIXTURES / "health" / "h200x2" / "cmd"  # real 2x H200, NV18 between them, driver 580.159.04
TOPO_NV18 = (H200X2 / "topo-m.stdout").read_text()
NVLINK_S = (H200X2 / "nvlink-s.stdout").read_text()
# The same capture with the pair joined by one PCIe switch instead (as a PCIe-card server prints it).
TOPO_PIX = TOPO_NV18.replace("NV18", "PIX")
H200_BUSES = ("00000000:00:06.0", "00000000:00:07.0")  # the capture's query-gpu


def captured(name: str) -> CommandOutput:
    rc = int((CAPTURED / f"{name}.rc").read_text())
    return CommandOutput(["engine"], rc, (CAPTURED / f"{name}.stdout").read_text(),
                         (CAPTURED / f"{name}.stderr").read_text(), 1.0)


def planted(can: dict, buses=H200_BUSES, name="NVIDIA H200") -> CommandOutput:
    """An engine's answer in the captured format (h100x1-engine.stdout): one marked JSON line."""
    payload = {"gpus": [{"bus_id": bus, "name": name, "ordinal": i} for i, bus in enumerate(buses)],
               "pairs": [{"can_access": ok, "dst": dst, "src": src} for (src, dst), ok in sorted(can.items())],
               "torch": "2.11.0+cu130"}
    return CommandOutput(["engine"], 0, RESULT_MARKER + json.dumps(payload, sort_keys=True) + "\n", "", 2.0)


class Runner:
    """Answers the engine, `topo -m`, `nvlink --status`, systemctl and nv-fabricmanager; records each call."""

    def __init__(self, engine: CommandOutput, topo: str = TOPO_NV18, manager: str = "active\n"):
        self.engine, self.topo, self.manager = engine, topo, manager
        self.calls: list = []

    def __call__(self, argv, timeout_s=60.0, env=None, cwd=None) -> CommandOutput:
        argv = [str(a) for a in argv]
        self.calls.append((argv, dict(env or {}), timeout_s))
        if argv[0] == sys.executable and peer_access.ENGINE in argv:
            return self.engine
        if argv == peer_access.TOPO_ARGV and self.topo is not None:
            return CommandOutput(argv, 0, self.topo, "", 0.1)
        if argv == ["nvidia-smi", "nvlink", "--status"]:
            return CommandOutput(argv, 0, NVLINK_S, "", 0.1)
        if argv[:2] == ["systemctl", "is-active"]:
            return CommandOutput(argv, 0 if self.manager == "active\n" else 3, self.manager, "", 0.1)
        if argv[0] == "nv-fabricmanager":
            return CommandOutput(argv, 0, "Fabric Manager version is : 580.159.04\n", "", 0.1)
        return CommandOutput(argv, None, "", f"[Errno 2] No such file or directory: '{argv[0]}'", 0.0, missing=True)


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


# ---- the engine, for real and as captured ----------------------------------------------------------------

def test_the_engine_without_cuda_exits_cannot_run_saying_why_and_prints_no_result():
    """The real engine through the real runner and Node: this machine has no CUDA device (torch may or
    may not be importable by this interpreter: both are a reason, never a result or a traceback)."""
    runner_calls = []

    def real(argv, timeout_s=60.0, env=None, cwd=None):
        from verify.runner import run_command

        runner_calls.append((list(argv), dict(env or {}), cwd))
        return run_command(argv, timeout_s=timeout_s, env=env, cwd=cwd)

    found = peer_access.read_peer_access(Node(runner=real))
    assert found.raw["returncode"] == CANNOT_RUN and not found.error and not found.can_access
    assert found.skip_reason == "torch sees no CUDA device" or found.skip_reason.startswith("torch is not importable")
    assert RESULT_MARKER not in found.raw["stdout_tail"] and "Traceback" not in found.raw["stderr_tail"]
    argv, env, cwd = runner_calls[0]
    assert argv[:3] == [sys.executable, "-I", "-u"] and peer_access.ENGINE in argv  # isolated, verify.engine
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and cwd == "/"


def test_the_cpu_capture_is_a_skip_naming_the_reason(tmp_path):
    result = p2p(tmp_path, Runner(captured("cpu-no-cuda")))
    assert result.status is Status.SKIP and result.reason.endswith("torch sees no CUDA device")


def test_the_h100_capture_parses_and_one_gpu_skips(tmp_path):
    out = captured("h100x1-engine")
    found = peer_access.parse_peer_result(out.stdout, {"00000000:00:06.0": 0})
    assert found.gpus == {0: "NVIDIA H100 80GB HBM3"} and found.can_access == {} and found.mapped_by == "bus id"
    assert found.torch_version == "2.11.0+cu130" and not found.error
    runner = Runner(out)
    result = p2p(tmp_path, runner, buses=("00000000:00:06.0",))
    assert result.status is Status.SKIP and result.reason == "1 GPU on this node: no pair to access peer to peer"
    assert runner.calls == []  # one GPU in the inventory: no engine started, nothing more asked


def test_the_h100_topology_capture_has_no_gpu_pair():
    assert peer_access.parse_topo_gpu_links((CAPTURED / "h100x1-topo-m.stdout").read_text()) == {}


def test_the_h200_topology_capture_joins_the_pair_by_18_nvlinks():
    links = peer_access.parse_topo_gpu_links(TOPO_NV18)
    assert links == {(0, 1): "NV18", (1, 0): "NV18"}
    assert peer_access.nvlink_count(links[(0, 1)]) == 18 and peer_access.nvlink_count("PIX") == 0


def test_a_topology_cell_that_is_no_level_is_an_error_naming_the_line():
    with pytest.raises(peer_access.TopoParseError, match=r"line 3 \(GPU1, GPU0\)"):
        peer_access.parse_topo_gpu_links(TOPO_NV18.replace("GPU1\tNV18", "GPU1\tNV?"))


def test_cuda_ordinals_are_mapped_to_nvidia_smi_indices_by_bus_id():
    """CUDA numbered the GPU at 00:07.0 first: its refusal belongs to nvidia-smi's GPU 1."""
    out = planted({(0, 1): False, (1, 0): True}, buses=("0000:00:07.0", "0000:00:06.0"))
    found = peer_access.parse_peer_result(out.stdout, {H200_BUSES[0]: 0, H200_BUSES[1]: 1})
    assert found.refused == [(1, 0)] and found.mapped_by == "bus id"
    by_ordinal = peer_access.parse_peer_result(out.stdout, {})
    assert by_ordinal.refused == [(0, 1)] and by_ordinal.mapped_by == "ordinal"


# ---- the judge on planted answers ------------------------------------------------------------------------

def test_every_pair_can_access_passes(tmp_path):
    result = p2p(tmp_path, Runner(planted({(0, 1): True, (1, 0): True})))
    assert result.status is Status.PASS and result.observed == "2 of 2 pairs"
    assert result.details["can_access"] == {"0->1": True, "1->0": True} and result.remediation == ""


def test_refused_over_active_nvlink_fails_naming_the_pairs(tmp_path):
    result = p2p(tmp_path, Runner(planted({(0, 1): False, (1, 0): False})))
    assert result.status is Status.FAIL and result.details[verdicts.ACTION_KEY] == verdicts.REBOOT
    assert "refused over active NVLink (nvidia-smi topo -m): 0->1 (NV18), 1->0 (NV18)" in result.reason
    assert "drain the node and reboot it" in result.remediation and "nvidia-fabricmanager" in result.remediation
    assert result.observed == "2 of 2 pairs refused"


def test_with_nvswitches_and_the_fabric_manager_down_the_fail_says_so(tmp_path):
    runner = Runner(planted({(0, 1): False, (1, 0): True}), manager="inactive\n")
    result = p2p(tmp_path, runner, switches=4)
    assert result.status is Status.FAIL and "0->1 (NV18)" in result.reason and "1->0" not in result.reason
    assert "nvidia-fabricmanager is inactive (see health.fabric)" in result.reason


def test_refused_over_pcie_warns_and_points_to_acs_and_iommu(tmp_path):
    result = p2p(tmp_path, Runner(planted({(0, 1): False, (1, 0): False}), topo=TOPO_PIX), switches=4)
    assert result.status is Status.WARN and result.details[verdicts.ACTION_KEY] == verdicts.WATCH
    assert result.reason == "peer access refused over PCIe: 0->1 (PIX), 1->0 (PIX)"
    assert "pcie.acs" in result.remediation and "pcie.iommu" in result.remediation
    assert "fabricmanager" not in result.reason  # the manager is NVLink's business only


def test_without_topo_both_gpus_with_active_nvlinks_count_as_joined(tmp_path):
    """`nvidia-smi topo -m` unreadable: the real `nvlink --status` of the H200 pair (18 links each) decides."""
    result = p2p(tmp_path, Runner(planted({(0, 1): False, (1, 0): True}), topo=None))
    assert result.status is Status.FAIL and "0->1" in result.reason
    assert "active NVLinks on both GPUs" in result.details["link_basis"]


@pytest.mark.parametrize("out, said", [
    (CommandOutput(["engine"], None, "", "", 120.0, timed_out=True), "hung: killed after 120 s"),
    (CommandOutput(["engine"], 1, "", "Traceback ...\nRuntimeError: CUDA error: unknown error\n", 1.0),
     "exited 1 without a result: RuntimeError: CUDA error: unknown error"),
    (CommandOutput(["engine"], 0, RESULT_MARKER + '{"gpus": [], "torch": "2"}\n', "", 1.0),
     "malformed result: gpus: empty list; pairs: missing"),
])
def test_an_engine_that_gives_no_usable_answer_is_an_error_not_a_verdict(tmp_path, out, said):
    result = p2p(tmp_path, Runner(out))
    assert result.status is Status.ERROR and said in result.reason


def test_no_driver_skips_without_running_the_engine(tmp_path):
    runner = Runner(planted({(0, 1): False, (1, 0): False}))
    [result] = health_p2p.run(desired_state(), FakeTree(tmp_path).node(runner=runner, live=True))
    assert result.status is Status.SKIP
    assert "no NVIDIA driver" in result.reason and runner.calls == []


def test_the_check_is_registered_and_runs_through_the_registry(tmp_path):
    assert checks.REGISTRY["health.p2p"] == ("health", "verify.checks.health_p2p:run")
    node = gpu_node(tmp_path, Runner(planted({(0, 1): True, (1, 0): True})))
    rows = checks.run_checks(desired_state(), node, names=["health.p2p"])
    assert [(r.check_id, r.status) for r in rows] == [("health.p2p", Status.PASS)]

