"""Planted attacks through POSIX ACLs (issue 28): a root:root directory whose ACL grants another user
write looks trusted by its mode bits alone (the group bits show the ACL mask, and the group is root).

Every test grants `nobody` write with a real ACL (the kernel's binary format written with setxattr, as
setfacl does), shows the grant works (nobody can create a file there), and asserts the refusal.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tests.helpers.other_user import UID, needs_root, run_as_other
from verify import inject, safe_io
from verify.engine import engine_sys_path
from verify.safe_io import ACL_XATTR, UnsafePathError, acl_writers

pytestmark = needs_root
NONE = 0xFFFFFFFF  # the id field of the entries that name no one (owner, owning group, mask, other)


def acl(*named: tuple, mask: int = 7) -> bytes:
    """The binary ACL: owner rwx, owning group r-x, the named (tag, perm, id) entries, mask, other r-x."""
    entries = [(0x01, 7, NONE), *named, (0x04, 5, NONE)]
    if named:
        entries.append((0x10, mask, NONE))
    entries.append((0x20, 5, NONE))
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in sorted(entries))


def grant_nobody_write(path: Path, mask: int = 7) -> Path:
    os.setxattr(str(path), ACL_XATTR, acl((0x02, 7, UID), mask=mask))
    return path


def nobody_can_create(directory: Path) -> bool:
    proc = run_as_other(f"touch '{directory}/by-nobody'")
    proc.wait(timeout=30)
    made = (directory / "by-nobody").exists()
    if made:
        (directory / "by-nobody").unlink()
    return made




@pytest.fixture
def acl_dir(reachable) -> Path:
    """root:root, mode 0775 by its mask, writable by nobody through a named ACL entry."""
    shared = reachable / "acl-shared"
    shared.mkdir(mode=0o755)
    grant_nobody_write(shared)
    assert shared.stat().st_uid == 0 and shared.stat().st_gid == 0
    assert nobody_can_create(shared), "the planted ACL must really grant write"
    return shared


def test_the_acl_parser_finds_named_writers_through_the_mask():
    assert acl_writers(acl((0x02, 7, UID))) == [("user", UID)]
    assert acl_writers(acl((0x08, 6, 1000))) == [("group", 1000)]
    assert acl_writers(acl((0x02, 7, UID), mask=5)) == []  # masked: the kernel grants no write
    assert acl_writers(acl((0x02, 7, 0), (0x08, 7, 0))) == []  # root itself
    assert acl_writers(acl((0x02, 5, UID))) == []  # read only
    assert acl_writers(b"\x01\x00\x00\x00") == [("acl", -1)]  # unknown version: never trusted
    assert acl_writers(b"\x02\x00\x00\x00\x01") == [("acl", -1)]  # truncated


def test_an_acl_granted_directory_is_refused_for_writing(acl_dir):
    with pytest.raises(UnsafePathError, match=rf"acl-shared is writable through its POSIX ACL by user {UID}"):
        safe_io.write_file_atomic(str(acl_dir / "report.json"), "{}")
    with pytest.raises(UnsafePathError, match="POSIX ACL"):
        safe_io.check_dir_trusted(str(acl_dir))
    assert not (acl_dir / "report.json").exists()


def test_an_acl_granted_parent_is_refused_on_the_way(acl_dir):
    child = acl_dir / "reports"
    child.mkdir(mode=0o700)
    with pytest.raises(UnsafePathError, match=r"acl-shared .*on the way to .*reports.* POSIX ACL"):
        safe_io.write_file_atomic(str(child / "report.json"), "{}")
    with pytest.raises(UnsafePathError, match="POSIX ACL"):
        safe_io.make_unique_dir(str(acl_dir), "run-")  # the fleet run directory's parent


def test_a_masked_acl_entry_is_not_a_writer(tmp_path):
    masked = tmp_path / "masked"
    masked.mkdir(mode=0o755)
    grant_nobody_write(masked, mask=5)
    safe_io.check_dir_trusted(str(masked))  # the kernel gives nobody no write: trusted


def test_an_acl_granted_directory_is_never_put_on_an_engines_path(acl_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(acl_dir))
    assert str(acl_dir) not in engine_sys_path()


def test_an_injection_directory_shared_by_acl_is_refused(acl_dir):
    (acl_dir / "smi.argv").write_text("nvidia-smi -q\n")
    (acl_dir / "smi.stdout").write_text("planted\n")
    with pytest.raises(inject.InjectionError, match="POSIX ACL"):
        inject.load(str(acl_dir))


def test_a_root_file_another_user_can_write_by_acl_is_not_trusted(tmp_path):
    script = tmp_path / "policy.sh"
    script.write_text("#!/bin/sh\n")
    os.setxattr(str(script), ACL_XATTR, acl((0x02, 6, UID)))
    with pytest.raises(UnsafePathError, match="POSIX ACL"):
        safe_io.read_trusted_file(str(script))
    with pytest.raises(UnsafePathError, match="POSIX ACL"):
        safe_io.check_file_trusted(str(script))
