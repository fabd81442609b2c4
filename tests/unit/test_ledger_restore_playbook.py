"""playbooks/restore.yml itself: restores what the ledger holds, moves the ledger aside, and
clears a reboot marker the restore made moot. Uses only files under a temporary directory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_core as core  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook not in this environment"),
]


def restore(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    gpu01:\n      ansible_connection: local\n"
                         f"      ansible_python_interpreter: {sys.executable}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return subprocess.run(
        [str(PLAYBOOK_BIN), "-i", str(inventory), str(REPO / "playbooks" / "restore.yml"), "-e", "ansible_become=false",
         "-e", f"restore_ledger_path={tmp_path / 'state' / 'ledger.json'}",
         "-e", f"reboot_marker_path={tmp_path / 'state' / 'reboot-required'}", *extra],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


def test_restore_playbook_puts_files_back_and_archives_the_ledger(tmp_path):
    conf = tmp_path / "etc" / "nccl.conf"
    dropin = tmp_path / "etc" / "sysctl.d" / "90-tunefleet.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("NCCL_DEBUG=INFO\n")
    ledger = str(tmp_path / "state" / "ledger.json")
    core.record("/", ledger, [], [str(conf), str(dropin)], [], None, recorded_by="gpu")
    conf.write_text("NCCL_DEBUG=WARN\n")
    dropin.parent.mkdir()
    dropin.write_text("vm.swappiness = 0\n")
    marker = tmp_path / "state" / "reboot-required"
    marker.write_text(json.dumps({"reasons": ["memory: 1 GiB pages"], "boot_id": "this boot"}))

    preview = restore(tmp_path, "--check")
    assert preview.returncode == 0, preview.stdout
    assert conf.read_text() == "NCCL_DEBUG=WARN\n" and dropin.exists()

    proc = restore(tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert "gpu01: 2 item(s) restored, ledger moved to" in proc.stdout
    assert conf.read_text() == "NCCL_DEBUG=INFO\n"
    assert not dropin.exists() and not dropin.parent.exists()
    assert not Path(ledger).exists()
    assert [p.name for p in (tmp_path / "state").glob("ledger.restored-*.json")]
    assert not marker.exists(), "the apply's pending reboot is moot once its change is undone"

    again = restore(tmp_path)
    assert again.returncode == 0 and "nothing to restore" in again.stdout
