"""GPU-HCA locality on the real Node: fake sysfs PCI trees laid out like the kernel's (device directories
nested under their bridges, /sys/bus/pci/devices links, numa_node files), and `nvidia-smi topo -m` replayed
from a real 8x NV18 node (NVIDIA/nccl issue #1453) and the project's 2x H200 machine."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_topology
from verify.checks.health_topology import TopoParseError, parse_topo
from verify.profiles import ProfileError, load_profile, validate_profile
from verify.result import Status
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
TOPO_8X = (FIXTURES / "health" / "nvidia-smi-topo-m_8x_nv18_nccl1453.txt").read_text()  # real, public
# real, the 2x H200 machine, as nvidia-smi printed it to a pipe (underline escape codes in the header)
TOPO_H200X2 = (FIXTURES / "health" / "h200x2" / "cmd" / "topo-m.stdout").read_text()
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"


def spec(profile="h100-sxm-8x") -> dict:
    state = desired_state()
    state["verify"] = {"profile": profile, "benchmarks": [], "thresholds": {}}
    return state


def pci(tree: FakeTree, host: str, chain: list, address: str, vendor: str, klass: str, numa: int = 0) -> str:
    """A PCI function nested under its bridges, as /sys/devices holds it; returns its real path."""
    real = "/sys/devices/" + "/".join([host, *chain, address])
    for name, value in (("vendor", vendor), ("class", klass), ("numa_node", numa)):
        tree.write(f"{real}/{name}", f"{value}\n")
    tree.link(f"/sys/bus/pci/devices/{address}", "../../.." + real[len("/sys"):])
    return real


def gpu(tree, host, chain, address, numa=0):
    return pci(tree, host, chain, address, "0x10de", "0x030200", numa)


def hca(tree, host, chain, address, name, numa=0):
    real = pci(tree, host, chain, address, "0x15b3", "0x020700", numa)
    tree.link(f"/sys/class/infiniband/{name}/device", "../../.." + real[len("/sys"):])


def hgx_like(tmp_path, hca1_where=("pci0000:00", ["0000:00:03.0", "0000:30:00.0", "0000:31:01.0"]), hca1_numa=0):
    """Two PCIe switches under two root ports; GPU0 + mlx5_0 on switch A, GPU1 on switch B, mlx5_1 where
    asked (by default switch B, the healthy layout)."""
    tree = FakeTree(tmp_path)
    for node in ("node0", "node1"):
        tree.write(f"/sys/devices/system/node/{node}/cpulist", "0-3\n")
    gpu(tree, "pci0000:00", ["0000:00:01.0", "0000:10:00.0", "0000:11:00.0"], "0000:18:00.0")
    hca(tree, "pci0000:00", ["0000:00:01.0", "0000:10:00.0", "0000:11:01.0"], "0000:19:00.0", "mlx5_0")
    gpu(tree, "pci0000:00", ["0000:00:03.0", "0000:30:00.0", "0000:31:00.0"], "0000:38:00.0")
    host, chain = hca1_where
    hca(tree, host, chain, "0000:c9:00.0", "mlx5_1", numa=hca1_numa)
    return tree


def test_each_gpu_with_an_hca_on_its_own_switch_passes_and_names_it(tmp_path):
    results = health_topology.run(spec(), hgx_like(tmp_path).node())
    assert [r.status for r in results] == [Status.PASS, Status.PASS]
    assert [r.observed for r in results] == ["mlx5_0 PIX", "mlx5_1 PIX"]
    assert results[0].details["levels"] == {"mlx5_0": "PIX", "mlx5_1": "PHB"}
    assert results[0].details["read_from"] == "sysfs"


def test_an_hca_moved_to_another_socket_fails_the_gpu_that_lost_it(tmp_path):
    tree = hgx_like(tmp_path, hca1_where=("pci0000:80", ["0000:80:01.0"]), hca1_numa=1)
    first, second = health_topology.run(spec(), tree.node())
    assert first.status is Status.PASS
    assert second.status is Status.FAIL
    # GPU1's nearest is now mlx5_0, across the host bridge: named with the level and what it means
    assert second.observed == "mlx5_0 PHB" and "only through the CPU's PCIe host bridge" in second.reason
    assert "GPU at 0000:38:00.0" in second.reason and "NCCL_NET_GDR_LEVEL" in second.remediation


def numa_spec() -> tuple:
    chosen = copy.deepcopy(load_profile("h100-sxm-8x"))
    chosen["topology"] = {"gpu_hca_same": "numa"}
    return spec(), validate_profile(chosen, "test")


def test_numa_requirement_accepts_other_host_bridges_of_the_node_but_not_the_other_socket(tmp_path):
    state, chosen = numa_spec()
    same_node = hgx_like(tmp_path / "a", hca1_where=("pci0000:80", ["0000:80:01.0"]), hca1_numa=0).node()
    same_node.memo["health_profile"] = chosen
    assert [r.status for r in health_topology.run(state, same_node)] == [Status.PASS, Status.PASS]
    # GPU on the second socket's host bridge, both HCAs on the first socket: SYS to each
    tree = FakeTree(tmp_path / "b")
    for node in ("node0", "node1"):
        tree.write(f"/sys/devices/system/node/{node}/cpulist", "0-3\n")
    gpu(tree, "pci0000:40", ["0000:40:01.0"], "0000:48:00.0", numa=1)
    hca(tree, "pci0000:00", ["0000:00:01.0"], "0000:19:00.0", "mlx5_0", numa=0)
    hca(tree, "pci0000:80", ["0000:80:01.0"], "0000:c9:00.0", "mlx5_1", numa=0)
    other = tree.node()
    other.memo["health_profile"] = chosen
    second = health_topology.run(state, other)[0]
    assert second.status is Status.FAIL and second.observed == "mlx5_0 SYS" and "another NUMA node" in second.reason


def test_unknown_numa_node_on_a_two_socket_host_is_a_warning_not_a_pass(tmp_path):
    state, chosen = numa_spec()
    tree = FakeTree(tmp_path)
    for node in ("node0", "node1"):
        tree.write(f"/sys/devices/system/node/{node}/cpulist", "0-3\n")
    gpu(tree, "pci0000:40", ["0000:40:01.0"], "0000:48:00.0", numa=1)
    hca(tree, "pci0000:80", ["0000:80:01.0"], "0000:c9:00.0", "mlx5_1", numa=-1)  # firmware gives no node
    node = tree.node()
    node.memo["health_profile"] = chosen
    only = health_topology.run(state, node)[0]
    assert only.status is Status.WARN and "numa_node -1" in only.reason


def test_skips_with_the_reason_when_the_profile_does_not_ask_or_there_is_no_hca(tmp_path):
    no_ask = health_topology.run(spec("h200-x2-nvlink"), hgx_like(tmp_path / "a").node())
    assert [r.status for r in no_ask] == [Status.SKIP] and "does not ask" in no_ask[0].reason
    tree = FakeTree(tmp_path / "b")
    gpu(tree, "pci0000:00", ["0000:00:01.0"], "0000:18:00.0")
    no_hca = health_topology.run(spec(), tree.node())
    assert [r.status for r in no_hca] == [Status.SKIP] and "no RDMA HCA" in no_hca[0].reason


def smi_node(tmp_path, stdout: str, returncode: int = 0):
    """No NVIDIA function in sysfs (a container hiding the bus), one HCA, the driver loaded: the check
    falls back to nvidia-smi topo -m."""
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    hca(tree, "pci0000:00", ["0000:00:01.0"], "0000:19:00.0", "mlx5_0")
    runner = ReplayRunner({tuple(health_topology.TOPO_ARGV): CommandOutput(
        health_topology.TOPO_ARGV, returncode, stdout, "" if returncode == 0 else "NVML error", 0.0)})
    return tree.node(runner=runner, live=True), runner


def test_falls_back_to_the_real_topo_matrix_when_sysfs_lists_no_gpu(tmp_path):
    node, runner = smi_node(tmp_path, TOPO_8X)
    results = health_topology.run(spec(), node)
    assert runner.calls == [health_topology.TOPO_ARGV]
    assert [r.status for r in results] == [Status.PASS] * 8
    assert [r.observed for r in results][:2] == ["NIC8 PIX", "NIC7 PIX"]
    assert results[0].details["read_from"] == "nvidia-smi topo -m"


def test_one_cell_of_the_real_matrix_changed_to_sys_fails_that_gpu(tmp_path):
    lines = TOPO_8X.splitlines(keepends=True)
    row = lines[1].split("\t")
    assert row[0] == "GPU0" and row[17] == "PIX"
    row[17] = "SYS"  # GPU0's own NIC8 now across the socket: its nearest is NIC5 at NODE
    lines[1] = "\t".join(row)
    node, _ = smi_node(tmp_path, "".join(lines))
    first = health_topology.run(spec(), node)[0]
    assert first.status is Status.FAIL and first.observed == "NIC5 NODE" and "GPU 0" in first.reason


def test_parser_reads_the_gpu_machine_matrix_and_names_columns_from_the_nic_legend():
    assert parse_topo(TOPO_H200X2) == {"GPU0": {}, "GPU1": {}}
    with_legend = TOPO_8X + "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC8: mlx5_8\n"
    assert parse_topo(with_legend)["GPU0"]["mlx5_8"] == "PIX"


@pytest.mark.parametrize("text, where", [
    ("", "no header"),
    ("\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tQPI\t0-3\n", "line 2 (GPU0, NIC0)"),
    ("\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \n", "line 2: GPU0 has 1 cells"),
    ("\tGPU0\tNIC0\tCPU Affinity\nNIC0\tPIX\t X \n", "no GPU row"),
])
def test_parser_is_total_a_broken_matrix_is_a_named_error(text, where):
    with pytest.raises(TopoParseError, match=re.escape(where)):
        parse_topo(text)


def test_a_broken_or_failing_topo_command_is_an_error_row(tmp_path):
    node, _ = smi_node(tmp_path / "a", "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tQPI\t0-3\n")
    broken = health_topology.run(spec(), node)
    assert [r.status for r in broken] == [Status.ERROR] and "QPI" in broken[0].reason
    node, _ = smi_node(tmp_path / "b", "", returncode=255)
    failed = health_topology.run(spec(), node)
    assert [r.status for r in failed] == [Status.ERROR] and "NVML error" in failed[0].reason


@pytest.mark.parametrize("block", [{"gpu_hca_same": "socket"}, {"gpu_hca_same": "numa", "x": 1}, "numa"])
def test_profile_topology_block_is_checked_by_name(block):
    chosen = copy.deepcopy(load_profile("h100-sxm-8x"))
    chosen["topology"] = block
    with pytest.raises(ProfileError, match="topology"):
        validate_profile(chosen, "bad.json")
