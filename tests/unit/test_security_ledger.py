"""Planted attacks on the ledger and the reboot marker (issue 37 item 2): a path through `nobody`'s symlink to a
root directory made the modules chmod that directory 0700 and write into it, and a ledger file of nobody's made
restore write nobody's content as root (a setuid-root file). Both are refused by name, nothing changed."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.helpers.other_user import give, needs_root
from tests.helpers.plugins import load_plugin

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_core as core  # noqa: E402

reboot_marker = load_plugin("modules", "reboot_marker")
pytestmark = needs_root


def sticky_tmp(reachable) -> Path:
    """A /tmp-like directory (1777): anyone may add a name, here nobody's link."""
    shared = reachable / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


@pytest.fixture
def roots_dir(reachable) -> Path:
    """A root directory (0755) that nobody's link points at."""
    target = reachable / "root-dir"
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    return target


def test_a_ledger_path_through_another_users_link_is_refused_and_nothing_changes(reachable, roots_dir):
    link = sticky_tmp(reachable) / "state"
    link.symlink_to(roots_dir)
    give(link)
    with pytest.raises(core.LedgerError, match="symlink of uid 65534"):
        core.save_ledger("/", f"{link}/ledger.json", core.empty_ledger())
    with pytest.raises(core.LedgerError, match="symlink of uid 65534"), core.ledger_lock("/", f"{link}/ledger.json"):
        pass
    assert stat.S_IMODE(roots_dir.stat().st_mode) == 0o755 and list(roots_dir.iterdir()) == []


def test_a_ledger_file_of_another_users_is_never_restored_from(reachable):
    state = reachable / "var-lib-tunefleet"
    state.mkdir(mode=0o700)
    target = reachable / "etc-target"
    ledger = core.empty_ledger()
    ledger["files"][str(target)] = {"state": "present", "mode": "4755", "uid": 0, "gid": 0,
                                    "content_b64": "IyEvYmluL3NoCg==", "sha256": "x"}
    path = state / "ledger.json"
    path.write_text(json.dumps(ledger))
    give(path)
    with pytest.raises(core.LedgerError, match="owned by uid 65534"):
        core.load_ledger("/", str(path))
    path.chmod(0o666)
    os.chown(path, 0, 0)
    with pytest.raises(core.LedgerError, match="writable by everyone"):
        core.load_ledger("/", str(path))
    assert not target.exists()


def test_the_reboot_marker_through_another_users_link_is_refused(reachable, roots_dir):
    link = sticky_tmp(reachable) / "state"
    link.symlink_to(roots_dir)
    give(link)
    with pytest.raises(reboot_marker.MarkerError, match="symlink of uid 65534"):
        reboot_marker.apply("/", f"{link}/reboot-required", ["kernel cmdline"], False, False)
    assert stat.S_IMODE(roots_dir.stat().st_mode) == 0o755 and list(roots_dir.iterdir()) == []


def test_a_root_owned_link_on_the_way_is_still_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    core.save_ledger("/", f"{tmp_path}/via/lib/ledger.json", core.empty_ledger())
    assert (real / "lib" / "ledger.json").is_file() and stat.S_IMODE((real / "lib").stat().st_mode) == 0o700


def test_the_reboot_role_reads_the_marker_without_following_a_link(reachable, roots_dir, tmp_path):
    """The reboot role read the marker with slurp (any file, as root); the module's read refuses a path
    through nobody's link and never reads a marker that is a link (to a root-only file)."""
    link = sticky_tmp(reachable) / "state"
    link.symlink_to(roots_dir)
    give(link)
    with pytest.raises(reboot_marker.MarkerError, match="symlink of uid 65534"):
        reboot_marker.read_only("/", f"{link}/reboot-required")
    secret = tmp_path / "shadow"
    secret.write_text('{"boot_id": "x", "reasons": ["root:$6$secret"]}')
    secret.chmod(0o600)
    state = reachable / "var-lib-tunefleet"
    state.mkdir(mode=0o700)
    (state / "reboot-required").symlink_to(secret)
    found = reboot_marker.read_only("/", f"{state}/reboot-required")
    assert found["present"] and "secret" not in json.dumps(found) and "not followed" in found["earlier_problem"]
    assert "ansible.builtin.slurp" not in (REPO / "roles" / "reboot" / "tasks" / "reboot.yml").read_text()
