"""A value the kernel refuses although preflight let it through (a key preflight has no range
for): the sysctl role fails naming the VARIABLE and key, every value it had written is put back,
and the ledger holds only the values from before (restoring it would change nothing).

Runs the real role in throwaway network and mount namespaces: net.* keys, /var/lib (the ledger)
and /etc/sysctl.d are the namespaces' own, so nothing on this machine changes."""
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

pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not PLAYBOOK_BIN.exists(),
                       reason="needs root, unshare and ansible-playbook"),
]

PLAY = """
- name: The sysctl role alone, as if preflight had passed
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: sysctl
      vars:
        sysctl_settings: {net.core.somaxconn: 8191}
        # The kernel refuses a first port above the last (preflight would have said so first).
        sysctl_extra_settings: {net.ipv4.ip_local_port_range: "3000 2000"}
"""

IN_NAMESPACES = """
set -u
mount -t tmpfs tmpfs /var/lib && mount -t tmpfs tmpfs /etc/sysctl.d || exit 99
before="$(cat /proc/sys/net/core/somaxconn)|$(cat /proc/sys/net/ipv4/ip_local_port_range)"
"$@" > /tmp/unused 2>&1; rc=$?
printf '%s\\n' "$rc" "$before" "$(cat /proc/sys/net/core/somaxconn)|$(cat /proc/sys/net/ipv4/ip_local_port_range)"
cat /var/lib/tunefleet/ledger.json 2>/dev/null || echo '{}'
"""


def test_the_kernel_refusal_names_the_variable_and_nothing_stays_changed(tmp_path):
    (tmp_path / "play.yml").write_text(PLAY)
    log = tmp_path / "out.log"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_LOG_PATH=str(log))
    done = subprocess.run(
        ["unshare", "--net", "--mount", "sh", "-c", IN_NAMESPACES, "-", str(PLAYBOOK_BIN), "-i", "localhost,",
         "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    lines = done.stdout.splitlines()
    rc, before, after = lines[0], lines[1], lines[2]
    output = log.read_text()
    assert rc != "0", output
    assert ("sysctl_extra_settings['net.ipv4.ip_local_port_range']: /proc/sys/net/ipv4/ip_local_port_range: "
            "the kernel refused '3000 2000'") in output
    assert after == before  # somaxconn, written first, was put back
    ledger = json.loads("\n".join(lines[3:]))
    live = dict(zip(("/proc/sys/net/core/somaxconn", "/proc/sys/net/ipv4/ip_local_port_range"), before.split("|")))
    assert set(ledger["paths"]) == set(live)  # recorded before the write, as the role does
    for path, entry in ledger["paths"].items():
        assert " ".join(entry["value"].split()) == " ".join(live[path].split()), f"ledger claims {path} changed"
