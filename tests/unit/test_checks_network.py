"""MTU, path MTU (captured ping output), IRQ affinity (fake sysfs) and ethtool rings/channels
(captured `ethtool -g/-l`). Fixtures: tests/fixtures/node/README.md."""
from __future__ import annotations

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner, load
from verify.checks import ethtool_params, irq_affinity, irqbalance, mtu, path_mtu
from verify.result import Status


def test_mtu_per_interface_and_missing_named_interface(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", mtu=1500).nic("ens2", mtu=9000, pci="0000:18:00.0")
    spec = desired_state(network={"interfaces": ["ens1", "ens2", "ens9"]})
    results = {r.check_id: r for r in mtu.run(spec, tree.node())}
    assert results["network.mtu.ens1"].status is Status.FAIL and results["network.mtu.ens1"].observed == 1500
    assert "network_mtu" in results["network.mtu.ens1"].remediation
    assert results["network.mtu.ens2"].status is Status.PASS
    assert results["network.mtu.ens9"].status is Status.FAIL and "not present" in results["network.mtu.ens9"].reason


def test_interface_match_by_driver_glob(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", driver="mlx5_core").nic("eno1", driver="igb", pci="0000:01:00.0", mtu=1500)
    spec = desired_state(network={"interfaces": [], "interface_match": {"driver": "mlx5*"}})
    assert [r.check_id for r in mtu.run(spec, tree.node())] == ["network.mtu.ens1"]


def test_no_interface_selected_is_a_skip(tmp_path):
    spec = desired_state(network={"interfaces": []})
    results = mtu.run(spec, FakeTree(tmp_path).nic("eth0").node())
    assert [r.status for r in results] == [Status.SKIP]


# ---- path MTU: every case below is a real `ping -M do` run on this machine (capture_ci.sh)


@pytest.mark.parametrize("fixture, received, local_mtu, hop_mtu", [
    ("ping_ok_9000", 1, None, None),
    ("ping6_ok_9000", 1, None, None),
    ("ping_local_too_big", 0, 9000, None),
    ("ping_frag_needed", 0, None, 1500),
    ("ping_silent_drop", 0, None, None),
])
def test_parse_captured_ping(fixture, received, local_mtu, hop_mtu):
    out = load(fixture)
    parsed = path_mtu.parse_ping(out.stdout, out.stderr)
    assert (parsed.received, parsed.local_mtu, parsed.path_mtu) == (received, local_mtu, hop_mtu)


def test_ping_that_printed_no_statistics_is_a_parse_error():
    out = load("ping_unknown_host")
    with pytest.raises(path_mtu.PingParseError, match="name resolution"):
        path_mtu.parse_ping(out.stdout, out.stderr)


def _path_mtu_results(tmp_path, answers, peers):
    runner = ReplayRunner(answers)
    spec = desired_state(network={"path_mtu_peers": peers})
    return path_mtu.run(spec, FakeTree(tmp_path).node(runner=runner, live=True)), runner


def test_path_mtu_pass_sends_the_mtu_minus_headers(tmp_path):
    results, runner = _path_mtu_results(tmp_path, {"ping": load("ping_ok_9000")}, ["10.77.0.2"])
    assert results[0].status is Status.PASS
    assert runner.calls[0] == ["ping", "-M", "do", "-s", "8972", "-c", "1", "-W", "2", "10.77.0.2"]


def test_a_peer_ping_could_read_as_an_option_is_refused_and_never_pinged(tmp_path):
    results, runner = _path_mtu_results(tmp_path, {"ping": load("ping_ok_9000")}, ["-fI/etc/shadow", "10.77.0.2"])
    assert results[0].status is Status.ERROR and "could be read as an option" in results[0].reason
    assert results[1].status is Status.PASS and runner.calls == [
        ["ping", "-M", "do", "-s", "8972", "-c", "1", "-W", "2", "10.77.0.2"]]


def test_path_mtu_ipv6_uses_48_bytes_of_headers(tmp_path):
    results, runner = _path_mtu_results(tmp_path, {"ping": load("ping6_ok_9000")}, ["fd77::2"])
    assert runner.calls[0][4] == "8952" and results[0].status is Status.PASS


def test_hop_at_1500_is_a_fail_naming_its_mtu(tmp_path):
    results, _ = _path_mtu_results(tmp_path, {"ping": load("ping_frag_needed")}, ["10.79.0.2"])
    assert results[0].status is Status.FAIL and results[0].observed == 1500
    assert "Frag needed" in results[0].reason


def test_silent_drop_with_small_pings_answered_is_a_fail(tmp_path):
    answers = {
        ("ping", "-M", "do", "-s", "8972", "-c", "1", "-W", "2", "10.77.0.2"): load("ping_silent_drop"),
        ("ping", "-M", "do", "-s", "1472", "-c", "1", "-W", "2", "10.77.0.2"): load("ping_small_ok"),
    }
    results, runner = _path_mtu_results(tmp_path, answers, ["10.77.0.2"])
    assert len(runner.calls) == 2
    assert results[0].status is Status.FAIL and "small pings" in results[0].reason


def test_dead_peer_is_an_error_not_a_fail(tmp_path):
    answers = {"ping": load("ping_unreachable")}
    results, _ = _path_mtu_results(tmp_path, answers, ["10.77.0.9"])
    assert results[0].status is Status.ERROR


def test_missing_ping_is_an_error_and_root_mode_skips(tmp_path):
    results, _ = _path_mtu_results(tmp_path, {}, ["10.77.0.2"])
    assert results[0].status is Status.ERROR and "iputils-ping" in results[0].reason
    spec = desired_state(network={"path_mtu_peers": ["10.77.0.2"]})
    assert path_mtu.run(spec, FakeTree(tmp_path).node())[0].status is Status.SKIP


# ---- IRQ affinity on a fake sysfs


def test_irqs_on_the_nic_numa_node_pass(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", numa=1, local_cpus="16-31", irqs={120: "16", 121: "17-18"})
    result = irq_affinity.run(desired_state(), tree.node())[0]
    assert result.status is Status.PASS and result.details["irqs"] == {"120": "16", "121": "17-18"}


def test_irq_allowed_off_node_fails_and_names_it(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", numa=1, local_cpus="16-31", irqs={120: "16", 121: "0-31"})
    result = irq_affinity.run(desired_state(), tree.node())[0]
    assert result.status is Status.FAIL
    assert "121->0-15" in result.reason and "network_irq_affinity" in result.remediation


def test_irq_affinity_skips_without_numa_information(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", numa=-1, irqs={120: "0"})
    assert irq_affinity.run(desired_state(), tree.node())[0].status is Status.SKIP
    off = desired_state(network={"irq_affinity": False})
    assert "false" in irq_affinity.run(off, tree.node())[0].reason


# ---- ethtool -g / -l, captured on this machine's virtio NIC and on a veth


def test_parse_captured_ring_and_channels():
    ring = ethtool_params.parse_sections(load("ethtool_g_virtio").stdout, ethtool_params.RING_KEYS)
    assert ring == {"max": {"rx": 256, "tx": 256}, "current": {"rx": 256, "tx": 256}}
    channels = ethtool_params.parse_sections(load("ethtool_l_veth").stdout, ethtool_params.CHANNEL_KEYS)
    assert channels == {"max": {"rx": 2, "tx": 2}, "current": {"rx": 1, "tx": 1}}


def test_ring_max_means_the_preset_maximum(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1")
    runner = ReplayRunner({("ethtool", "-g", "ens1"): load("ethtool_g_virtio")})
    spec = desired_state(network={"ring": {"rx": "max", "tx": 4096}})
    result = ethtool_params.run_ring(spec, tree.node(runner=runner, live=True))[0]
    assert result.status is Status.FAIL and result.expected == {"rx": 256, "tx": 4096}
    assert "tx 256 (want 4096)" in result.reason and "network_ring" in result.remediation


def test_driver_without_ring_support_skips(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1")
    runner = ReplayRunner({("ethtool", "-g", "ens1"): load("ethtool_g_veth")})
    result = ethtool_params.run_ring(desired_state(), tree.node(runner=runner, live=True))[0]
    assert result.status is Status.SKIP and "Operation not supported" in result.reason


def test_channels_pass_on_captured_output(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1")
    runner = ReplayRunner({("ethtool", "-l", "ens1"): load("ethtool_l_veth")})
    spec = desired_state(network={"channels": {"rx": 1, "tx": 1}})
    assert ethtool_params.run_channels(spec, tree.node(runner=runner, live=True))[0].status is Status.PASS


def test_unparseable_ethtool_output_is_an_error(tmp_path):
    from verify.runner import CommandOutput

    tree = FakeTree(tmp_path).nic("ens1")
    weird = CommandOutput(["ethtool"], 0, "Ring parameters for ens1:\nCurrent hardware settings:\nRX: lots\n", "", 0)
    runner = ReplayRunner({("ethtool", "-g", "ens1"): weird})
    assert ethtool_params.run_ring(desired_state(), tree.node(runner=runner, live=True))[0].status is Status.ERROR


# ---- irqbalance must leave pinned IRQs alone


POLICY = "#!/bin/sh\ncase \"${1##*/}\" in\n  0000:17:00.0) echo \"ban=true\" ;;  # ens1\nesac\nexit 0\n"


def _irqbalance(tree, argv):
    tree.write("/proc/4242/comm", "irqbalance\n").write("/proc/4242/cmdline", "\0".join(argv) + "\0")
    tree.write("/proc/1/comm", "systemd\n").write("/proc/1/cmdline", "/sbin/init\0")


def test_ban_mode_passes_with_a_policy_script_naming_the_nic(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", pci="0000:17:00.0")
    _irqbalance(tree, ["/usr/sbin/irqbalance", "--foreground", "--policyscript=/usr/local/sbin/tf-policy"])
    tree.write("/usr/local/sbin/tf-policy", POLICY)
    assert irqbalance.run(desired_state(), tree.node())[0].status is Status.PASS


def test_ban_mode_fails_without_policy_or_with_an_unbanned_nic(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1", pci="0000:17:00.0").nic("ens2", pci="0000:18:00.0")
    spec = desired_state(network={"interfaces": ["ens1", "ens2"]})
    _irqbalance(tree, ["/usr/sbin/irqbalance", "--foreground"])
    assert "without --policyscript" in irqbalance.run(spec, tree.node())[0].reason
    _irqbalance(tree, ["/usr/sbin/irqbalance", "--policyscript", "/usr/local/sbin/tf-policy"])
    tree.write("/usr/local/sbin/tf-policy", POLICY)
    result = irqbalance.run(spec, tree.node())[0]
    assert result.status is Status.FAIL and "does not ban 0000:18:00.0" in result.reason


def test_stop_mode_and_no_daemon(tmp_path):
    tree = FakeTree(tmp_path).nic("ens1")
    tree.write("/proc/1/comm", "systemd\n")
    stop = desired_state(network={"irqbalance_mode": "stop"})
    assert irqbalance.run(stop, tree.node())[0].status is Status.PASS
    assert irqbalance.run(desired_state(), tree.node())[0].status is Status.PASS  # ban, nothing running
    _irqbalance(tree, ["/usr/sbin/irqbalance"])
    assert irqbalance.run(stop, tree.node())[0].status is Status.FAIL
    assert irqbalance.run(desired_state(network={"irqbalance_mode": "leave"}), tree.node())[0].status is Status.SKIP
