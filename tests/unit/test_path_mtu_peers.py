"""Path MTU peers (issue 38): a bounded set per host and interface, spread across the fleet, every host
pinged by as many, built once for the whole play (plugins/filter/verify_node_peers.py), and the fleet's
blame still names the host nobody reaches. Counts and coverage, never time."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.plugins import load_plugin
from tests.helpers.replay import ReplayRunner, load
from verify.checks import path_mtu
from verify.fleet.blame import MIN_ACCUSERS, blame_path_mtu
from verify.fleet.model import parse_node_report
from verify.result import Status

AnsibleFilterError = pytest.importorskip("ansible.errors").AnsibleFilterError
peers = load_plugin("filter", "verify_node_peers")

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
RAILS = [f"mlx5_{r}" for r in range(8)]


def address(host_index: int, rail: int) -> str:
    return f"10.{rail}.{host_index // 250}.{host_index % 250 + 1}"


def fleet_addresses(count: int, rails: int = 8, seed: int = 3) -> dict:
    """host -> {interface: address}, in a shuffled inventory order (the map must not depend on it)."""
    hosts = [(f"gpu-{i + 1}", {RAILS[r]: address(i, r) for r in range(rails)}) for i in range(count)]
    random.Random(seed).shuffle(hosts)
    return dict(hosts)


def owner_of(addresses: dict) -> dict:
    return {addr: host for host, by_rail in addresses.items() for addr in by_rail.values()}


def test_a_thousand_hosts_each_ping_k_per_interface_and_are_pinged_by_k():
    addresses = fleet_addresses(1000)
    owner = owner_of(addresses)
    rail_of = {addr: rail for by_rail in addresses.values() for rail, addr in by_rail.items()}
    plan = peers.verify_node_path_mtu_peer_map(addresses, 3)
    assert set(plan) == set(addresses)
    pinged_by: Counter = Counter()
    pairs = set()
    for host, targets in plan.items():
        per_rail = Counter(rail_of[t] for t in targets)
        assert per_rail == dict.fromkeys(RAILS, 3), host  # k per interface, on every interface
        assert host not in {owner[t] for t in targets}
        assert len(set(targets)) == len(targets) == 24
        for target in targets:
            pinged_by[target] += 1
            pairs.add((rail_of[target], frozenset((host, owner[target]))))
    # Every host's every address is pinged by exactly k hosts: covered, and blamable (two accusers).
    assert set(pinged_by) == set(owner) and set(pinged_by.values()) == {3}
    # No pair is probed twice: each host is in 2k distinct pairs per rail.
    assert len(pairs) == 1000 * 8 * 3
    # The old default on this fleet: every other host on every rail.
    assert sum(map(len, plan.values())) == 24_000 < 1000 * 999 * 8


def test_the_peers_are_the_neighbour_and_hosts_across_the_fleet():
    addresses = fleet_addresses(1000, rails=1)
    owner = owner_of(addresses)
    plan = peers.verify_node_path_mtu_peer_map(addresses, 3)
    number = {host: int(host.split("-")[1]) for host in addresses}  # natural order: gpu-2 before gpu-10
    for host in ("gpu-1", "gpu-10", "gpu-999"):
        distances = sorted((number[owner[t]] - number[host]) % 1000 for t in plan[host])
        assert distances[0] == 1  # the next host by name: mostly the same leaf switch
        assert distances[-1] > 1000 // 4  # and the far side of the fleet: across the spine
        assert max(distances) < 1000 // 2  # within half the ring, so no pair is probed both ways


def test_the_map_reads_each_host_once():
    class Counted(dict):
        reads = Counter()

        def items(self):
            Counted.reads["items"] += 1
            return super().items()

        def __getitem__(self, key):
            Counted.reads["getitem"] += 1
            return super().__getitem__(key)

    addresses = {host: Counted(by_rail) for host, by_rail in fleet_addresses(1000).items()}
    plan = peers.verify_node_path_mtu_peer_map(addresses, 3)
    assert len(plan) == 1000
    assert Counted.reads == Counter(items=1000)  # one pass over the hosts, no lookup per peer


@pytest.mark.parametrize("hosts, per_host", [(1, 0), (2, 1), (3, 2), (4, 3), (5, 3), (12, 3)])
def test_small_fleets(hosts, per_host):
    """Up to k+1 hosts every host pings every other (molecule/fleet: 3 hosts, 2 each, 6 in all); the
    5 hosts of molecule/pairwise ping 3 each per interface, and every pair is still covered."""
    addresses = fleet_addresses(hosts, rails=2)
    owner = owner_of(addresses)
    plan = peers.verify_node_path_mtu_peer_map(addresses, 3)
    assert {len(t) for t in plan.values()} == {2 * per_host}
    if hosts <= 5:
        covered = {frozenset((h, owner[t])) for h, targets in plan.items() for t in targets}
        assert len(covered) == hosts * (hosts - 1) // 2


def test_all_is_every_other_host():
    addresses = fleet_addresses(40, rails=2)
    plan = peers.verify_node_path_mtu_peer_map(addresses, "all")
    assert {len(t) for t in plan.values()} == {2 * 39}


@pytest.mark.parametrize("count", [2, 3, 4, 7, 20, 49, 50])
def test_every_count_up_to_the_fleet_gives_distinct_peers_and_even_coverage(count):
    addresses = fleet_addresses(51, rails=1)
    owner = owner_of(addresses)
    plan = peers.verify_node_path_mtu_peer_map(addresses, str(count))  # -e passes a string
    want = min(count, 50)
    for host, targets in plan.items():
        assert len(set(targets)) == len(targets) == want and host not in {owner[t] for t in targets}
    assert set(Counter(t for targets in plan.values() for t in targets).values()) == {want}


def test_hosts_without_an_address_on_an_interface_stay_out_of_its_ring():
    addresses = fleet_addresses(10, rails=2)
    lonely = next(iter(addresses))
    addresses[lonely] = {RAILS[0]: addresses[lonely][RAILS[0]]}  # no mlx5_1 address
    plan = peers.verify_node_path_mtu_peer_map(addresses, 3)
    assert len(plan[lonely]) == 3
    assert all(len(t) == 6 for h, t in plan.items() if h != lonely)
    assert sum(t.count(a) for t in plan.values() for a in addresses[lonely].values()) == 3


@pytest.mark.parametrize("bad", [1, 0, -3, True, "1", "2x", "", 2.5, None, [3], "every"])
def test_a_bad_count_names_the_variable_and_the_value(bad):
    with pytest.raises(AnsibleFilterError) as caught:
        peers.verify_node_path_mtu_peer_map(fleet_addresses(4), bad)
    assert "verify_node_path_mtu_peers_per_interface" in str(caught.value) and repr(bad) in str(caught.value)


def test_the_minimum_is_what_the_blame_needs():
    assert peers.MIN_PEERS == MIN_ACCUSERS


def test_addresses_from_the_setup_modules_facts():
    facts = {"default_ipv4": {"address": "192.0.2.7", "interface": "eno1"},
             "ens1f0_1": {"ipv4": {"address": "10.0.0.7"}},  # ens1f0-1: '-' becomes '_' in ansible_facts
             "eth0_1": {"ipv4": {"address": "10.1.0.7"}},  # alias eth0:1: ':' becomes '_'
             "ib0": {"ipv6": [{"address": "fe80::1"}]}}  # no IPv4: neither pings nor is pinged on it
    assert peers.verify_node_path_mtu_addresses(facts, []) == {"": "192.0.2.7"}
    assert peers.verify_node_path_mtu_addresses(facts, ["ens1f0-1", "eth0:1", "ib0", "ens9"]) == {
        "ens1f0-1": "10.0.0.7", "eth0:1": "10.1.0.7"}
    assert peers.verify_node_path_mtu_addresses({}, []) == {}


def test_the_node_check_pings_each_peer_it_gets_once(tmp_path):
    addresses = fleet_addresses(1000)
    mine = peers.verify_node_path_mtu_peer_map(addresses, 3)["gpu-500"]
    runner = ReplayRunner({"ping": load("ping_ok_9000")})
    spec = desired_state(network={"path_mtu_peers": mine, "mtu": 9000})
    results = path_mtu.run(spec, FakeTree(tmp_path).node(runner=runner, live=True))
    assert [r.check_id for r in results] == [f"network.path_mtu.{p}" for p in mine]
    assert {r.status for r in results} == {Status.PASS}
    assert [c[-1] for c in runner.calls] == mine  # 24 pings: 3 peers x 8 rails


def test_the_fleet_blames_the_host_nobody_reaches_with_bounded_peers():
    """Each host's results come from the real check's judge on captured pings (a jumbo frame vanishing
    at a port left at 1500, and the same path answering small pings); one host's port is small."""
    addresses = fleet_addresses(200, rails=2)
    plan = peers.verify_node_path_mtu_peer_map(addresses, 3)
    owner = owner_of(addresses)
    bad = "gpu-77"
    ok = path_mtu.parse_ping(load("ping_ok_9000").stdout, load("ping_ok_9000").stderr)
    dropped = path_mtu.parse_ping(load("ping_silent_drop").stdout, load("ping_silent_drop").stderr)
    small = path_mtu.parse_ping(load("ping_small_ok").stdout, load("ping_small_ok").stderr)
    nodes = []
    for host, targets in plan.items():
        results = [path_mtu.judge(t, 9000, *((dropped, small) if bad in (host, owner[t]) else (ok, None))).to_dict()
                   for t in targets]
        nodes.append(parse_node_report({"host": host, "results": results}, host))
    findings = blame_path_mtu(nodes, {h: list(a.values()) for h, a in addresses.items()})
    assert list(findings) == [bad]
    assert findings[bad][0].observed == "3 of 3 cannot"  # the same 3 hosts ping it on both interfaces
    warned = [n.host for n in nodes for r in n.results if r.status is Status.WARN]
    assert len(warned) == 6 and bad not in warned


# ---- the role's tasks file, run by Ansible over local hosts -------------------------------------------

PLAY = """
- name: Path MTU peers as playbooks/verify.yml sets them
  hosts: all
  gather_facts: false
  tasks:
    - name: Load the network defaults
      ansible.builtin.import_role: {name: network, tasks_from: defaults.yml}
    - name: Load the verify_node defaults
      ansible.builtin.import_role: {name: verify_node, tasks_from: defaults.yml}
    - name: The network facts the setup module would gather
      ansible.builtin.set_fact:
        cacheable: true
        eth_1: {ipv4: {address: "10.1.0.{{ index }}"}}
        eth2: {ipv4: {address: "10.2.0.{{ index }}"}}
    - name: Path MTU peers
      ansible.builtin.import_role: {name: verify_node, tasks_from: path_mtu_peers.yml}
      when: verify_node_path_mtu | bool
    - name: Write every host's peers
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars)
                     | map(attribute='network_path_mtu_peers'))) | to_json }}"
        mode: "0600"
      delegate_to: localhost
      run_once: true
"""


def run_play(tmp_path: Path, hosts: int, *extra: str) -> tuple:
    """(the finished ansible-playbook, how many times it read a host's variables: hostvars[h] is one)."""
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "network_interfaces": ["eth-1", "eth2"], "out": str(tmp_path / "peers.json")},
                         "hosts": {f"node-{i:02d}": {"index": i} for i in range(1, hosts + 1)}}}
    # The first host names its own peers: it keeps them, and the others still ping it.
    inventory["all"]["hosts"]["node-01"]["network_path_mtu_peers"] = ["192.0.2.1"]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    counts = tmp_path / f"get_vars-{hosts}"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    done = subprocess.run([sys.executable, str(ROOT / "tests/helpers/ansible_playbook_counted.py"), str(counts),
                           "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"), *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    return done, counts.stat().st_size


@pytest.mark.slow
@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook not in this environment")
def test_the_role_gives_each_host_k_peers_per_interface_without_walking_the_fleet(tmp_path):
    done, calls_6 = run_play(tmp_path, 6)
    assert done.returncode == 0, done.stdout + done.stderr
    done, calls_12 = run_play(tmp_path, 12)
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((tmp_path / "peers.json").read_text())
    assert plan.pop("node-01") == ["192.0.2.1"]
    assert {len(t) for t in plan.values()} == {6}  # 3 peers on each of eth-1 and eth2
    pinged = Counter(t for targets in plan.values() for t in targets)
    assert pinged["10.1.0.1"] == pinged["10.2.0.1"] == 3  # node-01 is still pinged on both interfaces
    assert all(t.startswith(("10.1.", "10.2.")) for targets in plan.values() for t in targets)
    # Reads of hosts' variables grow linearly with the fleet (a + b*N: twice the hosts, at most twice the
    # reads). Each host walking every other host's facts per interface, as before, adds 2*N*N reads:
    # 144 more at 12 hosts than twice those at 6.
    assert calls_12 <= 2 * calls_6, (calls_6, calls_12)


@pytest.mark.slow
@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook not in this environment")
def test_the_role_keeps_all_pairs_as_an_option_and_refuses_a_bad_count(tmp_path):
    done, _ = run_play(tmp_path, 6, "-e", "verify_node_path_mtu_peers_per_interface=all")
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((tmp_path / "peers.json").read_text())
    assert {len(t) for h, t in plan.items() if h != "node-01"} == {10}
    (tmp_path / "peers.json").unlink()
    done, _ = run_play(tmp_path, 6, "-e", "verify_node_path_mtu_peers_per_interface=1")
    assert done.returncode != 0
    assert "verify_node_path_mtu_peers_per_interface must be 'all' or a whole number of at least 2" in done.stdout
    assert "got '1'" in done.stdout
    assert not (tmp_path / "peers.json").exists()  # refused before anything after it ran
