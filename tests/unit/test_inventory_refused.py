"""`ansible-playbook -i <nothing usable> playbooks/X.yml` fails saying so, instead of exiting 0
having done nothing: ansible.cfg refuses an unparsable or missing source, and each playbook's
first play (playbooks/inventory_has_hosts.yml) refuses an inventory without hosts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
PLAYBOOKS = ("site.yml", "verify.yml", "restore.yml", "reboot.yml")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook not in this environment"),
]


def play(inventory: Path, playbook: str, **env: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                       ANSIBLE_FORCE_COLOR="0", **env)
    return subprocess.run([str(PLAYBOOK_BIN), "-i", str(inventory), str(REPO / "playbooks" / playbook)],
                          capture_output=True, text=True, cwd=REPO, env=environment, timeout=120)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_a_missing_inventory_is_an_error(tmp_path, playbook):
    done = play(tmp_path / "no-such-inventory", playbook)
    assert done.returncode != 0
    assert "No inventory was parsed" in done.stderr
    assert "PLAY RECAP" not in done.stdout  # refused before any play ran


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_an_inventory_without_hosts_is_refused_by_the_first_play(tmp_path, playbook):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu: {}\n")
    done = play(inventory, playbook)
    assert done.returncode != 0
    assert f"the inventory {inventory} has no hosts" in done.stdout + done.stderr
    assert "TASK [preflight" not in done.stdout and "TASK [Put back" not in done.stdout


def test_without_the_config_setting_the_first_play_still_refuses_a_missing_path(tmp_path):
    done = play(tmp_path / "gone.yml", "site.yml", ANSIBLE_INVENTORY_UNPARSED_FAILED="false")
    assert done.returncode != 0
    assert f"the inventory {tmp_path / 'gone.yml'} has no hosts" in done.stdout + done.stderr


def test_an_inventory_with_a_host_passes_the_check():
    done = play(REPO / "inventory" / "local", "inventory_has_hosts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
