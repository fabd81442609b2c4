"""Block devices, huge pages / THP and the CPU governor on fake sysfs trees."""
from __future__ import annotations

from tests.helpers.fake_node import FakeTree, desired_state
from verify.checks import cpu, memory, storage
from verify.result import Status


def _disk(tree, name, scheduler="[none] mq-deadline kyber bfq", read_ahead="4096"):
    tree.write(f"/sys/block/{name}/queue/scheduler", scheduler + "\n")
    tree.write(f"/sys/block/{name}/queue/read_ahead_kb", read_ahead + "\n")


def test_only_matching_devices_are_judged(tmp_path):
    tree = FakeTree(tmp_path)
    _disk(tree, "nvme0n1")
    _disk(tree, "nvme1n1", scheduler="none [mq-deadline] kyber bfq", read_ahead="128")
    _disk(tree, "sda", scheduler="[bfq]", read_ahead="128")
    results = {r.check_id: r for r in storage.run(desired_state(), tree.node())}
    assert set(results) == {"storage.scheduler.nvme0n1", "storage.read_ahead_kb.nvme0n1",
                            "storage.scheduler.nvme1n1", "storage.read_ahead_kb.nvme1n1"}
    assert results["storage.scheduler.nvme0n1"].status is Status.PASS
    assert results["storage.scheduler.nvme1n1"].observed == "mq-deadline"
    assert results["storage.read_ahead_kb.nvme1n1"].status is Status.FAIL
    assert "storage_read_ahead_kb" in results["storage.read_ahead_kb.nvme1n1"].remediation


def test_scheduler_the_kernel_lacks_is_named(tmp_path):
    tree = FakeTree(tmp_path)
    _disk(tree, "nvme0n1", scheduler="[mq-deadline] kyber")
    result = storage.run(desired_state(), tree.node())[0]
    assert result.status is Status.FAIL and "offers only mq-deadline, kyber" in result.reason


def test_no_matching_device_skips(tmp_path):
    tree = FakeTree(tmp_path)
    _disk(tree, "vda")
    result = storage.run(desired_state(), tree.node())[0]
    assert result.status is Status.SKIP and "nvme*n*" in result.reason


def test_hugepages_total_and_per_node(tmp_path):
    tree = FakeTree(tmp_path)
    tree.write("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "1000\n")
    tree.write("/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "512\n")
    tree.write("/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages", "488\n")
    tree.write("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    tree.write("/sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never\n")
    spec = desired_state(memory={"hugepages_2m_per_node": {"0": 512, "1": 512, "2": 8}})
    results = {r.check_id: r for r in memory.run(spec, tree.node())}
    assert results["memory.hugepages_2m.node0"].status is Status.PASS
    node1 = results["memory.hugepages_2m.node1"]
    assert node1.status is Status.FAIL and (node1.expected, node1.observed) == (512, 488)
    assert results["memory.hugepages_2m.node2"].status is Status.FAIL  # no such NUMA node
    assert results["memory.hugepages_2m"].status is Status.FAIL  # 1000 < 1024
    assert results["memory.thp_enabled"].status is Status.PASS
    assert results["memory.thp_defrag"].status is Status.PASS


def test_more_pages_than_asked_pass_as_kept_warn_only_when_exact_and_zero_means_unmanaged(tmp_path):
    # The 2 MiB count is at_least (kernel_rules.DIRECTIONS): the role keeps a larger pool, so verify PASSes it.
    tree = FakeTree(tmp_path).write("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "2048\n")
    tree.write("/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "700\n")
    results = {r.check_id: r for r in memory.run(desired_state(), tree.node())}
    kept = results["memory.hugepages_2m"]
    assert kept.status is Status.PASS and kept.observed == 2048 and "kept (at_least)" in kept.reason
    per_node = desired_state(memory={"hugepages_2m": 0, "hugepages_2m_per_node": {"0": 512}})
    node0 = {r.check_id: r for r in memory.run(per_node, tree.node())}["memory.hugepages_2m.node0"]
    assert node0.status is Status.PASS and "NUMA node 0 has 700 pages" in node0.reason
    exact = desired_state(memory={"hugepages_exact": True})
    forced = {r.check_id: r for r in memory.run(exact, tree.node())}["memory.hugepages_2m"]
    assert forced.status is Status.WARN and "memory_hugepages_exact" in forced.reason
    zero = memory.run(desired_state(memory={"hugepages_2m": 0}), tree.node())
    assert {r.check_id: r.status for r in zero}["memory.hugepages_2m"] is Status.SKIP


def test_1g_pages_short_hints_at_a_pending_reboot(tmp_path):
    tree = FakeTree(tmp_path).write("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "0\n")
    results = {r.check_id: r for r in memory.run(desired_state(memory={"hugepages_1g": 8}), tree.node())}
    assert results["memory.hugepages_1g"].status is Status.FAIL and "reboot" in results["memory.hugepages_1g"].reason


def test_governor_lists_the_cpus_that_differ(tmp_path):
    tree = FakeTree(tmp_path)
    for n in range(8):
        governor = "powersave" if n in (2, 3, 4, 7) else "performance"
        tree.write(f"/sys/devices/system/cpu/cpu{n}/cpufreq/scaling_governor", governor + "\n")
    result = cpu.run(desired_state(), tree.node())[0]
    assert result.status is Status.FAIL
    assert "4 of 8 CPUs" in result.reason and "CPUs 2-4,7: powersave" in result.reason


def test_governor_skips_without_cpufreq(tmp_path):
    tree = FakeTree(tmp_path).mkdir("/sys/devices/system/cpu/cpu0")
    result = cpu.run(desired_state(), tree.node())[0]
    assert result.status is Status.SKIP and "cpufreq" in result.reason


def test_real_loop_device_of_this_machine(tmp_path):
    """The live sysfs of this machine (loop devices exist on the CI VM): the check reads what cat reads."""
    from pathlib import Path

    from verify.node import Node

    queue = Path("/sys/block/loop0/queue")
    if not queue.exists():
        import pytest

        pytest.skip("no loop0 on this machine")
    active = queue.joinpath("scheduler").read_text().split("[")[1].split("]")[0]
    spec = desired_state(storage={"device_patterns": ["loop0"], "scheduler": active,
                                  "read_ahead_kb": int(queue.joinpath("read_ahead_kb").read_text())})
    assert {r.status for r in storage.run(spec, Node())} == {Status.PASS}
