"""One desired state: Ansible and verify render the same document from the same variables."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verify.desired import SpecError, load_spec_file, render_spec, role_defaults

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu", "pcie", "verify_node")
OVERRIDES = {
    "network_mtu": 4200,
    "network_interfaces": ["eth7"],
    "sysctl_extra_settings": {"net.core.somaxconn": "8192"},
    "storage_device_patterns": ["loop*"],
}


def test_values_come_from_the_role_defaults() -> None:
    spec = render_spec()
    sysctl_defaults = yaml.safe_load((ROOT / "roles/sysctl/defaults/main.yml").read_text())
    assert spec["sysctl"]["settings"] == sysctl_defaults["sysctl_settings"]
    assert spec["network"]["mtu"] == role_defaults()["network_mtu"]


def test_overrides_win_and_extra_sysctls_merge() -> None:
    spec = render_spec(OVERRIDES, hostname="node7")
    assert spec["host"] == "node7"
    assert spec["network"]["mtu"] == 4200
    assert spec["sysctl"]["settings"]["net.core.somaxconn"] == "8192"
    assert "net.core.rmem_max" in spec["sysctl"]["settings"]


def test_a_missing_role_variable_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "roles/sysctl/defaults").mkdir(parents=True)
    (tmp_path / "roles/sysctl/defaults/main.yml").write_text("sysctl_enabled: true\n")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates/desired_state.json.j2").write_text((ROOT / "templates/desired_state.json.j2").read_text())
    with pytest.raises(SpecError, match="role variable is missing"):
        render_spec(root=tmp_path)


@pytest.mark.parametrize(
    "content, message",
    [("{not json", "not valid JSON"), ('{"schema": "other"}', "schema must be"), ("[]", "must be a mapping")],
)
def test_malformed_spec_files_are_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "spec.json"
    path.write_text(content)
    with pytest.raises(SpecError, match=message):
        load_spec_file(str(path))


def test_ansible_renders_the_same_document(tmp_path: Path) -> None:
    playbook = tmp_path / "render.yml"
    tasks = [
        {"name": f"Load {role} defaults", "ansible.builtin.import_role": {"name": role, "tasks_from": "defaults.yml"}}
        for role in ROLES
    ]
    tasks.append({
        "name": "Render",
        "ansible.builtin.template": {
            "src": str(ROOT / "templates/desired_state.json.j2"),
            "dest": str(tmp_path / "spec.json"),
            "mode": "0600",
        },
    })
    playbook.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    (tmp_path / "vars.json").write_text(json.dumps(OVERRIDES))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "node7,", "-c", "local",
         "-e", f"@{tmp_path / 'vars.json'}", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    from_ansible = json.loads((tmp_path / "spec.json").read_text())
    assert from_ansible == render_spec(OVERRIDES, hostname="node7")
