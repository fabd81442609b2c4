"""The storage benchmark's scratch file as root on a shared node: planted links and names, other
users' directories, cleanup on every exit, and where it goes by default (the data disk).

Runs the real storage.run with the real Node and runner (the O_DIRECT engine writes and reads
a small file for real); attacks are planted as files and links, some owned by uid 65534.
"""
from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

from verify.bench import storage
from verify.bench.odirect_read import make_file
from verify.interrupt import Interrupted
from verify.node import Node
from verify.result import Status
from verify.runner import run_command

OTHER_UID = 65534  # nobody
SMALL = {"size_bytes": 4 << 20, "tries": 1, "engines": ("odirect",)}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting files as another user needs root")


def shared_dir(tmp_path: Path, mode: int = 0o1777) -> Path:
    """A directory like /var/tmp: root's, everyone may add names, the sticky bit guards them."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    return shared


def victim(tmp_path: Path) -> Path:
    target = tmp_path / "victim"
    target.mkdir()
    (target / "secret").write_text("root's file\n")
    return target


def snapshot(directory: Path) -> dict:
    return {p.name: (p.is_symlink(), p.read_text() if p.is_file() and not p.is_symlink() else None)
            for p in directory.iterdir()}


def test_a_link_planted_at_the_old_fixed_name_is_never_written_through(tmp_path):
    shared, target = shared_dir(tmp_path), victim(tmp_path)
    os.symlink(target / "secret", shared / "tunefleet-bench-read.bin")
    (shared / "read.bin").symlink_to(target / "secret")
    before = snapshot(shared), snapshot(target)
    results = storage.run(None, None, Node(), dict(SMALL, dir=str(shared)))
    assert results[0].status == Status.PASS, results[0].reason
    assert results[0].details["runs"][0]["bytes"] == 4 << 20
    scratch = Path(results[0].details["file"])
    assert scratch.parent.parent == shared and scratch.parent.name.startswith("tunefleet-storage-")
    assert (snapshot(shared), snapshot(target)) == before  # the scratch directory is gone, nothing else moved


def test_a_predicted_scratch_directory_name_is_skipped_not_reused(tmp_path, monkeypatch):
    """Even a name guessed right (here: forced) is never entered: mkdir fails, a new name is drawn."""
    shared, target = shared_dir(tmp_path), victim(tmp_path)
    names = iter(["aaaa", "aaaa", "bbbb"])

    monkeypatch.setattr("verify.safe_io.random_hex", lambda nbytes: next(names))
    os.symlink(target, shared / "tunefleet-storage-aaaa")  # a link to another directory
    results = storage.run(None, None, Node(), dict(SMALL, dir=str(shared)))
    assert results[0].status == Status.PASS
    assert Path(results[0].details["file"]).parent == shared / "tunefleet-storage-bbbb"
    assert sorted(os.listdir(target)) == ["secret"]
    assert os.listdir(shared) == ["tunefleet-storage-aaaa"]


@needs_root
@pytest.mark.parametrize("how", ["other owner", "world-writable, no sticky bit", "group-writable",
                                 "inside another user's directory"])
def test_a_directory_another_user_could_change_is_refused_before_anything_runs(tmp_path, how):
    calls = []

    def runner(argv, timeout_s=60.0, env=None, cwd=None):
        calls.append(argv)
        return run_command(argv, timeout_s=timeout_s, env=env, cwd=cwd)

    place = tmp_path / "place"
    place.mkdir(mode=0o755)
    chosen = place
    if how == "other owner":
        os.chown(place, OTHER_UID, OTHER_UID)
    elif how == "world-writable, no sticky bit":
        os.chmod(place, 0o777)
    elif how == "group-writable":
        os.chown(place, 0, OTHER_UID)
        os.chmod(place, 0o775)
    else:
        os.chown(place, OTHER_UID, OTHER_UID)
        chosen = place / "inner"
        chosen.mkdir()
    results = storage.run(None, None, Node(runner=runner), dict(SMALL, dir=str(chosen)))
    assert results[0].status == Status.ERROR
    assert results[0].reason.startswith("refusing to write the scratch file") and str(place) in results[0].reason
    assert "--dir" in results[0].remediation
    assert calls == [] and not list(chosen.iterdir())


def test_the_scratch_file_is_new_private_and_never_a_planted_name(tmp_path):
    target = victim(tmp_path)
    link, existing = tmp_path / "link.bin", tmp_path / "existing.bin"
    link.symlink_to(target / "secret")
    existing.write_text("someone's data")
    for planted in (link, existing):
        with pytest.raises(FileExistsError):
            make_file(str(planted), 1 << 20)
    assert (target / "secret").read_text() == "root's file\n" and existing.read_text() == "someone's data"
    old = os.umask(0)
    try:
        make_file(str(tmp_path / "new.bin"), 1 << 20)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.bin").st_mode) == 0o600


def test_the_scratch_directory_goes_when_the_run_is_interrupted(tmp_path):
    """Interrupted after the file is written (the real engine wrote it), during the read."""
    shared = shared_dir(tmp_path)
    seen = []

    def runner(argv, timeout_s=60.0, env=None, cwd=None):
        if "--create-bytes" in argv:
            out = run_command(argv, timeout_s=timeout_s, env=env, cwd=cwd)
            seen.append(Path(argv[argv.index("--file") + 1]))
            assert seen[0].stat().st_size == 4 << 20
            return out
        raise Interrupted(signal.SIGTERM)

    with pytest.raises(Interrupted):
        storage.run(None, None, Node(runner=runner), dict(SMALL, dir=str(shared)))
    assert seen and not seen[0].parent.exists() and os.listdir(shared) == []


# --- where the scratch file goes by default: the data disk ---------------------------------------

MOUNTINFO = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 259:1 / {scratch} rw,relatime shared:5 - xfs /dev/nvme0n1p1 rw
31 22 9:0 / {raid} rw,noatime shared:6 - ext4 /dev/md0 rw,stripe=256
32 22 9:0 /sub {bind} rw,noatime shared:6 - ext4 /dev/md0 rw
33 22 259:4 / {readonly} ro,relatime shared:7 - ext4 /dev/nvme2n1 ro
34 22 8:16 / {usb} rw,relatime shared:8 - ext4 /dev/sdb rw
"""


def fake_node(tmp_path: Path, live_dirs: dict) -> Node:
    """A /sys and /proc tree: nvme0n1 (partition p1), nvme1n1 and nvme3n1 in md0, nvme2n1, sdb, vda."""
    root = tmp_path / "root"
    block = root / "sys" / "block"
    for disk in ("vda", "nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1", "sdb", "md0"):
        (block / disk).mkdir(parents=True)
    (block / "nvme0n1" / "nvme0n1p1").mkdir()
    (block / "md0" / "slaves").mkdir()
    for member in ("nvme1n1", "nvme3n1"):
        (block / "md0" / "slaves" / member).symlink_to(f"../../{member}")
    dev = root / "sys" / "dev" / "block"
    dev.mkdir(parents=True)
    for number, name in (("253:0", "vda"), ("259:1", "nvme0n1/nvme0n1p1"), ("9:0", "md0"), ("259:4", "nvme2n1"),
                         ("8:16", "sdb")):
        (dev / number).symlink_to(f"../../devices/virtual/block/{name}")
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "mountinfo").write_text(MOUNTINFO.format(**live_dirs))
    return Node(root=str(root))


def live_dirs(tmp_path: Path) -> dict:
    dirs = {name: tmp_path / "mnt" / name for name in ("scratch", "raid", "bind", "readonly", "usb")}
    for path in dirs.values():
        path.mkdir(parents=True)
    return {name: str(path) for name, path in dirs.items()}


def test_data_disks_are_the_tuned_devices_their_partitions_and_arrays_on_them(tmp_path):
    dirs = live_dirs(tmp_path)
    node = fake_node(tmp_path, dirs)
    mounts = storage.data_disk_mounts(node, None)
    # not /dev/vda (not a data disk), not the bind mount of md0 again, not the read-only one, not sdb
    assert [(m["dir"], m["device"], m["fstype"]) for m in mounts] == [
        (dirs["scratch"], "nvme0n1p1", "xfs"), (dirs["raid"], "md0", "ext4")]
    # storage_device_patterns decides what a data disk is, as for the storage role
    assert [m["device"] for m in storage.data_disk_mounts(node, {"storage": {"device_patterns": ["sd*"]}})] == ["sdb"]


def test_the_default_place_is_the_roomiest_safe_data_disk_else_var_tmp(tmp_path, monkeypatch):
    dirs = live_dirs(tmp_path)
    node = fake_node(tmp_path, dirs)
    free = {dirs["scratch"]: 10 << 30, dirs["raid"]: 50 << 30}
    monkeypatch.setattr(storage, "free_bytes", lambda directory: free.get(directory, 1 << 40))
    opts = storage.options_from(None, {})
    chosen, why = storage.scratch_parent(node, None, opts)
    assert chosen == dirs["raid"] and "data disk md0 (ext4)" in why
    if os.geteuid() == 0:  # the roomiest one belongs to another user: the next safe one is taken
        os.chown(dirs["raid"], OTHER_UID, OTHER_UID)
        assert storage.scratch_parent(node, None, opts)[0] == dirs["scratch"]
        os.chown(dirs["scratch"], OTHER_UID, OTHER_UID)
        chosen, why = storage.scratch_parent(node, None, opts)
        assert chosen == storage.FALLBACK_DIR and "not safe for root" in why and "uid 65534" in why
    assert storage.scratch_parent(node, None, storage.options_from(None, {"dir": "/srv/x"})) == ("/srv/x", "--dir")
    bare = Node(root=str(tmp_path / "empty"))
    chosen, why = storage.scratch_parent(bare, None, opts)
    assert chosen == "/var/tmp" and why.startswith("no data disk")
