"""Each role's `<role>_enabled: false` switches it off cleanly: no task fails, nothing changes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu")


def test_every_role_disabled_runs_clean_in_check_mode(tmp_path: Path) -> None:
    toggles = tmp_path / "toggles.json"
    toggles.write_text(json.dumps({f"{role}_enabled": False for role in ROLES}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/local", "playbooks/site.yml",
         "--check", "-e", f"@{toggles}"],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    recap = [line for line in done.stdout.splitlines() if line.startswith("localhost")][-1]
    assert "changed=0" in recap and "failed=0" in recap
