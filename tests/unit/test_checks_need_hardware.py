"""A check needs the hardware it judges (issue 47 item 2): without it, SKIP with the reason; with it (the
twin), judged. Over the real 1x H100 capture (a PCIe H100: no RDMA device, no active NVLink, one GPU) and
the same capture with the hardware planted (tests/helpers/drills.py), and fake trees for the NIC and storage
checks."""
from __future__ import annotations

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import FakeTree, desired_state
from tests.unit.test_scheduler_modes import Machine
from verify.checks import run_checks
from verify.result import Status


def untuned_spec() -> dict:
    spec = desired_state(**{role: {"enabled": False} for role in
                            ("sysctl", "network", "storage", "memory", "limits", "cpu")})
    spec["gpu"]["nvidia_peermem"] = True
    return spec


def health_rows(tmp_path, drill: str = "healthy", plant=None) -> dict:
    machine = Machine(tmp_path)
    if plant:
        plant(machine)
    node = machine.node(machine.plant(drill))
    results = run_checks(untuned_spec(), node, ["gpu.nvidia_peermem", "health.ib", "health.nvlink", "health.p2p"])
    return {r.check_id: r for r in results}


@pytest.mark.parametrize("check_id, reason", [
    ("gpu.nvidia_peermem", "no RDMA device (/sys/class/infiniband is empty or absent)"),
    ("health.ib", "no RDMA device in /sys/class/infiniband"),
    ("health.nvlink", "no active NVLink on any GPU"),
    ("health.p2p", "GPU"),
])
def test_the_real_h100_without_the_hardware_skips_saying_why(tmp_path, check_id, reason):
    row = health_rows(tmp_path)[check_id]
    assert row.status is Status.SKIP and reason in row.reason


def test_the_twins_with_the_hardware_are_judged(tmp_path):
    with_hca = health_rows(tmp_path / "hca", plant=lambda m: m.tree.write(
        "/sys/class/infiniband/mlx5_0/node_type", "1: CA\n"))
    assert with_hca["gpu.nvidia_peermem"].status is Status.FAIL  # asked by name, not loaded
    links = health_rows(tmp_path / "nvlink", "nvlink_inactive")
    assert links["health.nvlink.0"].status is Status.FAIL and links["health.nvlink.0"].details["action"] == "reboot"
    ports = Machine(tmp_path / "ib")
    drills.plant_ib_ports_down(ports.tree.root)
    judged = run_checks(untuned_spec(), ports.node(ports.plant("healthy")), ["health.ib"])
    assert {r.status for r in judged} >= {Status.PASS, Status.FAIL}


def nic_spec(**network) -> dict:
    return desired_state(network={"interfaces": ["ens1"], "irq_affinity": True, "irqbalance_mode": "ban",
                                  "mtu": 9000, **network})


@pytest.mark.parametrize("check, reason", [
    ("network.irq_affinity", "ens1 named in network_interfaces is not on this node"),
    ("network.irqbalance", "no tuned PCI NIC"),
    ("storage", "no block device matches storage_device_patterns"),
])
def test_nic_and_storage_checks_without_the_device_skip_saying_why(tmp_path, check, reason):
    [row] = run_checks(nic_spec(), FakeTree(tmp_path).node(), [check])
    assert row.status is Status.SKIP and reason in row.reason


def test_their_twins_with_the_device_are_judged(tmp_path):
    tree = FakeTree(tmp_path)
    tree.write("/sys/class/net/ens1/mtu", "1500\n")
    tree.write("/sys/block/nvme0n1/queue/scheduler", "[none] mq-deadline\n")
    tree.write("/sys/block/nvme0n1/queue/read_ahead_kb", "128\n")
    node = tree.node()
    irq = run_checks(nic_spec(), node, ["network.irq_affinity"])
    assert "no interface selected" not in irq[0].reason  # ens1 is judged (a virtual NIC has no NUMA to pin)
    storage = {r.check_id: r.status for r in run_checks(nic_spec(), node, ["storage"])}
    assert storage == {"storage.scheduler.nvme0n1": Status.PASS, "storage.read_ahead_kb.nvme0n1": Status.FAIL}
    mtu = run_checks(nic_spec(), node, ["network.mtu"])
    assert [(r.check_id, r.status) for r in mtu] == [("network.mtu.ens1", Status.FAIL)]


def test_a_named_interface_the_node_lacks_stays_a_configuration_finding(tmp_path):
    """The desired state names ens1: its absence is said (FAIL), and a hook reports it without draining
    (a configuration check's FAIL: verify.scheduler.policy.fault_of)."""
    from verify.scheduler.policy import CONFIG, fault_of

    [row] = run_checks(nic_spec(), FakeTree(tmp_path).node(), ["network.mtu"])
    assert row.status is Status.FAIL and "not present" in row.reason and fault_of(row) == CONFIG


def test_path_mtu_is_measured_on_the_live_node_only(tmp_path):
    [row] = run_checks(nic_spec(path_mtu_peers=["10.0.0.2"]), FakeTree(tmp_path).node(), ["network.path_mtu"])
    assert row.status is Status.SKIP and "live node only" in row.reason
