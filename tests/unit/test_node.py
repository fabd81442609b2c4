"""The root-aware reader, cpulist parsing and node facts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree
from verify.facts.node_facts import gather_facts
from verify.kernel_rules import format_cpulist
from verify.node import Node, ReadError, parse_cpulist

SCHEMA = Path(__file__).resolve().parents[2] / "verify" / "schema" / "node_report.v1.json"


def test_reads_under_the_root_not_the_real_machine(tmp_path):
    FakeTree(tmp_path).write("/proc/sys/kernel/osrelease", "5.15.0-fake\n")
    node = Node(root=str(tmp_path))
    assert node.read_value("/proc/sys/kernel/osrelease") == "5.15.0-fake"
    assert node.read("/proc/sys/kernel/hostname") is None  # absent under the root, present on this machine
    assert not node.is_live


def test_read_int_names_the_file_when_it_holds_garbage(tmp_path):
    FakeTree(tmp_path).write("/sys/class/net/eth9/mtu", "jumbo\n")
    with pytest.raises(ReadError, match="/sys/class/net/eth9/mtu"):
        Node(root=str(tmp_path)).read_int("/sys/class/net/eth9/mtu")


def test_glob_and_readlink_answer_in_node_paths(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", driver="mlx5_core", pci="0000:17:00.0")
    node = tree.node()
    assert node.glob("/sys/class/net/*/mtu") == ["/sys/class/net/ens1/mtu"]
    assert node.readlink_name("/sys/class/net/ens1/device/driver") == "mlx5_core"
    assert node.readlink_name("/sys/class/net/ens1/device") == "0000:17:00.0"


@pytest.mark.parametrize("text, cpus", [
    ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}),
    # The kernel's stride is A-B:USED/GROUP (bitmap_parselist; Linux 6.18 refuses "0-7:2").
    ("0-7:1/2", {0, 2, 4, 6}),
    ("5", {5}),
    ("", set()),
])
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["3-1", "a-b", "0-7:0", "0-7:2", "1,,x", "0-99999999"])
def test_parse_cpulist_rejects_malformed(text):
    with pytest.raises(ValueError):
        parse_cpulist(text)


@given(st.sets(st.integers(min_value=0, max_value=511), max_size=64))
def test_cpulist_round_trip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_facts_from_a_fake_tree(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", mtu=9000, numa=1)
    tree.write("/etc/os-release", 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n')
    tree.write("/etc/hostname", "gpu-node-07\n").write("/proc/sys/kernel/osrelease", "5.15.0-105-generic\n")
    tree.write("/sys/devices/system/cpu/online", "0-7\n")
    tree.write("/sys/devices/system/node/node0/cpulist", "0-3\n")
    tree.write("/sys/devices/system/node/node1/cpulist", "4-7\n")
    tree.write("/sys/class/net/ens1/speed", "400000\n")
    tree.write("/sys/block/nvme0n1/size", "7501476528\n")
    tree.write("/sys/block/nvme0n1/queue/scheduler", "[none] mq-deadline\n")
    facts = gather_facts(tree.node())
    assert facts["host"] == "gpu-node-07"
    assert facts["os"]["pretty_name"] == "Ubuntu 22.04.4 LTS"
    assert facts["cpu"]["cpus_online"] == 8 and facts["cpu"]["numa_nodes"] == {"0": "0-3", "1": "4-7"}
    nic = facts["nics"][0]
    assert (nic["name"], nic["mtu"], nic["speed_mbps"], nic["numa_node"], nic["driver"]) == \
        ("ens1", 9000, 400000, 1, "mlx5_core")
    assert facts["block_devices"][0]["size_bytes"] == 7501476528 * 512
    assert facts["gpus"]["source"] == "none" and "no NVIDIA driver" in facts["gpus"]["unavailable_reason"]


def test_facts_of_this_machine_fit_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    facts = gather_facts(Node())
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(facts, schema["properties"]["facts"])
    assert facts["kernel"] and facts["tool_versions"]["python"]
