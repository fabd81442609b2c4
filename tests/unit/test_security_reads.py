"""Planted attacks on what root reads from a path a user can name (issue 28): a 3 GiB sparse node
report, a link to /dev/zero, a FIFO, a link out of a --root tree to /etc/shadow. Each must end in an
error naming the file (an ERROR in the run), never a MemoryError, a hang or a secret in a report.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.helpers.other_user import give, needs_root, shared_dir
from verify.bounded_load import BoundedLoadError, load_json_bounded, read_bounded
from verify.safe_io import TooLargeError, UnsafePathError, read_capped

pytestmark = needs_root


@pytest.fixture
def theirs(tmp_path) -> Path:
    return shared_dir(tmp_path / "home-of-nobody")


def test_a_3_gib_sparse_report_is_refused_by_name_without_reading_it(theirs):
    report = theirs / "report.json"
    with open(report, "wb") as handle:
        handle.truncate(3 << 30)
    give(report)
    with pytest.raises(BoundedLoadError, match=rf"node report {report} is larger than"):
        load_json_bounded(str(report), what="node report")
    with pytest.raises(TooLargeError, match=str(report)):
        read_capped(str(report), 1 << 20)


def test_a_link_to_dev_zero_is_refused_not_read_forever(theirs):
    link = theirs / "report.json"
    link.symlink_to("/dev/zero")
    give(link)
    with pytest.raises(BoundedLoadError, match=rf"{link}.*symlink"):
        read_bounded(str(link), what="node report")
    # Followed on purpose (a caller that allows links): still a device, still refused.
    with pytest.raises(UnsafePathError, match="not a regular file"):
        read_capped(str(link), follow_symlinks=True)


def test_a_fifo_is_refused_without_hanging(theirs):
    fifo = theirs / "report.json"
    os.mkfifo(fifo)
    give(fifo)
    outcome: list = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert outcome and "not a regular file" in outcome[0]


def _refusal(path: Path) -> str:
    try:
        read_capped(str(path))
    except OSError as exc:
        return str(exc)
    return "read"


def test_a_root_tree_link_to_a_secret_stays_out_of_the_report(tmp_path, theirs):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret\n")
    secret.chmod(0o600)
    tree = theirs / "tree"
    (tree / "proc").mkdir(parents=True)
    (tree / "etc").symlink_to(tmp_path)  # a directory link out of the tree
    (tree / "proc" / "cmdline").symlink_to(secret)  # a file link
    for path in (tree, tree / "proc", tree / "etc", tree / "proc" / "cmdline"):
        give(path)
    with pytest.raises(UnsafePathError, match="symlink"):
        read_capped(str(tree / "proc" / "cmdline"), within=str(tree))
    with pytest.raises(UnsafePathError, match="leads out of"):
        read_capped(str(tree / "etc" / "shadow"), within=str(tree))


def test_an_ordinary_file_and_a_proc_file_are_read_whole(tmp_path):
    report = tmp_path / "report.json"
    report.write_text('{"ok": true}')
    assert load_json_bounded(str(report)) == {"ok": True}
    assert read_capped("/proc/self/status").startswith(b"Name:")  # size 0 on stat, read to the end
