"""Reboots: never by default, a marker naming why, and playbooks/reboot.yml's permission gate."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook not in this environment"),
]

APPLY = """
- name: A tuning run whose memory role needs a reboot
  hosts: all
  gather_facts: false
  pre_tasks:
    - name: What the memory role sets after writing the GRUB drop-in for 1 GiB pages
      ansible.builtin.set_fact:
        memory_reboot_required: "{{ memory_needs_reboot | bool }}"
        memory_reboot_reason: 1 GiB huge pages are reserved on the kernel command line
  roles:
    - role: reboot
"""


def inventory(tmp_path: Path) -> Path:
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(
        "all:\n  hosts:\n    gpu01:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
        f"      reboot_marker_path: {tmp_path / 'state' / 'reboot-required'}\n"
    )
    return hosts


def play(tmp_path: Path, playbook: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")  # YAML output wraps long lines
    return subprocess.run([str(PLAYBOOK_BIN), "-i", str(inventory(tmp_path)), str(playbook),
                           "-e", "ansible_become=false", *extra],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


def apply(tmp_path: Path, needs_reboot: bool, *extra: str) -> subprocess.CompletedProcess:
    playbook = tmp_path / "apply.yml"
    playbook.write_text(APPLY)
    return play(tmp_path, playbook, "-e", f"memory_needs_reboot={needs_reboot}", *extra)


def test_a_needed_reboot_is_recorded_and_announced_not_done(tmp_path):
    proc = apply(tmp_path, True)
    assert proc.returncode == 0, proc.stdout
    assert "REBOOT REQUIRED on gpu01: memory: 1 GiB huge pages are reserved on the kernel command line" in proc.stdout
    assert "Not rebooting (tunefleet_reboot_policy=never" in proc.stdout
    marker = tmp_path / "state" / "reboot-required"
    assert json.loads(marker.read_text()) == {
        "reasons": ["memory: 1 GiB huge pages are reserved on the kernel command line"], "boot_id": BOOT_ID}
    assert oct(marker.stat().st_mode & 0o777) == "0o600"
    assert oct(marker.parent.stat().st_mode & 0o777) == "0o700"
    # A second identical run changes nothing.
    again = apply(tmp_path, True)
    assert "changed=0" in again.stdout.splitlines()[-2]


def test_no_reason_no_marker(tmp_path):
    proc = apply(tmp_path, False)
    assert proc.returncode == 0, proc.stdout
    assert "REBOOT REQUIRED" not in proc.stdout
    assert not (tmp_path / "state").exists()


def test_a_marker_from_this_boot_survives_a_run_that_changed_nothing(tmp_path):
    apply(tmp_path, True)
    proc = apply(tmp_path, False)
    assert (tmp_path / "state" / "reboot-required").exists()
    assert "REBOOT REQUIRED on gpu01: memory: 1 GiB" in proc.stdout


def test_a_marker_from_an_earlier_boot_is_removed(tmp_path):
    marker = tmp_path / "state" / "reboot-required"
    marker.parent.mkdir(mode=0o700)
    marker.write_text(json.dumps({"reasons": ["memory: old"], "boot_id": "00000000-0000-0000-0000-000000000000"}))
    proc = apply(tmp_path, False)
    assert proc.returncode == 0, proc.stdout
    assert not marker.exists()
    assert "REBOOT REQUIRED" not in proc.stdout


VERIFY_ROLES = ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu", "verify_node")


@pytest.mark.skipif(not all((REPO / "roles" / r / "tasks").is_dir() for r in VERIFY_ROLES),
                    reason="playbooks/reboot.yml imports verify.yml, which needs every tuning role")
def test_reboot_playbook_does_not_reboot_without_permission(tmp_path):
    apply(tmp_path, True)
    marker = tmp_path / "state" / "reboot-required"
    proc = play(tmp_path, REPO / "playbooks" / "reboot.yml")
    assert proc.returncode == 0, proc.stdout
    assert "gpu01 needs a reboot (memory: 1 GiB huge pages" in proc.stdout
    assert "tunefleet_reboot_policy is never" in proc.stdout
    assert "TASK [reboot : Reboot the node]" not in proc.stdout
    assert marker.exists()

    # Allowed, it goes on towards the reboot, and the controller guard stops a local host.
    allowed = play(tmp_path, REPO / "playbooks" / "reboot.yml", "-e", "tunefleet_reboot_policy=if_needed")
    assert allowed.returncode != 0
    assert "rebooting it would reboot the controller" in allowed.stdout
    assert marker.exists()
