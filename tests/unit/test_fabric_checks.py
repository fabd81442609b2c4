"""The NVSwitch fabric check on the real Node with replayed real `nvidia-smi -q` output: an 8x H100 HGX
node (Completed/Success), an A100-SXM4 still In Progress, and the 1x H100 machine's own capture (N/A)."""
from __future__ import annotations

from pathlib import Path

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_fabric
from verify.facts import fabric
from verify.result import Status
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
HGX = (FIXTURES / "pcie" / "h100sxm8-nvidia-smi-q.txt").read_text()
IN_PROGRESS = (FIXTURES / "pcie" / "a100sxm-fabric-in-progress.txt").read_text()
H100X1 = (FIXTURES / "health" / "h100x1" / "cmd" / "nvidia-smi-q.stdout").read_text()
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build\n"


def out(text: str, rc: int = 0) -> CommandOutput:
    return CommandOutput([], rc, text, "", 0.1)


def node(tmp_path, smi: str, manager_state="active\n", manager_version="Fabric Manager version is : 565.57.01\n",
         switches: int = 4):
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    for i in range(switches):  # HGX H100 boards put their NVSwitches on the host's bus (class 0x0680)
        tree.write(f"/sys/bus/pci/devices/0000:0{i}:00.0/vendor", "0x10de\n")
        tree.write(f"/sys/bus/pci/devices/0000:0{i}:00.0/class", "0x068000\n")
    state_rc = 0 if manager_state == "active\n" else 3  # systemctl is-active exits 3 for an inactive unit
    runner = ReplayRunner({tuple(fabric.SMI_ARGV): out(smi),
                           tuple(fabric.MANAGER_STATE_ARGV): out(manager_state, state_rc),
                           tuple(fabric.MANAGER_VERSION_ARGV): out(manager_version)})
    return tree.node(runner=runner, live=True)


def test_the_hgx_capture_parses_eight_completed_gpus():
    gpus = fabric.parse_smi_fabric(HGX)
    assert len(gpus) == 8 and {(g.state, g.status) for g in gpus} == {(fabric.FABRIC_COMPLETED, 0)}
    assert gpus[1].bus_id == "00000000:2A:00.0" and gpus[0].clique_id == "0"
    assert fabric.driver_version_of(HGX) == "565.57.01"


def test_a_completed_fabric_with_its_manager_passes(tmp_path):
    results = health_fabric.run(desired_state(), node(tmp_path, HGX))
    assert [r.status for r in results] == [Status.PASS] * 9
    assert results[-1].check_id == "health.fabric.manager" and results[-1].observed == "active, version 565.57.01"


def test_a_fabric_in_progress_with_the_manager_down_fails_naming_the_gpu(tmp_path):
    failed = health_fabric.run(desired_state(), node(tmp_path, IN_PROGRESS, manager_state="inactive\n"))
    gpu, manager = failed
    assert gpu.status is Status.FAIL and gpu.check_id == "health.gpu.fabric.0"
    assert "GPU 0 (00000000:07:00.0)" in gpu.reason and "nvidia-fabricmanager is not running" in gpu.reason
    assert gpu.details["action"] == "reboot"
    assert manager.status is Status.FAIL and "inactive" in manager.reason
    registering = health_fabric.run(desired_state(), node(tmp_path / "b", IN_PROGRESS))[0]
    assert registering.status is Status.WARN  # the manager runs: registration may still finish


def test_a_manager_at_another_version_than_the_driver_fails(tmp_path):
    result = health_fabric.run(desired_state(), node(tmp_path, HGX, manager_version="version is : 560.35.03\n"))[-1]
    assert result.status is Status.FAIL and "560.35.03 does not match the driver 565.57.01" in result.reason


def test_the_gpu_machine_has_no_fabric_and_skips(tmp_path):
    results = health_fabric.run(desired_state(), node(tmp_path, H100X1, switches=0))
    assert [r.status for r in results] == [Status.SKIP] and "no NVSwitch fabric" in results[0].reason


def test_the_schedulers_nvml_reading_is_judged_by_the_same_judge(tmp_path):
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    live = tree.node(live=True)
    live.memo[fabric.MEMO_FABRIC] = {0: (fabric.FABRIC_COMPLETED, 0), 1: (fabric.FABRIC_COMPLETED, 999)}
    rows = health_fabric.fabric_results(live)
    assert [r.status for r in rows] == [Status.PASS, Status.FAIL]


def test_a_fabric_state_a_newer_driver_prints_is_unreadable_never_a_crash():
    from bench_helpers import output, scripted_node

    from verify.facts import fabric

    smi_q = "GPU 00000000:18:00.0\n    Fabric\n        State : Degraded\n"
    node = scripted_node(lambda argv: output(argv, stdout=smi_q))
    node.memo.pop(fabric.MEMO_FABRIC, None)
    found, _, why = fabric.read_gpu_fabric(node)
    assert found == [] and "unknown fabric state 'Degraded'" in why
