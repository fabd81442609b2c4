"""roles/scheduler_hooks through the real ansible-playbook (connection local) into a throwaway tree:
check mode changes nothing and says what it would, a converge installs deploy/'s files, a second run
changes nothing, and scheduler_hooks_state=absent removes every file it installed."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "scheduler_hooks.yml"

pytestmark = pytest.mark.slow


def play(root: Path, *extra: str) -> tuple:
    binary = Path(sys.executable).parent / "ansible-playbook"
    if not binary.exists():
        pytest.skip("ansible-playbook is not installed in this venv")
    options = {"scheduler_hooks_root": str(root), "scheduler_hooks_npd": True, "scheduler_hooks_timer": True,
               "ansible_python_interpreter": sys.executable}
    out = subprocess.run([str(binary), "-i", "localhost,", "-c", "local", str(PLAYBOOK), "-e", json.dumps(options),
                          *extra], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, ANSIBLE_NOCOLOR="1"), timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    recap = re.search(r"changed=(\d+)", out.stdout)
    return int(recap.group(1)), out.stdout


def test_install_is_idempotent_check_mode_tells_the_truth_and_absent_removes_it(tmp_path):
    root = tmp_path / "node"
    (root / "etc/systemd/system").mkdir(parents=True)  # the node's own, as on a systemd host
    before = sorted(root.rglob("*"))
    changed, said = play(root, "--check", "--diff")
    assert changed > 0 and sorted(root.rglob("*")) == before  # said what it would do, did nothing
    assert "tunefleet-healthcheck" in said
    assert play(root)[0] > 0
    hook = root / "usr/local/libexec/tunefleet/tunefleet-prolog"
    assert hook.read_bytes() == (REPO / "deploy/slurm/tunefleet-slurm-hook").read_bytes()
    assert hook.stat().st_mode & 0o777 == 0o755
    assert (root / "etc/tunefleet/slurm.conf.snippet").read_text().count("tunefleet-healthcheck") == 1
    assert "OnUnitActiveSec=5min" in (root / "etc/systemd/system/tunefleet-health.timer").read_text()
    assert (root / "var/lib/tunefleet-metrics").is_dir()
    assert play(root)[0] == 0
    assert play(root, "-e", "scheduler_hooks_state=absent")[0] > 0
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert left == []
