"""The one home of each tuned value's direction (issue 26 item 7): settle() and compare(), shared
by the roles (kernel_values, the sysctl filters) and verify's checks."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / ".cache" / "collections"))  # `make venv`'s link

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import kernel_rules as rules  # noqa: E402

import verify.kernel_rules  # noqa: E402
from tests.helpers.plugins import load_plugin  # noqa: E402

filters = load_plugin("filter", "sysctl_tuning")


@pytest.mark.parametrize(("direction", "node", "wanted", "in_force"), [
    ("at_least", "8249672", 262144, "8249672"),  # the 1x H100's image: kept
    ("at_least", "65530", 262144, "262144"),  # stock kernel: raised
    ("at_least", "4096\t131072\t6291456\n", "4096 87380 268435456", "4096 131072 268435456"),  # field by field
    ("at_least", "4096 131072", "4096 87380 268435456", "4096 87380 268435456"),  # fields do not line up
    ("at_least", "abc", "5", "5"),
    ("at_least", "9" * 5000, "5", "5"),  # no 64-bit value: not compared as a number
    ("at_most", "1024 65535", "2048 60000", "1024 60000"),
    ("exact", "8249672", 262144, "262144"),
    ("sideways", "8249672", 262144, "262144"),  # an unknown direction is exact
])
def test_settle_keeps_only_what_is_better(direction, node, wanted, in_force):
    assert rules.settle(direction, node, wanted) == in_force


@pytest.mark.parametrize(("direction", "node", "wanted", "verdict"), [
    ("at_least", "8249672", 262144, "better"),
    ("at_least", "262144", "262144\n", "same"),
    ("at_least", "65530", 262144, "worse"),
    ("at_least", "4096 131072 268435456", "4096 87380 268435456", "better"),
    ("at_least", "4096 131072 6291456", "4096 87380 268435456", "worse"),  # the max is below
    ("exact", "8249672", 262144, "worse"),
])
def test_compare_says_same_better_or_worse(direction, node, wanted, verdict):
    assert rules.compare(direction, node, wanted) == verdict


def test_directions_name_the_ceilings_and_leave_modes_exact():
    for key in ("net.core.rmem_max", "net.ipv4.tcp_rmem", "net.core.netdev_max_backlog", "vm.max_map_count",
                "net.ipv4.neigh.default.gc_thresh3", "fs.nr_open", "limits.nofile", "limits.memlock"):
        assert rules.direction_of(key) == rules.AT_LEAST, key
    for key in ("vm.swappiness", "kernel.numa_balancing", "net.ipv4.tcp_mtu_probing",
                "net.ipv4.tcp_congestion_control", "net.ipv4.ip_local_port_range", "user.unknown_key"):
        assert rules.direction_of(key) == rules.EXACT, key
    assert rules.direction_of("vm.max_map_count", ["vm.max_map_count"]) == rules.EXACT
    assert set(rules.DIRECTIONS.values()) <= set(rules.DIRECTION_NAMES)


def test_verify_and_the_roles_read_the_same_rules():
    assert verify.kernel_rules.DIRECTIONS is rules.DIRECTIONS or verify.kernel_rules.DIRECTIONS == rules.DIRECTIONS
    assert verify.kernel_rules.settle("at_least", "8249672", 262144) == "8249672"
    assert filters.sysctl_directions({"vm.max_map_count": 1, "vm.swappiness": 0}, []) == {
        "/proc/sys/vm/max_map_count": "at_least"}
