"""Interface names (issue 28 item 5): the kernel's rule plus a shell-safe one, for names given one by one and
for the names a driver/PCI glob selects. A planted name with `$(...)` is refused before anything changes,
naming it; the preflight module's whole run is read-only, so nothing under the root changed either."""
from __future__ import annotations

import pytest

from tests.helpers.plugins import load_plugin
from tests.unit.test_preflight import build_host, judge
from tests.unit.test_role_network_nics import add_nic

kernel_rules = load_plugin("module_utils", "kernel_rules")

PLANTED = "a$(id>p)"  # 8 bytes, no '/', ':' or blank: Linux itself accepts it (`ip link add` does)


@pytest.mark.parametrize("name", ["eth0", "ens1f0np0", "ib0.8001", "bond0@x", "enp1s0-v1", "a" * 15])
def test_names_the_kernel_and_a_shell_take_as_they_are_pass(name):
    assert kernel_rules.interface_name_problem(name) is None


@pytest.mark.parametrize(("name", "words"), [
    (PLANTED, "outside [A-Za-z0-9_.@-]"), ("a;reboot", "outside"), ("a`id`", "outside"), ("a'b", "outside"),
    ("a" * 16, "1-15 bytes"), ("", "1-15 bytes"), ("..", "1-15 bytes"), ("eth/0", "'/'"), ("eth 0", "whitespace"),
    ("eth0:1", "':'"), ("ethé", "outside"), (7, "not int"),
])
def test_names_outside_either_rule_are_refused_saying_why(name, words):
    assert words.replace("not int", "a string, not int") in kernel_rules.interface_name_problem(name)


def test_a_planted_name_in_network_interfaces_is_refused_naming_it(tmp_path):
    root = build_host(tmp_path)
    (root / "sys/class/net" / PLANTED).mkdir(parents=True)  # the interface exists: refused for its name
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    problems = judge(root, network_interfaces=["v0", PLANTED])
    assert problems == [f"host gpu01: network_interfaces = {PLANTED!r}: holds characters outside [A-Za-z0-9_.@-], "
                        "which tunefleet refuses (the name reaches root's boot scripts)"]
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before and not (root / "p").exists()


def test_a_planted_name_selected_by_driver_is_refused_naming_it(tmp_path):
    root = build_host(tmp_path)
    (root / "sys/bus/pci/drivers/mlx5_core").mkdir(parents=True)
    add_nic(root / "sys", "ens1f0np0", pci="0000:3b:00.0", driver="mlx5_core", numa="0", cpus="0-15", irqs=(101,))
    add_nic(root / "sys", PLANTED, pci="0000:86:00.0", driver="mlx5_core", numa="1", cpus="16-31", irqs=(201,))
    problems = judge(root, network_interfaces=[], network_interface_match={"driver": "mlx5*"})
    assert len(problems) == 1 and f"selects interface {PLANTED!r}, which holds characters outside" in problems[0]
    assert judge(root, network_interfaces=[], network_interface_match={"pci": "0000:3b:*"}) == []
