"""The preflight role in a real play: each refused host is stopped with nothing changed,
while a good host in the same play goes on to its changes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_preflight import GOOD, build_host  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook not in this environment"),
]

PLAY = """
- name: Preflight, then a change standing in for the tuning roles
  hosts: all
  gather_facts: false
  roles:
    - role: preflight
      tags: [always]  # as in playbooks/site.yml
  tasks:
    - name: Canary change to the host
      ansible.builtin.copy:
        content: "536870912"
        dest: "{{ preflight_root }}/proc/sys/net/core/rmem_max"
        mode: "0644"
      tags: [always]
"""

# host -> its own bad input, as YAML text (so YAML's own `yes` parsing is part of the test)
HOSTS = {
    "good": "",
    "bad-mtu": "network_mtu: 99999",
    "bad-iface": "network_interfaces: [ib7]",
    "bad-bool": "sysctl_settings: {vm.swappiness: yes}",
    "bad-key": "sysctl_extra_settings: {net.core.no_such_key: 1}",
    "bad-cc": "sysctl_extra_settings: {net.ipv4.tcp_congestion_control: dctcp}",
    "bad-sched": "storage_scheduler: cfq",
    "bad-1g": "memory_hugepages_1g: 8",
    "bad-gov": "cpu_governor: ondemand",
    "bad-gpu": "preflight_require_gpu_driver: true",
    "bad-choice": "network_persist_backend: bogus",  # caught by the network role's own argument spec
    "bad-name": "memory_hugepage_2m: 512",  # a typo of memory_hugepages_2m: no role would read it
    "bad-disk": "storage_device_patterns: [nvme7n1]",
    "bad-glob": "storage_device_patterns: ['sd*']",
    "bad-ports": "sysctl_extra_settings: {net.ipv4.ip_local_port_range: '3000 2000'}",
}


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run(tmp_path: Path, *flags: str) -> tuple:
    inventory = ["all:", "  vars:", "    ansible_connection: local",
                 f"    ansible_python_interpreter: {sys.executable}"]
    inventory += [f"    {key}: {json.dumps(value)}" for key, value in GOOD.items()]
    inventory += ["  hosts:"]
    roots = {}
    for host, bad in HOSTS.items():
        roots[host] = build_host(tmp_path / host)
        inventory += [f"    {host}:", f"      preflight_root: {roots[host]}"]
        if bad:
            inventory += [f"      {bad}"]
    (tmp_path / "hosts.yml").write_text("\n".join(inventory) + "\n")
    (tmp_path / "play.yml").write_text(PLAY)
    before = {host: tree(root) for host, root in roots.items()}
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")  # YAML output wraps long lines
    proc = subprocess.run([str(PLAYBOOK_BIN), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), *flags],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    after = {host: tree(root) for host, root in roots.items()}
    return proc, before, after


def test_each_refused_host_is_unchanged_and_named_with_its_variable(tmp_path):
    proc, before, after = run(tmp_path)
    output = proc.stdout
    assert proc.returncode != 0
    assert after["good"] != before["good"], "the canary must change a host that passes preflight"
    expected = {
        "bad-mtu": "host bad-mtu: network_mtu = 99999: outside 68..65535",
        "bad-iface": "host bad-iface: network_interfaces = 'ib7': no such interface",
        "bad-bool": "host bad-bool: sysctl_settings['vm.swappiness'] = True: a YAML boolean",
        "bad-key": "host bad-key: sysctl_extra_settings['net.core.no_such_key'] = 1: no such key",
        "bad-cc": "host bad-cc: sysctl_extra_settings['net.ipv4.tcp_congestion_control'] = 'dctcp'",
        "bad-sched": "host bad-sched: storage_scheduler = 'cfq': /dev/nvme0n1 does not offer it",
        "bad-1g": "host bad-1g: memory_hugepages_1g = 8",
        "bad-gov": "host bad-gov: cpu_governor = 'ondemand': cpu0 does not offer it",
        "bad-gpu": "host bad-gpu: preflight_require_gpu_driver = True: no NVIDIA driver",
        "bad-choice": "network_persist_backend must be one of",
        "bad-name": "host bad-name: memory_hugepage_2m: no tunefleet role has this variable, so it would be "
                    "ignored; did you mean memory_hugepages_2m?",
        "bad-disk": "host bad-disk: storage_device_patterns = 'nvme7n1': no such block device on this host",
        "bad-glob": "host bad-glob: storage_device_patterns = 'sd*': matches no block device on this host",
        "bad-ports": "host bad-ports: sysctl_extra_settings['net.ipv4.ip_local_port_range'] = '3000 2000': "
                     "the first port 3000 is above the last 2000",
    }
    for host, words in expected.items():
        assert words in output, f"{host}: {words!r} not in output"
        assert after[host] == before[host], f"{host} was changed although preflight refused it"
    assert "got: bogus" in output
    recap = {line.split()[0]: line for line in output.splitlines() if ": ok=" in line}
    assert "failed=0" in recap["good"]
    assert all("failed=1" in recap[h] for h in expected)


def test_with_tags_only_the_selected_roles_are_judged(tmp_path):
    proc, before, after = run(tmp_path, "--tags", "network")
    output = proc.stdout
    assert "host bad-mtu: network_mtu = 99999" in output
    assert after["bad-mtu"] == before["bad-mtu"]
    # Variables of roles that will not run do not stop a host.
    for host in ("bad-bool", "bad-gov", "bad-sched"):
        assert after[host] != before[host], f"{host} was refused for a role that --tags network does not run"


def test_the_roles_whose_specs_preflight_reads_are_every_role_with_a_spec():
    import yaml

    listed = yaml.safe_load((REPO / "roles/preflight/vars/main.yml").read_text())["__preflight_spec_roles"]
    assert sorted(listed) == sorted(p.parts[-3] for p in REPO.glob("roles/*/meta/argument_specs.yml"))
