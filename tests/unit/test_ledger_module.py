"""The ledger module as Ansible runs it: changed flags, check mode, restore and archive."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
# The node's python is this one: interpreter discovery may find a broken shim first.
PYTHON = ("-e", f"ansible_python_interpreter={sys.executable}")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook not in this environment"),
]

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Record
      tunefleet.gpu_node.ledger:
        root: "{{ node_root }}"
        state: "{{ ledger_state }}"
        paths: [/proc/sys/net/core/rmem_max]
        files: [/etc/sysctl.d/90-tunefleet.conf]
        recorded_by: sysctl
      register: outcome
    - name: Save what the module returned
      ansible.builtin.copy:
        content: "{{ outcome | to_json }}"
        dest: "{{ node_root }}/../outcome.json"
        mode: "0600"
      check_mode: false
"""


def run_play(tmp_path: Path, state: str, *flags: str) -> dict:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run(
        [str(PLAYBOOK_BIN), "-i", "localhost,", str(play), "-e", f"node_root={tmp_path / 'node'}", *PYTHON,
         "-e", f"ledger_state={state}", *flags],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "outcome.json").read_text())


@pytest.fixture
def node(tmp_path):
    root = tmp_path / "node"
    (root / "proc/sys/net/core").mkdir(parents=True)
    (root / "proc/sys/net/core/rmem_max").write_text("212992\n")
    (root / "etc/sysctl.d").mkdir(parents=True)
    return root


def test_record_then_apply_then_restore_through_ansible(tmp_path, node):
    checked = run_play(tmp_path, "recorded", "--check")
    assert checked["changed"] is True
    assert not (node / "var").exists()

    first = run_play(tmp_path, "recorded")
    assert first["changed"] is True and first["recorded"]["paths"] == ["/proc/sys/net/core/rmem_max"]
    assert run_play(tmp_path, "recorded")["changed"] is False

    (node / "proc/sys/net/core/rmem_max").write_text("536870912\n")
    (node / "etc/sysctl.d/90-tunefleet.conf").write_text("net.core.rmem_max = 536870912\n")
    preview = run_play(tmp_path, "restored", "--check", "--diff")
    assert preview["changed"] is True and preview["archived_to"] is None
    assert (node / "etc/sysctl.d/90-tunefleet.conf").exists()

    restored = run_play(tmp_path, "restored")
    assert restored["changed"] is True
    assert (node / "proc/sys/net/core/rmem_max").read_text() == "212992"
    assert not (node / "etc/sysctl.d/90-tunefleet.conf").exists()
    assert (node / restored["archived_to"].lstrip("/")).exists()
    assert not (node / "var/lib/tunefleet/ledger.json").exists()

    nothing = run_play(tmp_path, "restored")
    assert nothing["changed"] is False and "nothing to restore" in nothing["msg"]


def test_bad_path_fails_with_one_message_and_no_ledger(tmp_path, node):
    play = tmp_path / "bad.yml"
    play.write_text(PLAY.replace("[/proc/sys/net/core/rmem_max]", "[/etc/passwd]"))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run(
        [str(PLAYBOOK_BIN), "-i", "localhost,", str(play), "-e", f"node_root={node}", "-e", "ledger_state=recorded",
         *PYTHON],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )
    assert proc.returncode != 0
    assert "'/etc/passwd': live paths must be under /proc/ or /sys/" in proc.stdout
    assert not (node / "var").exists()
    shutil.rmtree(node)


def test_restore_that_leaves_something_alone_is_not_reported_as_skipped(tmp_path, node):
    """Seen on the GPU machine: a result key named `skipped` made Ansible show the restore as a
    skipped task with changed=0, although it had written 25 values back."""
    run_play(tmp_path, "recorded")
    (node / "etc/sysctl.d/90-tunefleet.conf").write_text("net.core.rmem_max = 536870912\n")
    (node / "proc/sys/net/core/rmem_max").unlink()  # the recorded path is gone: left alone
    restored = run_play(tmp_path, "restored")
    assert restored["changed"] is True and not restored.get("skipped")
    assert restored["left_alone"] == ["/proc/sys/net/core/rmem_max: recorded '212992', but the file no longer exists"]
    assert not (node / "etc/sysctl.d/90-tunefleet.conf").exists()
