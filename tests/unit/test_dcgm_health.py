"""DCGM's health watches (`dcgmi health -c`, issue 46 item 6): judged where DCGM runs with its watches set, SKIP
with the reason where it does not, ERROR where the report cannot be read. No public capture of the report was
found: the fixtures are built in DCGM's own format (dcgmi/Health.cpp and the lines its HealthTests.cpp asserts;
tests/fixtures/node/health/public/README.md)."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_dcgm
from verify.facts import dcgm_health
from verify.judging import verdicts
from verify.result import Status
from verify.runner import CommandOutput

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health" / "public"
FAULTY = (PUBLIC / "dcgmi-health-c_faulty_dcgm-docs-pcie-replays-built.txt").read_text()
HEALTHY = (PUBLIC / "dcgmi-health-c_healthy_dcgm-format-built.txt").read_text()


def row(left: str, right: str) -> str:
    return "| " + left.ljust(26) + "| " + right.ljust(57) + "|"


def node(tmp_path, answer=None, gpus=True):
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX  580.159.04\n")
    if gpus:
        tree.write("/sys/bus/pci/devices/0000:00:06.0/vendor", "0x10de\n")
        tree.write("/sys/bus/pci/devices/0000:00:06.0/class", "0x030200\n")
    answers = {} if answer is None else {tuple(dcgm_health.ARGV): CommandOutput(dcgm_health.ARGV, *answer, 0.1)}
    return tree.node(runner=ReplayRunner(answers), live=True)


def test_a_warning_is_watched_and_names_the_system_and_dcgms_words(tmp_path):
    (gpu0,) = health_dcgm.run(desired_state(), node(tmp_path, (0, FAULTY, "")))
    assert gpu0.check_id == "health.dcgm.gpu0" and gpu0.status is Status.WARN
    assert gpu0.details["action"] == verdicts.WATCH
    assert "PCIe system Warning: Detected more than 8 PCIe replays per minute for GPU 0 : 13 Reconnect" in gpu0.reason


def test_the_healthy_twin_passes(tmp_path):
    (only,) = health_dcgm.run(desired_state(), node(tmp_path, (0, HEALTHY, "")))
    assert only.status is Status.PASS


@pytest.mark.parametrize("answer, why", [
    (None, "dcgmi is not installed"),
    ((255, "Error: unable to establish a connection to the specified host: localhost\n"
            "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n", ""),
     "no DCGM host engine"),
    ((255, "Error: Health watches not enabled. Please enable watches. \n", ""), "health watches are not set"),
])
def test_without_dcgm_or_its_watches_it_skips_with_the_reason(tmp_path, answer, why):
    (only,) = health_dcgm.run(desired_state(), node(tmp_path, answer))
    assert only.status is Status.SKIP and why in only.reason


def test_no_gpu_no_question(tmp_path):
    runner_node = node(tmp_path, (0, FAULTY, ""), gpus=False)
    assert health_dcgm.run(desired_state(), runner_node)[0].status is Status.SKIP
    assert runner_node.runner.calls == []


@pytest.mark.parametrize("text", ["", "Health monitor systems report\n", FAULTY.replace("Warning", "Meh")])
def test_a_report_that_cannot_be_read_is_error(tmp_path, text):
    results = health_dcgm.run(desired_state(), node(tmp_path, (0, text, "")))
    assert any(r.status is Status.ERROR and "could not read dcgmi health -c" in r.reason for r in results)
    assert not any(r.status is Status.PASS for r in results)


SYSTEMS = sorted(health_dcgm.SYSTEM_CLASS) + ["some new system"]


@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from(SYSTEMS), st.sampled_from(["Warning", "Failure"]),
                          st.text(alphabet="abc .:0123", max_size=120)), min_size=1, max_size=6))
@settings(max_examples=150, deadline=None)
def test_any_report_gets_each_entitys_worst_class(incidents):
    """Reports in DCGM's layout with any entities, systems, healths and wrapped messages."""
    by_gpu: dict = {}
    for gpu, system, health, message in incidents:
        by_gpu.setdefault(gpu, []).append((system, health, message))
    overall = "Failure" if any(h == "Failure" for _, _, h, _ in incidents) else "Warning"
    lines = [row("Overall Health", overall), row("GPU", "")]
    for gpu, found in sorted(by_gpu.items()):
        lines.append(row(f"-> {gpu}", "Failure" if any(h == "Failure" for _, h, _ in found) else "Warning"))
        lines.append(row("   -> Errors", ""))
        for system, health, message in found:
            lines.append(row(f"      -> {system}", health))
            lines += [row("", message[at:at + 54].strip()) for at in range(0, len(message), 54)]
    results = health_dcgm.judge(dcgm_health.parse("\n".join(lines)))
    assert [r.check_id for r in results] == [f"health.dcgm.gpu{g}" for g in sorted(by_gpu)]
    for result, (_, found) in zip(results, sorted(by_gpu.items())):
        want = verdicts.worst(health_dcgm.SYSTEM_CLASS.get(s, verdicts.REBOOT) if h == "Failure" else verdicts.WATCH
                              for s, h, _ in found)
        assert result.details["action"] == want and result.status is verdicts.status_of(want)
        assert result.status is not Status.PASS
