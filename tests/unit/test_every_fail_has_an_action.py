"""Every FAIL carries an action class (issue 46 item 7): the walk runs EVERY registered check over failing inputs
(the recorded real nodes, each planted drill, nvidia-smi's own failure forms) and holds each FAIL to a class of
verify/judging/verdicts.py. A check the walk has no failing input for is named in NO_FAIL_HERE with the test that
fails it, so a check added without either shows here. The benchmark judges are walked in test_bench_*."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from tests.unit.test_snapshots import SNAPSHOTS, replay_node
from verify import inject
from verify.checks import REGISTRY, run_one
from verify.facts import dcgm_health, fabric, gpu_query, health_smi
from verify.judging import verdicts
from verify.node import Node
from verify.result import Status
from verify.runner import CommandOutput

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health" / "public"
# Registered checks no input of this walk makes FAIL, and where their FAILs (each with its class) are tested.
NO_FAIL_HERE = {
    "network.path_mtu": "test_path_mtu_peers.py (needs peers that answer)",
    "network.irq_affinity": "test_checks_network.py",
    "network.irqbalance": "test_security_irqbalance.py / test_checks_network.py",
    "network.ring": "test_checks_network.py (ethtool answers)",
    "network.channels": "test_checks_network.py (ethtool answers)",
    "gpu.versions": "test_checks_gpu.py",
    "cpu.governor": "test_checks_storage_memory_cpu.py",
    "memory": "test_checks_storage_memory_cpu.py",
    "conflicts": "test_conflicts.py",
    "health.pcie": "test_checks_health_pcie.py",
    "health.topology": "test_checks_health_topology.py",
    "health.p2p": "test_peer_access.py",
    "health.aer": "test_checks_health_aer.py",
    "pcie": "test_pcie_checks.py",
    "storage": "test_checks_storage_memory_cpu.py",
}


def fails_of(walked: list) -> list:
    return [r for _, r in walked if r.status is Status.FAIL]


def run_checks(spec: dict, node: Node, names=None) -> list:
    """(registered name, result) of each check run, the way verify.checks.run_checks runs them."""
    return [(name, r) for name in names or list(REGISTRY) for r in run_one(name, spec, node)]


def walk_snapshots() -> list:
    found = []
    for snapshot in SNAPSHOTS:
        spec = json.loads((snapshot / "spec.json").read_text())
        found += run_checks(spec, replay_node(snapshot))
    return found


def walk_drills(tmp_path) -> list:
    found = []
    for drill in drills.DRILLS:
        tree = drills.rebuild_sysfs(tmp_path / drill.name / "tree")
        if drill.plant_tree:
            drill.plant_tree(tree.root)
        directory = drills.make(drill, tmp_path / drill.name / "inject")
        runner = inject.load(str(directory), real=inject.no_command)
        found += run_checks(desired_state(), Node(root=str(tree.root), runner=runner, live=True))
    return found


def walk_smi_forms(tmp_path) -> list:
    """nvidia-smi's failure forms on a node whose bus shows the GPU (tests/unit/test_smi_failure_forms.py)."""
    found = []
    for number, (returncode, name) in enumerate(((15, "nvidia-smi_faulty_ogkm387-device-handle-unknown-error-"
                                                       "520.61.05.txt"),
                                                 (9, "nvidia-smi_faulty_pastebin-Bc7vp497-driver-unreachable.txt"))):
        tree = FakeTree(tmp_path / f"smi{number}")
        tree.write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.61.05\n")
        tree.write("/sys/bus/pci/devices/0000:0b:00.0/vendor", "0x10de\n")
        tree.write("/sys/bus/pci/devices/0000:0b:00.0/class", "0x030200\n")
        text = (PUBLIC / name).read_text()
        runner = ReplayRunner({tuple(health_smi.argv()): CommandOutput(health_smi.argv(), returncode, text, "", 0.1)})
        found += run_checks(desired_state(), tree.node(runner=runner, live=True),
                            names=[n for n in REGISTRY if n.startswith("health.gpu")])
    return found


def walk_gpu_faults(tmp_path) -> list:
    """The H200's real query row with a HW slowdown active and persistence off, the built Unhealthy fabric report,
    a DCGM Failure: the GPU checks' own failing inputs."""
    health = PUBLIC.parent
    header, row = (health / "h200_query-gpu_idle_590.48.01.csv").read_text().splitlines()[:2]
    names = [health_smi._header_name(c) for c in header.split(", ")]
    cells = row.split(", ")
    cells[names.index("clocks_throttle_reasons.hw_slowdown")] = "Active"
    inventory = "index, pci.bus_id, name, persistence_mode, driver_version, memory.total [MiB]\n" \
                "0, 00000000:83:00.0, NVIDIA H200, Disabled, 590.48.01, 143771 MiB\n"
    dcgm = (PUBLIC / "dcgmi-health-c_faulty_dcgm-docs-pcie-replays-built.txt").read_text().replace("Warning", "Failure")
    unhealthy = (PUBLIC / "nvidia-smi-q_faulty_fabric-unhealthy-built-from-h200x2.txt").read_text()
    answers = {tuple(health_smi.argv()): f"{header}\n{', '.join(cells)}\n", tuple(gpu_query.SMI_ARGV): inventory,
               tuple(fabric.SMI_ARGV): unhealthy, tuple(dcgm_health.ARGV): dcgm}
    tree = FakeTree(tmp_path / "gpu")
    tree.write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01\n")
    tree.write("/sys/bus/pci/devices/0000:83:00.0/vendor", "0x10de\n")
    tree.write("/sys/bus/pci/devices/0000:83:00.0/class", "0x030200\n")
    runner = ReplayRunner({argv: CommandOutput(list(argv), 0, text, "", 0.1) for argv, text in answers.items()})
    return run_checks(desired_state(), tree.node(runner=runner, live=True),
                      names=["health.gpu.clocks", "gpu.persistence_mode", "health.fabric", "health.dcgm"])


@pytest.fixture(scope="module")
def walked(tmp_path_factory) -> list:
    base = tmp_path_factory.mktemp("walk")
    return walk_snapshots() + walk_drills(base) + walk_smi_forms(base) + walk_gpu_faults(base)


def test_every_fail_of_every_check_carries_an_action_class(walked):
    missing = [(r.check_id, r.reason[:80]) for r in fails_of(walked) if verdicts.action_of(r.details) is None]
    assert fails_of(walked)
    assert missing == []


def test_the_walk_fails_every_registered_check_or_names_where_its_fails_are_tested(walked):
    failed = {name for name, r in walked if r.status is Status.FAIL}
    # a check the walk now fails is taken off NO_FAIL_HERE; one neither failed nor named is new and untested here
    assert sorted(set(REGISTRY) - failed - set(NO_FAIL_HERE)) == []
    assert sorted(failed & set(NO_FAIL_HERE)) == []


def test_every_benchmark_family_fail_carries_a_class_with_or_without_a_cause(tmp_path):
    """The benchmark judges' rows get their class in one place (verify.bench.causes.explain: a cause the node
    shows, else the family's default); a FAIL of every family, as the judges build them, comes out with one."""
    from verify.bench import CHECK_IDS, causes
    from verify.result import CheckResult

    ids = sorted(set(CHECK_IDS.values()) | {prefix + "gpu0" if prefix.endswith(".") else prefix
                                            for prefix, _, _ in causes.DEFAULT_ACTIONS})
    rows = [CheckResult(check_id, "bench", Status.FAIL, 100, 10, f"{check_id} below its floor") for check_id in ids]
    causes.explain(rows, FakeTree(tmp_path).node(runner=ReplayRunner(), live=True))
    assert [(r.check_id, verdicts.action_of(r.details)) for r in rows if verdicts.action_of(r.details) is None] == []
