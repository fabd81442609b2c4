"""InfiniBand / RoCE ports judged within their HCA model and link layer (issue 26 item 5). The sysfs trees
are built FROM real published `ibstat` outputs (tests/fixtures/node/health/public/README.md cites each):
every CA's type, firmware and every port's State, Physical state, Rate and Link layer become the files the
kernel writes under /sys/class/infiniband (formats: Documentation/ABI/stable/sysfs-class-infiniband and
drivers/infiniband/core/sysfs.c, as tests/fixtures/node/health/README.md describes), and the check reads
them through the real Node."""
from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.drills import ibstat_to_sysfs
from tests.helpers.fake_node import FakeTree, desired_state
from verify.checks import health_ib
from verify.checks.health_common import remember_previous
from verify.judging import verdicts
from verify.result import Status

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health" / "public"
def run_on(tmp_path, fixture: str, spec=None) -> dict:
    tree = ibstat_to_sysfs((PUBLIC / fixture).read_text(), FakeTree(tmp_path))
    spec = spec or desired_state()
    return {r.check_id.split(".", 2)[2]: r for r in health_ib.run(spec, tree.node())}


def test_two_connectx7_ports_down_beside_active_siblings_fail_naming_them(tmp_path):
    ports = run_on(tmp_path, "ibstat_faulty_gpud-h100-roce-cx7-2down.txt")
    failed = sorted(port for port, r in ports.items() if r.status is Status.FAIL)
    assert failed == ["mlx5_11/1", "mlx5_5/1"]
    down = ports["mlx5_5/1"]
    assert "mlx5_5/1 (MT4129, Ethernet)" in down.reason and "Disabled while its sibling ports are Active" in down.reason
    assert down.details[verdicts.ACTION_KEY] == verdicts.DRAIN_RMA and "cable" in down.remediation
    # the slower ConnectX-6 Dx ports (MT4125, 100 Gb/s) are their own group: not flagged beside 400G HCAs
    assert all(ports[p].status is Status.PASS for p in ("mlx5_1/1", "mlx5_2/1", "mlx5_3/1", "mlx5_4/1"))


def test_the_healthy_twin_and_other_real_healthy_nodes_pass_every_port(tmp_path):
    for name, count in (("ibstat_healthy_gpud-h100-roce-cx7-all-active.txt", 12),
                        ("ibstat_healthy_gpud-h100-ib-cx7-bond.txt", 9), ("ibstat_healthy_gpud-a100.txt", 9)):
        ports = run_on(tmp_path / name, name)
        assert len(ports) == count and {r.status for r in ports.values()} == {Status.PASS}, name
    bond = run_on(tmp_path / "bond", "ibstat_healthy_gpud-h100-ib-cx7-bond.txt")
    assert bond["mlx5_bond_0/1"].expected.startswith("ACTIVE, LinkUp, >= 200 Gb/s")  # BlueField-3 at its own 200


def test_down_ports_of_a_second_nic_fail_unless_the_desired_state_lists_them_unused(tmp_path):
    fixture = "ibstat_faulty_gpud-h100-ib-cx6dx-eth-disabled.txt"
    ports = run_on(tmp_path / "a", fixture)
    assert sorted(p for p, r in ports.items() if r.status is Status.FAIL) == ["mlx5_2/1", "mlx5_7/1", "mlx5_8/1"]
    assert ports["mlx5_0/1"].status is Status.PASS  # the 400G InfiniBand HCAs: all Active
    spec = desired_state()
    spec["verify"]["unused_ports"] = ["mlx5_2/1", "mlx5_7", "mlx5_8/1"]
    listed = run_on(tmp_path / "b", fixture, spec)
    assert {p: r.status for p, r in listed.items() if r.status is not Status.PASS} == {
        "mlx5_2/1": Status.SKIP, "mlx5_7/1": Status.SKIP, "mlx5_8/1": Status.SKIP}
    assert "verify.unused_ports" in listed["mlx5_7/1"].reason


def test_a_port_below_its_groups_rate_fails_and_a_whole_disabled_model_is_not_in_use(tmp_path):
    # The real all-active node with ONE port's rate changed (400 -> 200: a cable trained down).
    text = (PUBLIC / "ibstat_healthy_gpud-h100-roce-cx7-all-active.txt").read_text()
    slow = re.sub(r"(CA 'mlx5_3'.*?Rate: )400", r"\g<1>200", text, count=1, flags=re.S)
    assert slow != text
    tree = ibstat_to_sysfs(slow, FakeTree(tmp_path / "a"))
    ports = {r.check_id.split(".", 2)[2]: r for r in health_ib.run(desired_state(), tree.node())}
    failed = {p: r for p, r in ports.items() if r.status is not Status.PASS}
    assert list(failed) == ["mlx5_3/1"] and "rate 200 Gb/s" in failed["mlx5_3/1"].reason
    # The 2down node with its two MT4129 ports' siblings gone: a model with no port up is not in use.
    only_down = "\n".join(block for block in re.split(r"(?=^CA ')", (PUBLIC / (
        "ibstat_faulty_gpud-h100-roce-cx7-2down.txt")).read_text(), flags=re.M)
        if "MT4129" not in block or "State: Down" in block)
    tree = ibstat_to_sysfs(only_down, FakeTree(tmp_path / "b"))
    statuses = {r.check_id.split(".", 2)[2]: r.status for r in health_ib.run(desired_state(), tree.node())}
    assert statuses["mlx5_5/1"] is statuses["mlx5_11/1"] is Status.SKIP


def test_counters_are_judged_as_the_increase_since_the_last_run(tmp_path):
    tree = ibstat_to_sysfs((PUBLIC / "ibstat_healthy_gpud-a100.txt").read_text(), FakeTree(tmp_path))
    tree.write("/sys/class/infiniband/mlx5_1/ports/1/counters/symbol_error", "40\n")
    since_load = {r.check_id: r for r in health_ib.run(desired_state(), tree.node())}["health.ib.mlx5_1/1"]
    assert since_load.status is Status.FAIL and "symbol_error 40" in since_load.reason
    node = tree.node()
    node.memo[health_ib.PREVIOUS_COUNTERS] = {"health.ib.mlx5_1/1": {"symbol_error": 38}}
    delta = {r.check_id: r for r in health_ib.run(desired_state(), node)}["health.ib.mlx5_1/1"]
    assert delta.status is Status.WARN and "symbol_error 2 since the last run (40 since driver load)" in delta.reason
    assert delta.details[verdicts.ACTION_KEY] == verdicts.WATCH


def test_a_flap_is_judged_per_minute_a_short_interval_counts_as_one_minute_and_the_key_overrides(tmp_path):
    tree = ibstat_to_sysfs((PUBLIC / "ibstat_healthy_gpud-a100.txt").read_text(), FakeTree(tmp_path))
    tree.write("/sys/class/infiniband/mlx5_1/ports/1/counters/link_downed", "3\n")
    previous = {"health.ib.mlx5_1/1": {"link_downed": 2}}

    def port(spec, read_after_s: float):
        node = tree.node()
        remember_previous(node, previous, 1_700_000_000.0, 1_700_000_000.0 + read_after_s)
        return {r.check_id: r for r in health_ib.run(spec, node)}["health.ib.mlx5_1/1"]

    # 20 s after the last check: one flap is judged as over a minute (1/min), far past one per 6 hours.
    quick = port(desired_state(), 20)
    assert quick.status is Status.FAIL and quick.details[verdicts.ACTION_KEY] == verdicts.DRAIN_RMA
    assert "link_downed 1 in 20 s = 1.0/min (judged over 1 min) (3 since driver load)" in quick.reason
    # A day later the same flap is 1 in 1440 min: under one per 6 hours, a WARN to watch.
    day = port(desired_state(), 86_400)
    assert day.status is Status.WARN and "link_downed 1 in 1440.0 min = 0.00069/min" in day.reason
    # verify_thresholds' ib_link_downed_per_min: no flap at all is tolerated.
    spec = desired_state()
    spec["verify"]["thresholds"] = {"ib_link_downed_per_min": 0}
    assert port(spec, 86_400).status is Status.FAIL


# ---- counters as perfquery reports them (issue 36 item 3) -------------------------------------------------

def test_perfquery_output_is_read_under_the_sysfs_names():
    from verify.facts.ib_counters import parse_perfquery

    (port,) = parse_perfquery((PUBLIC / "perfquery-x_faulty_ibexporter-switch-linkdowned-discards.txt").read_text())
    assert (port.lid, port.port) == (2052, 1)
    assert {k: v for k, v in port.counters.items() if v} == {
        "link_downed": 1, "port_rcv_switch_relay_errors": 7, "port_xmit_discards": 20046}
    (healthy,) = parse_perfquery((PUBLIC / "perfquery-x_healthy_ibexporter-hca-lid133.txt").read_text())
    assert len(healthy.counters) == 12 and not any(healthy.counters.values())
    assert parse_perfquery("SymbolErrorCounter:......" + "9" * 5000) == []  # bounded: not read, no crash


def ib_node_answering_perfquery(tmp_path, capture: str):
    from tests.helpers.replay import ReplayRunner
    from verify.runner import CommandOutput

    tree = ibstat_to_sysfs((PUBLIC / "ibstat_healthy_gpud-a100.txt").read_text(), FakeTree(tmp_path))
    argv = [a.format(device="mlx5_1", port="1") for a in health_ib.PERFQUERY_ARGV]
    text = (PUBLIC / capture).read_text()
    return tree.node(runner=ReplayRunner({tuple(argv): CommandOutput(argv, 0, text, "", 0.01)}))


def test_a_ports_perfquery_counters_are_judged_flap_and_discards_apart(tmp_path):
    node = ib_node_answering_perfquery(tmp_path, "perfquery-x_faulty_ibexporter-switch-linkdowned-discards.txt")
    ports = {r.check_id.split(".", 2)[2]: r for r in health_ib.run(desired_state(), node)}
    port = ports["mlx5_1/1"]
    assert port.status is Status.WARN and port.details[verdicts.ACTION_KEY] == verdicts.WATCH
    assert "link_downed 1 since driver load" in port.reason
    assert "port_xmit_discards 20046 since driver load (congestion or filtering, not the cable)" in port.reason
    assert "switch_relay" not in port.reason and port.details["counters_source"].startswith("perfquery -x")
    assert {r.status for p, r in ports.items() if p != "mlx5_1/1"} == {Status.PASS}


def test_the_healthy_twins_perfquery_counters_pass(tmp_path):
    node = ib_node_answering_perfquery(tmp_path, "perfquery-x_healthy_ibexporter-hca-lid133.txt")
    ports = {r.check_id.split(".", 2)[2]: r for r in health_ib.run(desired_state(), node)}
    assert ports["mlx5_1/1"].status is Status.PASS and ports["mlx5_1/1"].details["counters"]["symbol_error"] == 0
