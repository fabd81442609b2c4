"""The demo's snapshot of /etc (molecule/shared/files/node_state.py, run as root by `make demo`)
records no digest of a secret file, and never writes through a symlink planted at its path."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

from tests.helpers.other_user import give, needs_root, shared_dir

FILE = Path(__file__).resolve().parents[2] / "molecule" / "shared" / "files" / "node_state.py"


def load_node_state():
    spec = importlib.util.spec_from_file_location("molecule_node_state_security", FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


node_state = load_node_state()


def test_secret_files_are_recorded_by_mode_never_by_digest(tmp_path):
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    secrets = {"shadow": 0o640, "gshadow": 0o640, "ssh/ssh_host_ed25519_key": 0o600}
    for name, mode in secrets.items():
        (etc / name).write_text(f"the content of {name}\n")
        (etc / name).chmod(mode)
    (etc / "hostname.conf").write_text("public\n")
    (etc / "hostname.conf").chmod(0o644)
    recorded = node_state.file_digests([str(etc)])
    text = json.dumps(recorded)
    for name, mode in secrets.items():
        digest = hashlib.sha256(f"the content of {name}\n".encode()).hexdigest()
        assert digest not in text
        assert recorded[str(etc / name)].startswith(f"secret: mode {mode:04o}")
    assert recorded[str(etc / "hostname.conf")] == hashlib.sha256(b"public\n").hexdigest()


def test_a_secret_that_changed_still_shows_as_a_difference(tmp_path):
    key = tmp_path / "key"
    key.write_text("one")
    key.chmod(0o600)
    before = node_state.file_digests([str(tmp_path)])
    key.write_text("two, longer")
    assert node_state.differences({"files": before}, {"files": node_state.file_digests([str(tmp_path)])})


@needs_root
def test_the_snapshot_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    reports = shared_dir(tmp_path / "checkout-of-nobody" / "reports")
    planted = reports / "state-before.json"
    planted.symlink_to(victim)
    give(planted)
    assert node_state.main(["save", str(planted), "--files", str(tmp_path / "nothing")]) == 0
    assert victim.read_text() == "root's file\n"
    assert not planted.is_symlink() and "selection" in json.loads(planted.read_text())
