"""cpu role: the cpu_governor module against fake cpufreq trees, and its wiring through Ansible."""
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


cpu_governor = load_plugin("modules", "cpu_governor")


def make_cpus(root: Path, policies: dict, governor: str = "powersave",
              offered: str = "performance powersave") -> None:
    """policies: {'policy0': ['cpu0', 'cpu1']}; cpuN/cpufreq links to the policy, as on real kernels."""
    base = root / "devices/system/cpu"
    for policy, cpus in policies.items():
        pdir = base / "cpufreq" / policy
        pdir.mkdir(parents=True)
        (pdir / "scaling_governor").write_text(governor + "\n")
        (pdir / "scaling_available_governors").write_text(offered + "\n")
        for cpu in cpus:
            (base / cpu).mkdir(parents=True)
            os.symlink(f"../cpufreq/{policy}", base / cpu / "cpufreq")


def governors(root: Path) -> dict:
    base = root / "devices/system/cpu/cpufreq"
    return {p.name: (p / "scaling_governor").read_text().strip() for p in sorted(base.iterdir())}


def test_writes_each_policy_once_and_reports_every_cpu(tmp_path):
    make_cpus(tmp_path, {"policy0": ["cpu0", "cpu1"], "policy2": ["cpu2", "cpu10"]})
    result = cpu_governor.apply(str(tmp_path), "performance", check_mode=False)
    assert result["changed"] is True
    assert governors(tmp_path) == {"policy0": "performance", "policy2": "performance"}
    assert len(result["paths"]) == 2
    assert [c["cpu"] for c in result["cpus"]] == ["cpu0", "cpu1", "cpu2", "cpu10"]
    assert all(c["before"] == "powersave" and c["after"] == "performance" for c in result["cpus"])
    assert "cpu10: powersave" in result["diff"]["before"] and "cpu10: performance" in result["diff"]["after"]


def test_check_mode_reports_the_change_and_writes_nothing(tmp_path):
    make_cpus(tmp_path, {"policy0": ["cpu0"]})
    result = cpu_governor.apply(str(tmp_path), "performance", check_mode=True)
    assert result["changed"] is True
    assert result["cpus"] == [{"cpu": "cpu0", "before": "powersave", "after": "performance"}]
    assert governors(tmp_path) == {"policy0": "powersave"}


def test_second_run_changes_nothing(tmp_path):
    make_cpus(tmp_path, {"policy0": ["cpu0", "cpu1"]})
    cpu_governor.apply(str(tmp_path), "performance", check_mode=False)
    again = cpu_governor.apply(str(tmp_path), "performance", check_mode=False)
    assert again["changed"] is False and again["paths"] == []


def test_governor_not_offered_fails_before_any_write(tmp_path):
    # intel_pstate offers only performance and powersave.
    make_cpus(tmp_path, {"policy0": ["cpu0"], "policy1": ["cpu1"]})
    refusal = r"'ondemand' is not offered by cpu0, cpu1 .*performance powersave"
    with pytest.raises(cpu_governor.GovernorError, match=refusal):
        cpu_governor.apply(str(tmp_path), "ondemand", check_mode=False)
    assert governors(tmp_path) == {"policy0": "powersave", "policy1": "powersave"}


def test_node_without_cpufreq_is_skipped_not_failed(tmp_path):
    (tmp_path / "devices/system/cpu/cpu0").mkdir(parents=True)
    result = cpu_governor.apply(str(tmp_path), "performance", check_mode=False)
    assert result["cpufreq"] is False and result["changed"] is False
    assert "no cpufreq" in result["msg"]


def test_this_machine_reads_without_error():
    # The dev machine may have no cpufreq; either way the read path must not raise.
    result = cpu_governor.apply("/sys", "performance", check_mode=True)
    assert isinstance(result["cpufreq"], bool)


def test_defaults_match_argument_specs():
    defaults = yaml.safe_load((ROOT / "roles/cpu/defaults/main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles/cpu/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    assert {name: spec.get("default") for name, spec in options.items()} == defaults


@pytest.mark.slow
def test_module_through_ansible_check_then_apply(tmp_path):
    make_cpus(tmp_path / "sys", {"policy0": ["cpu0", "cpu1"]})
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"name": "governor", "tunefleet.gpu_node.cpu_governor": {
            "governor": "performance", "sysfs_root": str(tmp_path / "sys")}, "register": "r"},
            {"name": "show", "ansible.builtin.debug": {"var": "r"}}],
    }]))

    def run(*extra: str) -> dict:
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                   ANSIBLE_LOCALHOST_WARNING="false")
        command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                   "-e", f"ansible_python_interpreter={sys.executable}", str(playbook), *extra]
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]

    checked = run("--check", "--diff")
    assert checked["changed"] is True and governors(tmp_path / "sys") == {"policy0": "powersave"}
    applied = run()
    assert applied["changed"] is True and governors(tmp_path / "sys") == {"policy0": "performance"}
    assert run()["changed"] is False
