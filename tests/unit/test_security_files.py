"""Planted attacks on what tunefleet writes and reads as root (verify.safe_io and its users).

Each test plants what another user could (a directory of theirs, a symlink, a FIFO, a device)
and asserts tunefleet refuses it, leaving the target untouched.
"""
from __future__ import annotations

import os
import stat
import tarfile
import threading
from pathlib import Path

import pytest

from tests.helpers.other_user import give, needs_root, shared_dir
from verify import safe_io
from verify.safe_io import UnsafePathError

pytestmark = needs_root


@pytest.fixture
def secret(tmp_path) -> Path:
    """A root-only file an attacker wants written over or made readable."""
    path = tmp_path / "root-only" / "secret"
    path.parent.mkdir(mode=0o700)
    path.write_text("root's secret\n")
    path.chmod(0o600)
    return path


def unchanged(path: Path) -> bool:
    return path.read_text() == "root's secret\n" and stat.S_IMODE(path.stat().st_mode) == 0o600


# ---- writing --------------------------------------------------------------------------------


def test_a_directory_another_user_owns_is_refused_for_writing(tmp_path):
    theirs = shared_dir(tmp_path / "home-of-nobody")
    with pytest.raises(UnsafePathError, match=r"home-of-nobody is owned by uid 65534"):
        safe_io.write_file_atomic(str(theirs / "report.json"), "{}")
    with pytest.raises(UnsafePathError, match="owned by uid 65534"):
        safe_io.safe_mkdir(str(theirs / "reports"))  # not even a new directory inside it
    assert list(theirs.iterdir()) == []


def test_a_symlink_another_user_planted_is_not_followed(tmp_path, secret):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: anyone may add a name
    link = sticky / "reports"
    link.symlink_to(secret.parent)
    give(link)
    with pytest.raises(UnsafePathError, match="symlink .*reports .*belongs to uid 65534"):
        safe_io.write_file_atomic(str(link / "secret"), "pwned")
    assert unchanged(secret)


def test_a_symlink_at_the_file_name_is_replaced_never_written_through(tmp_path, secret):
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    (out / "report.json").symlink_to(secret)
    safe_io.write_file_atomic(str(out / "report.json"), "{}")
    assert unchanged(secret)
    assert not (out / "report.json").is_symlink() and (out / "report.json").read_text() == "{}"


def test_group_and_world_writable_directories_are_refused(tmp_path):
    for mode, why in ((0o775, "writable by group"), (0o777, "writable by everyone")):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        os.chown(shared, 0, 65534 if mode == 0o775 else 0)
        with pytest.raises(UnsafePathError, match=why):
            safe_io.check_dir_trusted(str(shared))


def test_files_are_created_private_and_the_mode_is_set_on_the_descriptor(tmp_path):
    os.umask(0o000)  # a careless umask must not widen the mode
    try:
        safe_io.write_file_atomic(str(tmp_path / "a"), "x")
        safe_io.write_file_atomic(str(tmp_path / "b"), "x", safe_io.SHARED_FILE)
    finally:
        os.umask(0o022)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no temporary file left


# ---- the report writers ------------------------------------------------------------------------


def test_the_node_report_refuses_a_report_directory_another_user_made(tmp_path, capsys):
    from verify.cli import main

    theirs = shared_dir(tmp_path / "reports")
    code = main(["verify", "--local", "--no-bench", "--root", str(tmp_path / "empty-root"), "--out", str(theirs)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be used safely" in err and "owned by uid 65534" in err
    assert list(theirs.iterdir()) == []


def test_node_reports_are_owner_only_unless_asked(tmp_path):
    from tests.helpers.fake_node import desired_state
    from verify.report import build_report, write_reports

    report = build_report(desired_state(), {"host": "n1"}, [], {"duration_s": 0.1})
    written, _ = write_reports(report, ["json", "md", "prom"], str(tmp_path / "private"))
    modes = {Path(p).name: stat.S_IMODE(Path(p).stat().st_mode) for p in written}
    # node_exporter reads the textfile as its own user; it holds statuses and figures only.
    assert modes == {"report.json": 0o600, "report.md": 0o600, "tunefleet.prom": 0o644}
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o700
    written, _ = write_reports(report, ["json"], str(tmp_path / "shared"), world_readable=True)
    assert stat.S_IMODE(Path(written[0]).stat().st_mode) == 0o644


def test_the_fleet_report_refuses_a_directory_another_user_made(tmp_path):
    from verify.fleet.report import write_reports
    from verify.fleet.summary import build_summary

    theirs = shared_dir(tmp_path / "fleet")
    with pytest.raises(UnsafePathError, match="owned by uid 65534"):
        write_reports(build_summary([], []), theirs, ["json"])
    written = write_reports(build_summary([], []), tmp_path / "mine", ["json", "md"])
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o600}


# ---- the fleet run directory and the bundle nodes run as root ----------------------------------


def test_each_fleet_run_gets_a_new_private_directory(tmp_path):
    from verify.fleet.rundir import new_run_dir

    first, second = new_run_dir(str(tmp_path / "reports")), new_run_dir(str(tmp_path / "reports"))
    assert first != second
    for made in (first, second):
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o700 and os.listdir(made) == []


def test_a_run_directory_made_in_advance_by_another_user_is_refused(tmp_path):
    from verify.fleet.rundir import claim_run_dir, main

    reports = tmp_path / "reports"
    reports.mkdir(mode=0o700)
    planted = shared_dir(reports / "20260101T000000Z")
    with pytest.raises(UnsafePathError, match="owned by uid 65534"):
        claim_run_dir(str(planted))
    assert main([str(reports), "--claim", planted.name]) == 2
    # ours but not private, or not empty: refused too (a run directory is always new)
    open_dir = reports / "open"
    open_dir.mkdir()
    open_dir.chmod(0o755)
    with pytest.raises(UnsafePathError, match="mode 0755, not 0700"):
        claim_run_dir(str(open_dir))
    used = reports / "used"
    used.mkdir(mode=0o700)
    (used / ".verify-bundle.tar.gz").write_text("someone's code")
    with pytest.raises(UnsafePathError, match="not empty"):
        claim_run_dir(str(used))
    assert main([str(reports), "--claim", "../elsewhere"]) == 2


def test_a_report_parent_another_user_owns_is_refused_for_a_new_run(tmp_path):
    from verify.fleet.rundir import new_run_dir

    with pytest.raises(UnsafePathError, match="owned by uid 65534"):
        new_run_dir(str(shared_dir(tmp_path / "reports")))


def test_the_bundle_is_never_written_where_another_user_can_swap_it(tmp_path):
    from verify.fleet.bundle import build

    home = Path(__file__).resolve().parents[2]
    theirs = shared_dir(tmp_path / "run")
    with pytest.raises(UnsafePathError):
        build(home, theirs / ".verify-bundle.tar.gz")
    assert list(theirs.iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    built = build(home, mine / ".verify-bundle.tar.gz")
    assert stat.S_IMODE(built.stat().st_mode) == 0o600


def test_the_node_archive_takes_no_symlinked_file(tmp_path, secret):
    from verify.noderun import archive_reports

    reports = tmp_path / "report"
    reports.mkdir(mode=0o700)
    (reports / "report.json").write_text("{}")
    (reports / "report.md").symlink_to(secret)
    assert archive_reports(str(reports), str(tmp_path / "r.tar.gz")) == 1
    with tarfile.open(tmp_path / "r.tar.gz") as tar:
        assert tar.getnames() == ["report.json"]


# ---- reading what someone else named -------------------------------------------------------


def test_a_fifo_is_refused_at_once_instead_of_hanging_the_run(tmp_path):
    fifo = tmp_path / "policy"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(str(fifo))), daemon=True)
    reader.start()
    reader.join(5)
    assert outcome and "not a regular file" in outcome[0]


def test_a_device_and_a_large_file_are_refused_not_read_whole(tmp_path):
    assert "not a regular file" in _refusal("/dev/zero")
    big = tmp_path / "big"
    big.write_bytes(b"x" * (64 * 1024 + 1))
    assert "more than the 65536" in _refusal(str(big))


def test_a_file_another_user_owns_or_a_symlink_is_not_trusted(tmp_path, secret):
    theirs = tmp_path / "policy"
    theirs.write_text("ban everything")
    give(theirs)
    assert "owned by uid 65534" in _refusal(str(theirs))
    link = tmp_path / "link"
    link.symlink_to(secret)
    assert "is a symlink" in _refusal(str(link))
    mine = tmp_path / "mine"
    mine.write_text("0000:17:00.0\n")
    assert safe_io.read_trusted_file(str(mine)) == "0000:17:00.0\n"


def _refusal(path: str) -> str:
    with pytest.raises(UnsafePathError) as caught:
        safe_io.read_trusted_file(path)
    return caught.value.strerror
