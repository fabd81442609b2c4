"""The host guard (molecule/host_guard.sh) also snapshots tunefleet's own paths (/var/lib/tunefleet,
/etc/tunefleet, /run/tunefleet, ...): a test that records history there fails `make test` (issue 32).
TUNEFLEET_GUARD_PATHS points the guard at a directory of the test's own, so the machine's are never touched."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GUARD = Path(__file__).resolve().parents[2] / "molecule" / "host_guard.sh"


def guard(paths: str, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TUNEFLEET_MOLECULE_ALLOW_HOST_DRIFT"}
    env.update(PYTHON=sys.executable, TUNEFLEET_GUARD_PATHS=paths)
    return subprocess.run([str(GUARD), *command], capture_output=True, text=True, env=env, timeout=180)


@pytest.mark.slow
def test_a_file_written_or_changed_under_a_guarded_path_fails_the_guard(tmp_path):
    state = tmp_path / "var-lib-tunefleet"
    state.mkdir()
    (state / "ledger.json").write_text("{}\n")
    clean = guard(str(state), "true")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    wrote = guard(str(state), "sh", "-c", f"echo x > {state}/history.sqlite")
    assert wrote.returncode == 1 and f"+{state}/history.sqlite f" in wrote.stdout
    assert "wrote under tunefleet's own paths" in wrote.stdout
    changed = guard(str(state), "sh", "-c", f"echo '{{\"a\": 1}}' > {state}/ledger.json")
    assert changed.returncode == 1 and "ledger.json" in changed.stdout


@pytest.mark.slow
def test_a_guarded_path_that_appears_fails_the_guard(tmp_path):
    missing = tmp_path / "run-tunefleet"
    made = guard(str(missing), "mkdir", str(missing))
    assert made.returncode == 1 and f"-{missing} absent" in made.stdout


def test_the_default_list_holds_tunefleets_own_root_paths():
    text = GUARD.read_text()
    default = text[text.index('tunefleet_paths="${TUNEFLEET_GUARD_PATHS:-'):].splitlines()[0]
    for path in ("/var/lib/tunefleet", "/etc/tunefleet", "/run/tunefleet"):
        assert path in default
