"""SSH host keys are checked everywhere but the container scenarios, and the example fleet does
not log in as root: a spoofed node must not get a root session or feed back false reports."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
# host_key_checking = false in an ansible.cfg, ANSIBLE_HOST_KEY_CHECKING=False in a script or
# env block, host_key_checking: false in YAML, StrictHostKeyChecking=no in ssh arguments.
TURNED_OFF = re.compile(r"host_key_checking\W{0,4}(false|no|0)\b|StrictHostKeyChecking\W{0,3}no\b", re.IGNORECASE)


def tracked_files() -> list:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / name for name in out.split("\0") if name]


def test_host_key_checking_is_never_turned_off_outside_molecule():
    offenders = []
    for path in tracked_files():
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith(("molecule/", "tests/unit/test_security_ssh.py")) or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        offenders += [f"{relative}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                      if TURNED_OFF.search(line)]
    assert offenders == [], "host key checking turned off:\n" + "\n".join(offenders)


def test_the_pattern_catches_each_spelling():
    for line in ("host_key_checking = false", "host_key_checking=False", "ANSIBLE_HOST_KEY_CHECKING=false",
                 "host_key_checking: false", "ssh_args = -o StrictHostKeyChecking=no"):
        assert TURNED_OFF.search(line), line
    assert not TURNED_OFF.search("host_key_checking = true")


def test_the_example_fleet_logs_in_as_a_person_and_becomes_root():
    fleet = yaml.safe_load((REPO / "inventory" / "example" / "hosts.yml").read_text())["all"]["vars"]
    assert fleet.get("ansible_user", "the controller's user") != "root" and fleet["ansible_become"] is True
