"""cpu role: the policies preflight reads (node_reads.governor_paths) and kernel_values writing them, on
fake cpufreq trees and through Ansible."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]


node_reads = load_plugin("module_utils", "node_reads")
kernel_values = load_plugin("modules", "kernel_values")
preflight_checks = load_plugin("module_utils", "preflight_checks")


def make_cpus(root: Path, policies: dict, governor: str = "powersave",
              offered: str = "performance powersave") -> None:
    """policies: {'policy0': ['cpu0', 'cpu1']}; cpuN/cpufreq links to the policy, as on real kernels."""
    base = root / "sys/devices/system/cpu"
    for policy, cpus in policies.items():
        pdir = base / "cpufreq" / policy
        pdir.mkdir(parents=True)
        (pdir / "scaling_governor").write_text(governor + "\n")
        (pdir / "scaling_available_governors").write_text(offered + "\n")
        for cpu in cpus:
            (base / cpu).mkdir(parents=True)
            os.symlink(f"../cpufreq/{policy}", base / cpu / "cpufreq")


def governors(root: Path) -> dict:
    base = root / "sys/devices/system/cpu/cpufreq"
    return {p.name: (p / "scaling_governor").read_text().strip() for p in sorted(base.iterdir())}


def role_values(root: Path, governor: str) -> dict:
    """What the role hands kernel_values: each policy's path (on the fake tree) -> the governor."""
    return {str(root) + path: governor for path in node_reads.governor_paths(str(root))}


def test_one_path_per_policy_in_cpu_order(tmp_path):
    make_cpus(tmp_path, {"policy0": ["cpu0", "cpu1"], "policy2": ["cpu2", "cpu10"]})
    assert node_reads.governor_paths(str(tmp_path)) == [
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        "/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor",
    ]


def test_writes_each_policy_once(tmp_path):
    make_cpus(tmp_path, {"policy0": ["cpu0", "cpu1"], "policy2": ["cpu2", "cpu10"]})
    changes, errors = kernel_values.plan(role_values(tmp_path, "performance"))
    assert errors == [] and len(changes) == 2
    assert all(c["before"] == "powersave" and c["after"] == "performance" for c in changes)
    kernel_values.apply(changes)
    assert governors(tmp_path) == {"policy0": "performance", "policy2": "performance"}


def test_plan_writes_nothing_and_second_run_changes_nothing(tmp_path):
    make_cpus(tmp_path, {"policy0": ["cpu0", "cpu1"]})
    changes, _ = kernel_values.plan(role_values(tmp_path, "performance"))
    assert governors(tmp_path) == {"policy0": "powersave"}  # planning (check mode) wrote nothing
    kernel_values.apply(changes)
    assert kernel_values.plan(role_values(tmp_path, "performance")) == ([], [])


def test_governor_not_offered_is_refused_by_preflight(tmp_path):
    # intel_pstate offers only performance and powersave.
    make_cpus(tmp_path, {"policy0": ["cpu0"], "policy1": ["cpu1"]})
    problems = preflight_checks.check_cpu(str(tmp_path), {"cpu_governor": "ondemand"})
    assert [p.variable for p in problems] == ["cpu_governor"]  # named once, at the first CPU
    assert "cpu0 does not offer it" in problems[0].message("h") and "performance, powersave" in problems[0].message("h")
    assert governors(tmp_path) == {"policy0": "powersave", "policy1": "powersave"}


def test_node_without_cpufreq_has_no_paths(tmp_path):
    (tmp_path / "sys/devices/system/cpu/cpu0").mkdir(parents=True)
    assert node_reads.governor_paths(str(tmp_path)) == []


def test_this_machine_reads_without_error():
    # The dev machine may have no cpufreq; either way the read must not raise.
    assert all(path.endswith("/scaling_governor") for path in node_reads.governor_paths("/"))


def test_defaults_match_argument_specs():
    defaults = yaml.safe_load((ROOT / "roles/cpu/defaults/main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles/cpu/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    assert {name: spec.get("default") for name, spec in options.items()} == defaults


@pytest.mark.slow
def test_preflight_reads_then_kernel_values_applies_through_ansible(tmp_path):
    make_cpus(tmp_path, {"policy0": ["cpu0", "cpu1"]})
    playbook = tmp_path / "play.yml"
    paths = "tunefleet_node.cpu_governor_paths"  # node paths; the fake tree is prefixed here
    values = (f"{{{{ dict({paths} | map('regex_replace', '^', '{tmp_path}')"
              f" | zip({paths} | map('regex_replace', '^.*$', 'performance'))) }}}}")
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [
            {"name": "read", "tunefleet.gpu_node.preflight": {
                "host": "localhost", "root": str(tmp_path), "roles": ["cpu"],
                "variables": {"cpu_governor": "performance"}}},
            {"name": "governor", "tunefleet.gpu_node.kernel_values": {"values": values}},
        ],
    }]))

    def run(*extra: str) -> dict:
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                   ANSIBLE_LOCALHOST_WARNING="false")
        command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                   "-e", f"ansible_python_interpreter={sys.executable}", str(playbook), *extra]
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return json.loads(proc.stdout)["plays"][0]["tasks"][1]["hosts"]["localhost"]

    checked = run("--check", "--diff")
    assert checked["changed"] is True and governors(tmp_path) == {"policy0": "powersave"}
    applied = run()
    assert applied["changed"] is True and governors(tmp_path) == {"policy0": "performance"}
    policy0 = f"{tmp_path}/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
    assert [c["path"] for c in applied["changes"]] == [policy0]
    assert run()["changed"] is False
