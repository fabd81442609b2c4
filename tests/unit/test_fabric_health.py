"""The fabric's own health of each GPU (`nvidia-smi -q` Fabric / Health, issue 46 item 6): parsed AND judged.
"Unhealthy" or a route unhealthy is FAIL reboot, Limited Capacity / degraded bandwidth / a recovery in progress
WARN watch, an incorrect configuration FAIL fix-config, a summary nvidia-smi does not document ERROR; the real
H200 report (every field N/A) and the healthy twin pass. No public -q with a non-N/A Health block was found: the
faulty file is the H200 machine's real report with GPU 0's block set (README, "built")."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_fabric
from verify.facts import fabric
from verify.judging import verdicts
from verify.result import Status
from verify.runner import CommandOutput

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
H200_Q = (HEALTH / "h200x2" / "cmd" / "nvidia-smi-q.stdout").read_text()
UNHEALTHY_Q = (HEALTH / "public" / "nvidia-smi-q_faulty_fabric-unhealthy-built-from-h200x2.txt").read_text()


def run_on(tmp_path, text: str, returncode: int = 0) -> list:
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX  580.159.04\n")
    runner = ReplayRunner({tuple(fabric.SMI_ARGV): CommandOutput(fabric.SMI_ARGV, returncode, text, "", 0.1)})
    return health_fabric.run(desired_state(), tree.node(runner=runner, live=True))


def test_an_unhealthy_fabric_is_a_fail_and_its_healthy_twin_passes(tmp_path):
    gpu0, gpu1, manager = run_on(tmp_path, UNHEALTHY_Q)
    assert gpu0.status is Status.FAIL and gpu0.details["action"] == verdicts.REBOOT
    assert "reports the GPU Unhealthy" in gpu0.reason and "route of the GPU is unhealthy" in gpu0.reason
    assert gpu0.details["health"]["Summary"] == "Unhealthy"
    assert gpu1.status is Status.PASS and manager.status is Status.SKIP


def test_the_real_report_with_no_health_block_passes(tmp_path):
    assert [r.status for r in run_on(tmp_path, H200_Q)][:2] == [Status.PASS, Status.PASS]


def test_a_fabric_state_no_driver_documents_is_error_not_skip(tmp_path):
    odd = H200_Q.replace("State                                          : Completed",
                         "State                                          : Degraded", 1)
    (row,) = run_on(tmp_path, odd)
    assert row.status is Status.ERROR and row.reason.startswith("could not read nvidia-smi -q")


def test_a_report_cut_before_its_second_gpu_is_error(tmp_path):
    (row,) = run_on(tmp_path, H200_Q.split("GPU 00000000:00:07.0")[0])
    assert row.status is Status.ERROR and "cut short" in row.reason


VALUES = {"Summary": ("Healthy", "Unhealthy", "Limited Capacity", "N/A"),
          "Bandwidth": ("Full", "Degraded", "N/A"),
          "Route Recovery in progress": ("True", "False", "N/A"),
          "Route Unhealthy": ("True", "False", "N/A"),
          "Access Timeout Recovery": ("True", "False", "N/A"),
          "Incorrect Configuration": ("None", "Incorrect SysGuid", "N/A")}
EXPECTED = {("Summary", "Unhealthy"): verdicts.REBOOT, ("Route Unhealthy", "True"): verdicts.REBOOT,
            ("Incorrect Configuration", "Incorrect SysGuid"): verdicts.FIX_CONFIG,
            ("Summary", "Limited Capacity"): verdicts.WATCH, ("Bandwidth", "Degraded"): verdicts.WATCH,
            ("Route Recovery in progress", "True"): verdicts.WATCH, ("Access Timeout Recovery", "True"): verdicts.WATCH}


@given(st.fixed_dictionaries({key: st.sampled_from(values) for key, values in VALUES.items()}))
@settings(max_examples=200, deadline=None)
def test_any_health_block_gets_the_class_of_its_worst_field(health):
    row = health_fabric.judge_fabric(0, "00000000:00:06.0", fabric.FABRIC_COMPLETED, 0, None, health)
    want = verdicts.worst(EXPECTED.get(item, verdicts.OK) for item in health.items())
    assert row.status is verdicts.status_of(want)
    if want != verdicts.OK:
        assert row.details["action"] == want
    assert not (health["Summary"] == "Unhealthy" and row.status is Status.PASS)


def test_a_summary_nvidia_smi_does_not_document_is_unreadable():
    row = health_fabric.judge_fabric(0, "00000000:00:06.0", fabric.FABRIC_COMPLETED, 0, None, {"Summary": "Meh"})
    assert row.status is Status.ERROR and "could not read the fabric health" in row.reason


def test_the_parser_reads_the_health_block_of_each_gpu():
    gpu0, gpu1 = fabric.parse_smi_fabric(UNHEALTHY_Q)
    assert gpu0.health["Route Unhealthy"] == "True" and gpu1.health["Summary"] == "Healthy"
    assert fabric.parse_smi_fabric(H200_Q)[0].health["Summary"] == "N/A"
