"""sysctl keys read back from a fake /proc/sys."""
from __future__ import annotations

from tests.helpers.fake_node import FakeTree, desired_state
from verify.checks import sysctl
from verify.result import Status


def by_id(results):
    return {r.check_id: r for r in results}


def test_matching_mismatching_and_tab_separated_values(tmp_path):
    tree = FakeTree(tmp_path)
    tree.write("/proc/sys/net/core/rmem_max", "212992\n")
    tree.write("/proc/sys/net/ipv4/tcp_rmem", "4096\t87380\t268435456\n")  # the kernel prints tabs
    tree.write("/proc/sys/vm/swappiness", "0\n")
    results = by_id(sysctl.run(desired_state(), tree.node()))
    assert results["sysctl.net.core.rmem_max"].status is Status.FAIL
    assert results["sysctl.net.core.rmem_max"].observed == "212992"
    assert "sysctl_settings['net.core.rmem_max']" in results["sysctl.net.core.rmem_max"].remediation
    assert results["sysctl.net.ipv4.tcp_rmem"].status is Status.PASS
    assert results["sysctl.vm.swappiness"].status is Status.PASS


def test_skip_keys_and_absent_keys(tmp_path):
    tree = FakeTree(tmp_path).write("/proc/sys/vm/swappiness", "0\n")
    spec = desired_state(sysctl={"skip_keys": ["net.core.rmem_max"]})
    results = by_id(sysctl.run(spec, tree.node()))
    assert results["sysctl.net.core.rmem_max"].status is Status.SKIP
    assert "sysctl_skip_keys" in results["sysctl.net.core.rmem_max"].reason
    # a key the kernel does not have cannot be judged: ERROR, never FAIL or PASS
    assert results["sysctl.net.ipv4.tcp_rmem"].status is Status.ERROR


def test_disabled_role_skips_with_the_variable_named(tmp_path):
    results = sysctl.run(desired_state(sysctl={"enabled": False}), FakeTree(tmp_path).node())
    assert [r.status for r in results] == [Status.SKIP]
    assert "sysctl_enabled: false" in results[0].reason


def test_key_paths():
    assert sysctl.key_path("net.ipv4.conf.all.rp_filter") == "/proc/sys/net/ipv4/conf/all/rp_filter"
    assert sysctl.key_path("net/ipv4/conf/eth0.100/mtu") == "/proc/sys/net/ipv4/conf/eth0.100/mtu"
