"""Conflict warnings: each names the setting, the rails or runtime it hurts, and the file that sets it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verify.checks import REGISTRY, resolve
from verify.checks import conflicts as c
from verify.node import Node
from verify.result import Status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "conflicts"
RAILS_SPEC = {"network": {"interfaces": ["rail0", "rail1", "peer0"]}, "gpu": {"nccl_conf_path": "/etc/nccl.conf",
                                                                             "nccl_conf": {}}}


def put(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def two_rail_node(root: Path, rp_all: int = 2, rp_rail: int = 0, default: int = 2) -> Node:
    put(root, "/proc/net/route", (FIXTURES / "proc_net_route_two_rails").read_text())
    put(root, "/proc/swaps", (FIXTURES / "proc_swaps_none").read_text())
    put(root, "/proc/sys/net/ipv4/conf/all/rp_filter", f"{rp_all}\n")
    put(root, "/proc/sys/net/ipv4/conf/default/rp_filter", f"{default}\n")
    for scope in ("all", "rail0", "rail1", "peer0"):
        put(root, f"/proc/sys/net/ipv4/conf/{scope}/arp_ignore", "1\n")
        put(root, f"/proc/sys/net/ipv4/conf/{scope}/arp_announce", "2\n")
    for rail in ("rail0", "rail1", "peer0"):
        put(root, f"/proc/sys/net/ipv4/conf/{rail}/rp_filter", f"{rp_rail}\n")
        (root / "sys/class/net" / rail).mkdir(parents=True, exist_ok=True)
    put(root, "/proc/sys/net/ipv4/ip_forward", "0\n")
    put(root, "/usr/lib/sysctl.d/50-default.conf", (FIXTURES / "systemd_50-default.conf").read_text())
    put(root, "/etc/sysctl.conf", (FIXTURES / "debian12_sysctl.conf").read_text())
    return Node(root=str(root), live=False)


def by_id(results: list) -> dict:
    return {r.check_id: r for r in results}


# ------------------------------------------------------------------ where values come from

def test_a_shipped_sysctl_file_is_parsed_with_line_numbers():
    assignments = c.parse_sysctl_conf((FIXTURES / "systemd_50-default.conf").read_text(), "/usr/lib/sysctl.d/50-d.conf")
    found = c.persisted(assignments, "net.ipv4.conf.all.rp_filter")
    assert (found.value, found.source) == ("2", "/usr/lib/sysctl.d/50-d.conf:25")
    assert c.persisted(assignments, "net.ipv4.ping_group_range").value == "0 2147483647"


def test_commented_out_settings_set_nothing():
    assignments = c.parse_sysctl_conf((FIXTURES / "debian12_sysctl.conf").read_text(), "/etc/sysctl.conf")
    assert c.persisted(assignments, "net.ipv4.conf.all.rp_filter") is None
    assert "no sysctl file sets it" in c.origin(assignments, "net.ipv4.conf.all.rp_filter")


def test_the_file_that_wins_is_named(tmp_path):
    node = two_rail_node(tmp_path)
    put(tmp_path, "/etc/sysctl.d/99-hardening.conf", "# CIS-style baseline\nnet.ipv4.conf.all.rp_filter = 1\n")
    put(tmp_path, "/etc/sysctl.d/10-early.conf", "net.ipv4.conf.all.rp_filter = 0\n")
    assignments = c.persisted_assignments(node)
    assert c.origin(assignments, "net.ipv4.conf.all.rp_filter") == (
        "net.ipv4.conf.all.rp_filter = 1 set by /etc/sysctl.d/99-hardening.conf:2")
    # /etc/sysctl.conf is read last and beats every sysctl.d file.
    put(tmp_path, "/etc/sysctl.conf", "net/ipv4/conf/all/rp_filter=2\n")
    assert c.origin(c.persisted_assignments(node), "net.ipv4.conf.all.rp_filter").endswith("/etc/sysctl.conf:1")


def test_an_etc_file_hides_the_vendor_file_of_the_same_name(tmp_path):
    node = two_rail_node(tmp_path)
    put(tmp_path, "/etc/sysctl.d/50-default.conf", "kernel.sysrq = 1\n")
    assert c.persisted(c.persisted_assignments(node), "net.ipv4.conf.all.rp_filter") is None


def test_debians_99_sysctl_link_is_read_once(tmp_path):
    node = two_rail_node(tmp_path)
    put(tmp_path, "/etc/sysctl.conf", "kernel.yama.ptrace_scope = 2\n")
    (tmp_path / "etc/sysctl.d").mkdir(exist_ok=True)
    os.symlink("../sysctl.conf", tmp_path / "etc/sysctl.d/99-sysctl.conf")
    sources = [a.source for a in c.persisted_assignments(node) if a.key == "kernel.yama.ptrace_scope"]
    assert sources == ["/etc/sysctl.d/99-sysctl.conf:1"]


def test_glob_keys_apply_to_every_interface():
    assignments = c.parse_sysctl_conf("-net.ipv4.conf.*.rp_filter = 1\n", "/etc/sysctl.d/x.conf")
    assert c.persisted(assignments, "net.ipv4.conf.rail1.rp_filter").value == "1"


# ------------------------------------------------------------------ rails sharing a subnet

def test_connected_subnets_from_captured_routes():
    assert c.connected_subnets((FIXTURES / "proc_net_route_two_rails").read_text()) == {
        "rail0": {"10.10.0.0/24"}, "rail1": {"10.10.0.0/24"}, "peer0": {"10.20.0.0/24"}}
    vm = c.connected_subnets((FIXTURES / "proc_net_route_vm").read_text())
    assert vm["eth0"] == {"192.0.2.0/24"}  # the default route (gateway set) is not a connected subnet


def test_only_rails_sharing_a_subnet_are_grouped():
    routes = (FIXTURES / "proc_net_route_two_rails").read_text()
    assert c.same_subnet_rails(routes, ["rail0", "rail1", "peer0"]) == {"10.10.0.0/24": ["rail0", "rail1"]}
    assert c.same_subnet_rails(routes, ["rail0", "peer0"]) == {}


def test_strict_rp_filter_on_shared_subnet_rails_warns_and_names_the_file(tmp_path):
    node = two_rail_node(tmp_path, rp_all=1)
    put(tmp_path, "/etc/sysctl.d/99-hardening.conf", "net.ipv4.conf.all.rp_filter=1\n")
    found = by_id(c.run(RAILS_SPEC, node))["conflicts.rp_filter"]
    assert found.status is Status.WARN
    assert "rail0, rail1" in found.reason and "10.10.0.0/24" in found.reason
    assert "net.ipv4.conf.all.rp_filter = 1 set by /etc/sysctl.d/99-hardening.conf:1" in found.details["sources"]
    assert "sysctl_extra_settings" in found.remediation


def test_the_larger_of_all_and_the_interface_counts(tmp_path):
    assert by_id(c.run(RAILS_SPEC, two_rail_node(tmp_path / "a", rp_all=2, rp_rail=1)))[
        "conflicts.rp_filter"].status is Status.PASS
    one_rail = by_id(c.run(RAILS_SPEC, two_rail_node(tmp_path / "b", rp_all=0, rp_rail=0)))
    assert one_rail["conflicts.rp_filter"].status is Status.PASS
    node = two_rail_node(tmp_path / "c", rp_all=0, rp_rail=0)
    put(tmp_path / "c", "/proc/sys/net/ipv4/conf/rail1/rp_filter", "1\n")
    found = by_id(c.run(RAILS_SPEC, node))["conflicts.rp_filter"]
    assert found.status is Status.WARN and "on rail1:" in found.reason


def test_strict_default_warns_for_rails_that_come_later(tmp_path):
    found = by_id(c.run(RAILS_SPEC, two_rail_node(tmp_path, default=1)))["conflicts.rp_filter"]
    assert found.status is Status.WARN and "created later" in found.reason


def test_rails_on_different_subnets_are_left_alone(tmp_path):
    spec = {"network": {"interfaces": ["rail0", "peer0"]}, "gpu": {}}
    found = by_id(c.run(spec, two_rail_node(tmp_path, rp_all=1)))
    assert found["conflicts.rp_filter"].status is Status.SKIP
    assert found["conflicts.arp_flux"].status is Status.SKIP


def test_arp_flux_on_shared_subnet_rails(tmp_path):
    node = two_rail_node(tmp_path)
    put(tmp_path, "/proc/sys/net/ipv4/conf/all/arp_ignore", "0\n")
    put(tmp_path, "/proc/sys/net/ipv4/conf/rail0/arp_ignore", "0\n")
    found = by_id(c.run(RAILS_SPEC, node))["conflicts.arp_flux"]
    assert found.status is Status.WARN and found.reason.startswith("ARP flux on rail0:")


# ------------------------------------------------------------------ container hosts, ptrace, swap, NCCL

def test_ip_forward_off_on_a_container_host(tmp_path):
    node = two_rail_node(tmp_path)
    assert by_id(c.run(RAILS_SPEC, node))["conflicts.ip_forward"].status is Status.SKIP
    put(tmp_path, "/usr/bin/podman", "")
    live = by_id(c.run(RAILS_SPEC, node))["conflicts.ip_forward"]
    assert live.status is Status.WARN and "is 0 now" in live.reason and "/usr/bin/podman" in live.reason
    # Live 1 (the runtime turned it on) but a file puts 0 back at the next sysctl --system.
    put(tmp_path, "/proc/sys/net/ipv4/ip_forward", "1\n")
    put(tmp_path, "/etc/sysctl.d/90-cis.conf", "net.ipv4.ip_forward = 0\n")
    later = by_id(c.run(RAILS_SPEC, node))["conflicts.ip_forward"]
    assert later.status is Status.WARN and "after the next" in later.reason
    assert later.details["sources"] == ["net.ipv4.ip_forward = 0 set by /etc/sysctl.d/90-cis.conf:1"]
    os.unlink(tmp_path / "etc/sysctl.d/90-cis.conf")
    assert by_id(c.run(RAILS_SPEC, node))["conflicts.ip_forward"].status is Status.PASS


@pytest.mark.parametrize(("live", "persisted", "status"),
                         [(1, None, Status.PASS), (0, None, Status.PASS), (2, None, Status.WARN),
                          (3, None, Status.WARN), (1, "2", Status.WARN)])
def test_ptrace_scope_above_one_warns(tmp_path, live, persisted, status):
    node = two_rail_node(tmp_path)
    put(tmp_path, "/proc/sys/kernel/yama/ptrace_scope", f"{live}\n")
    if persisted:
        put(tmp_path, "/etc/sysctl.d/10-ptrace.conf", f"kernel.yama.ptrace_scope = {persisted}\n")
    found = by_id(c.run(RAILS_SPEC, node))["conflicts.ptrace_scope"]
    assert found.status is status
    if persisted:
        assert found.details["sources"] == ["kernel.yama.ptrace_scope = 2 set by /etc/sysctl.d/10-ptrace.conf:1"]


def test_no_yama_is_a_skip(tmp_path):
    assert by_id(c.run(RAILS_SPEC, two_rail_node(tmp_path)))["conflicts.ptrace_scope"].status is Status.SKIP


def test_swap_in_use_warns(tmp_path):
    assert c.judge_swap((FIXTURES / "proc_swaps_none").read_text(), 0).status is Status.PASS
    found = c.judge_swap((FIXTURES / "proc_swaps_one_file").read_text(), 60)
    assert found.status is Status.WARN and "/tmp/h3/swapfile" in found.reason and "vm.swappiness 60" in found.reason


def test_nccl_debug_switches_left_on_are_named_by_file_and_line(tmp_path):
    node = two_rail_node(tmp_path)
    put(tmp_path, "/etc/nccl.conf", "NCCL_SOCKET_IFNAME=rail0\nNCCL_P2P_DISABLE=1\n")
    put(tmp_path, "/etc/profile.d/debug.sh", "export NCCL_DEBUG=INFO\nexport NCCL_SHM_DISABLE='1'\n")
    found = by_id(c.run(RAILS_SPEC, node))["conflicts.nccl_debug_env"]
    assert found.status is Status.WARN
    assert found.observed == ["/etc/nccl.conf:2 NCCL_P2P_DISABLE=1", "/etc/profile.d/debug.sh:1 NCCL_DEBUG=INFO",
                              "/etc/profile.d/debug.sh:2 NCCL_SHM_DISABLE=1"]
    os.unlink(tmp_path / "etc/profile.d/debug.sh")
    put(tmp_path, "/etc/nccl.conf", "NCCL_SOCKET_IFNAME=rail0\n")
    assert by_id(c.run(RAILS_SPEC, node))["conflicts.nccl_debug_env"].status is Status.PASS
    os.unlink(tmp_path / "etc/nccl.conf")
    assert by_id(c.run(RAILS_SPEC, node))["conflicts.nccl_debug_env"].status is Status.SKIP
    put(tmp_path, "/etc/nccl.conf", "NCCL_P2P_DISABLE=1\n")
    put(tmp_path, "/etc/profile.d/debug.sh", "export NCCL_DEBUG=INFO\nexport NCCL_SHM_DISABLE='1'\n")
    # What the desired state itself asks for is intended, not a leftover.
    intended = dict(RAILS_SPEC, gpu={"nccl_conf_path": "/etc/nccl.conf", "nccl_conf": {"NCCL_P2P_DISABLE": 1,
                                                                                       "NCCL_DEBUG": "INFO"}})
    assert by_id(c.run(intended, node))["conflicts.nccl_debug_env"].observed == [
        "/etc/profile.d/debug.sh:2 NCCL_SHM_DISABLE=1"]


def test_registered_and_runs_on_this_machine_without_errors():
    role, target = REGISTRY["conflicts"]
    results = resolve(target)({"network": {"interfaces": []}, "gpu": {}}, Node())
    assert role == "conflicts"
    assert sorted(r.check_id for r in results) == sorted(
        ["conflicts.rp_filter", "conflicts.arp_flux", "conflicts.ip_forward", "conflicts.ptrace_scope",
         "conflicts.swap", "conflicts.nccl_debug_env"])
    assert all(r.status is not Status.ERROR for r in results)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2")
def test_real_rails_in_a_network_namespace_warn(tmp_path):
    """Two veth rails in one subnet, rp_filter=1 in that namespace: the live kernel is judged."""
    ns = f"tfconf{os.getpid()}"
    script = (
        "import json; from verify.checks import conflicts as c; from verify.node import Node; "
        "spec = {'network': {'interfaces': ['rail0', 'rail1']}, 'gpu': {}}; "
        "print(json.dumps({r.check_id: r.status.value for r in c.run(spec, Node())}))"
    )
    setup = [["ip", "netns", "add", ns],
             ["ip", "-n", ns, "link", "add", "rail0", "type", "veth", "peer", "name", "p0"],
             ["ip", "-n", ns, "link", "add", "rail1", "type", "veth", "peer", "name", "p1"],
             ["ip", "-n", ns, "addr", "add", "10.10.0.11/24", "dev", "rail0"],
             ["ip", "-n", ns, "addr", "add", "10.10.0.12/24", "dev", "rail1"],
             ["ip", "-n", ns, "link", "set", "rail0", "up"], ["ip", "-n", ns, "link", "set", "rail1", "up"],
             ["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1"]]
    try:
        for argv in setup:
            subprocess.run(argv, check=True, capture_output=True)
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script], check=True,
                             capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2]).stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    statuses = json.loads(out)
    assert statuses["conflicts.rp_filter"] == "WARN"
