"""The fleet bundle re-checked by descriptor right before nodes get it (issue 28, item 2).

Nodes unpack the bundle and run it as root. It is written into a private run directory
(test_security_files.py), then used by name later in the play: `python3 -m verify.fleet.bundle --check
PATH` re-checks it by descriptor (the directory and its parents through the trust check, the bundle
O_NOFOLLOW, ours, 0600, no other writer) and prints its sha256; each node compares its copy against that
sha256 before unpacking. The planted attacks give `nobody` a way to swap the bundle (a run directory of
theirs, an ACL grant, a group of theirs), show the swap really works, and assert the refusal; the last
tests read the playbook and the role to hold the wiring in place.
"""
from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import pytest
import yaml

from tests.helpers.other_user import GID, UID, give, needs_root, run_as_other
from verify.fleet.bundle import build, check, main
from verify.safe_io import ACL_XATTR, UnsafePathError

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ".verify-bundle.tar.gz"




def plant_root_bundle(run_dir: Path) -> Path:
    """What `verify.fleet.bundle OUT` leaves: a root-owned 0600 file (written directly here: build
    itself refuses such a directory, test_security_files.py)."""
    bundle = run_dir / BUNDLE
    bundle.write_bytes(b"tunefleet's own bundle")
    bundle.chmod(0o600)
    return bundle


def nobody_swaps(bundle: Path) -> None:
    """nobody replaces the bundle with their own file, as a live process of theirs."""
    theirs = bundle.parent / "theirs"
    proc = run_as_other(f"printf 'their code' > '{theirs}' && mv -f '{theirs}' '{bundle}'")
    assert proc.wait(timeout=30) == 0, "the planted directory must really let nobody swap the bundle"
    assert bundle.read_bytes() == b"their code" and bundle.stat().st_uid == UID


def refused(bundle: Path, why: str, capsys) -> None:
    with pytest.raises(UnsafePathError, match=why):
        check(str(bundle))
    capsys.readouterr()
    assert main(["--check", str(bundle)]) == 2
    said = capsys.readouterr()
    assert said.out == "", "no sha256 is printed for a refused bundle: the play fails before any copy"
    assert "refus" in said.err or "owned by" in said.err or "writable" in said.err


# ---- the check itself -----------------------------------------------------------------------


def test_a_bundle_in_the_private_run_directory_passes_with_its_sha256(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    built = build(ROOT, run_dir / BUNDLE)
    digest = hashlib.sha256(built.read_bytes()).hexdigest()
    assert check(str(built)) == digest
    assert main(["--check", str(built)]) == 0
    assert capsys.readouterr().out.strip() == digest


@needs_root
def test_a_run_directory_another_user_owns_is_refused(reachable, capsys):
    run_dir = reachable / "run"
    run_dir.mkdir(mode=0o755)
    give(run_dir)
    bundle = plant_root_bundle(run_dir)
    nobody_swaps(bundle)
    refused(bundle, r"run is owned by uid 65534", capsys)


@needs_root
def test_a_run_directory_shared_through_an_acl_is_refused(reachable, capsys):
    run_dir = reachable / "run"
    run_dir.mkdir(mode=0o755)
    # The kernel's binary ACL (as setfacl writes it): owner rwx, nobody rwx, group r-x, mask rwx, other r-x.
    entries = sorted([(0x01, 7, 0xFFFFFFFF), (0x02, 7, UID), (0x04, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF),
                      (0x20, 5, 0xFFFFFFFF)])
    os.setxattr(str(run_dir), ACL_XATTR, struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))
    assert run_dir.stat().st_uid == 0 and run_dir.stat().st_gid == 0  # root:root: the mode bits alone look fine
    bundle = plant_root_bundle(run_dir)
    nobody_swaps(bundle)
    refused(bundle, r"run is writable through its POSIX ACL by user 65534", capsys)


@needs_root
def test_a_run_directory_writable_by_another_group_is_refused(reachable, capsys):
    run_dir = reachable / "run"
    run_dir.mkdir()
    os.chown(run_dir, 0, GID)
    run_dir.chmod(0o770)
    bundle = plant_root_bundle(run_dir)
    nobody_swaps(bundle)  # nobody's group can write: nobody can swap it
    refused(bundle, "writable by group", capsys)


@needs_root
def test_a_bundle_that_is_not_ours_private_and_regular_is_refused(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"their code")
    give(theirs)
    bundle = run_dir / BUNDLE
    bundle.symlink_to(theirs)
    refused(bundle, "is a symlink", capsys)
    bundle.unlink()
    plant_root_bundle(run_dir)
    give(bundle)
    refused(bundle, "owned by uid 65534", capsys)
    bundle.unlink()
    plant_root_bundle(run_dir).chmod(0o644)
    refused(bundle, "has mode 0644, not 0600", capsys)
    bundle.unlink()
    os.mkfifo(bundle, 0o600)  # O_NONBLOCK: opening it does not hang
    refused(bundle, "is not a regular file", capsys)


# ---- the wiring: playbooks/verify.yml and roles/verify_node/tasks/ship.yml ---------------------


def load(path: str):
    return yaml.safe_load((ROOT / path).read_text())


def argv_of(task: dict) -> list:
    return (task.get("ansible.builtin.command") or {}).get("argv") or []


def test_the_playbook_rechecks_the_bundle_after_packing_and_before_any_node_gets_it():
    plays = load("playbooks/verify.yml")
    prepare = next(p for p in plays if p.get("name") == "Prepare the verify run on the controller")
    packed = [argv_of(t)[-1] for t in prepare["tasks"]
              if "verify.fleet.bundle" in argv_of(t) and "--check" not in argv_of(t)]
    assert packed, "the bundle is packed on the controller before the nodes' play"
    nodes = next(p for p in plays if p.get("name") == "Verify every node against its desired state")
    assert plays.index(prepare) < plays.index(nodes)
    # pre_tasks only gather facts and load role defaults: nothing there ships the bundle.
    for task in nodes["pre_tasks"]:
        role = task.get("ansible.builtin.import_role") or {}
        assert "ansible.builtin.setup" in task or role.get("tasks_from") == "defaults.yml", task["name"]
    first = nodes["tasks"][0]
    # isolated (-I) through the one bootstrap (verify.isolated), then the module
    assert argv_of(first)[1:4] == ["-I", "-B", "-c"] and argv_of(first)[7] == "verify.fleet.bundle" \
        and "--check" in argv_of(first), \
        "the --check task is the nodes' play's first task, before every task that ships (ship.yml's copy)"
    assert argv_of(first)[-1] == "{{ __verify_node_bundle }}" and nodes["vars"]["__verify_node_bundle"] == packed[0], \
        "the file checked is the file packed, and the one ship.yml copies"
    assert first["register"] == "__verify_node_bundle_check"
    assert first["run_once"] is True and first["delegate_to"] == "localhost" and first["become"] is False
    assert first["check_mode"] is False  # --check mode runs it too, as it runs the copy
    assert first.get("failed_when") is None and first.get("ignore_errors") is None, "a refusal stops the play"


def test_the_node_unpacks_only_a_copy_whose_sha256_matches_the_check():
    tasks = load("roles/verify_node/tasks/ship.yml")
    kinds = [next(k for k in t if k.startswith("ansible.builtin.")) for t in tasks]
    copy, stat, assertion, unarchive = (kinds.index(f"ansible.builtin.{module}")
                                        for module in ("copy", "stat", "assert", "unarchive"))
    assert copy < stat < assertion < unarchive, kinds
    assert kinds.count("ansible.builtin.unarchive") == 1
    copied = tasks[copy]["ansible.builtin.copy"]["dest"]
    assert tasks[copy]["ansible.builtin.copy"]["src"] == "{{ __verify_node_bundle }}"
    measured = tasks[stat]["ansible.builtin.stat"]
    assert measured["path"] == copied and measured["checksum_algorithm"] == "sha256" and measured["get_checksum"]
    that = " ".join(tasks[assertion]["ansible.builtin.assert"]["that"])
    assert f"{tasks[stat]['register']}.stat.checksum" in that and "__verify_node_bundle_check.stdout" in that
    unpack = tasks[unarchive]["ansible.builtin.unarchive"]
    assert unpack["remote_src"] is True and unpack["src"] == copied, "the node unpacks the copy it compared"
    assert copied.startswith("{{ __verify_node_workdir.path }}/"), "the copy sits in the node's private work directory"
