"""The molecule harness's own judges: what counts as "the node changed", which value a scenario
picks so that applying it is a visible change, and which sysctl keys are host-wide."""
from __future__ import annotations

import pytest

from tests.helpers.plugins import load_molecule_file

node_state = load_molecule_file("node_state")
node_fixture = load_molecule_file("node_fixture")


def test_differences_name_section_key_and_both_values():
    before = {"sysctl": {"net.core.somaxconn": "4096"}, "net": {"tfnet0.mtu": "1500"}}
    after = {"sysctl": {"net.core.somaxconn": "8192"}, "net": {"tfnet0.mtu": "1500", "tfnet2.mtu": "1500"}}
    assert node_state.differences(before, after) == [
        "net: tfnet2.mtu: '<absent>' -> '1500'",
        "sysctl: net.core.somaxconn: '4096' -> '8192'",
    ]
    assert node_state.differences(before, before) == []


def test_allowed_drift_is_reported_apart_and_not_counted():
    lines = ["memory: thp.enabled: 'a' -> 'b'", "sysctl: net.core.somaxconn: '1' -> '2'"]
    counted, tolerated = node_state.split_drift(lines, ["^memory: "])
    assert counted == ["sysctl: net.core.somaxconn: '1' -> '2'"]
    assert tolerated == ["memory: thp.enabled: 'a' -> 'b'"]
    assert node_state.split_drift(lines, []) == (lines, [])


@pytest.mark.parametrize("key", ["fs.file-nr", "kernel.random.uuid", "fs.dentry-state", "kernel.ns_last_pid",
                                 "net.ipv6.conf.eth0.stable_secret"])
def test_kernel_counters_are_not_evidence_of_change(key):
    assert node_state.VOLATILE_SYSCTL.match(key)


@pytest.mark.parametrize("key", ["net.core.somaxconn", "vm.swappiness", "kernel.numa_balancing", "vm.nr_hugepages"])
def test_tunables_are_compared(key):
    assert not node_state.VOLATILE_SYSCTL.match(key)


def test_podman_interfaces_are_left_out_on_the_host_only():
    assert node_state.PER_INTERFACE_SYSCTL.match("net.ipv4.conf.veth1.forwarding")
    assert not node_state.PER_INTERFACE_SYSCTL.match("net.ipv4.conf.all.forwarding")
    assert not node_state.PER_INTERFACE_SYSCTL.match("net.ipv4.neigh.default.gc_thresh1")


def test_sysctls_read_a_tree(tmp_path):
    (tmp_path / "net" / "core").mkdir(parents=True)
    (tmp_path / "net" / "core" / "somaxconn").write_text("8192\n")
    (tmp_path / "fs").mkdir()
    (tmp_path / "fs" / "file-nr").write_text("1\t0\t9\n")
    (tmp_path / "net" / "ipv4").mkdir()
    (tmp_path / "net" / "ipv4" / "tcp_rmem").write_text("4096\t131072\t6291456\n")
    assert node_state.sysctls(tmp_path) == {"net.core.somaxconn": "8192", "net.ipv4.tcp_rmem": "4096 131072 6291456"}


@pytest.mark.parametrize(
    ("text", "active"),
    [("always [madvise] never", "madvise"), ("[none] mq-deadline kyber bfq", "none"), ("2560", "2560")],
)
def test_active_choice(text, active):
    assert node_fixture.active_choice(text) == active


def test_other_choice_is_a_real_change_the_kernel_offers():
    assert node_fixture.other_choice("always [madvise] never", ["never", "madvise"]) == "never"
    assert node_fixture.other_choice("always madvise [never]", ["never", "madvise"]) == "madvise"
    with pytest.raises(node_fixture.FixtureError):
        node_fixture.other_choice("[never]", ["never", "madvise"])


def test_only_net_keys_can_be_namespaced():
    # Non-net keys are host-wide whatever the kernel answers: no write is even tried.
    assert not node_fixture.namespaced("vm.swappiness")
    assert not node_fixture.namespaced("kernel.numa_balancing")
