"""Planted attack on a --root tree read as root (issue 37 item 4): the tree's owner swaps a directory for a
link out of the tree, and back, in a loop while verify reads. Resolving the path and then opening it by
name put a root-only file in report.json in 2 of 40 runs; reading beneath the tree by descriptor
(verify.safe_io.read_beneath, what Node.read_binary uses under --root) must never return it.
"""
from __future__ import annotations

import os
import threading

from tests.helpers.other_user import give, needs_root, shared_dir
from verify.node import Node

pytestmark = needs_root
SECRET = b"root:$6$only-root-may-read-this\n"
READS = 3000


def _swapper(tree, outside, stop: threading.Event, swaps: list) -> None:
    """The attacker: tree/etc is a real directory one moment, a link out of the tree the next."""
    real, link, etc = tree / "etc.real", tree / "etc.link", tree / "etc"
    while not stop.is_set():
        os.rename(link, etc)  # etc -> the directory holding the secret
        os.rename(etc, link)
        os.rename(real, etc)  # etc is the tree's own directory again
        os.rename(etc, real)
        swaps.append(1)


def _plant(tmp_path, reachable, target) -> tuple:
    secret_dir = tmp_path / "root-only"
    secret_dir.mkdir(mode=0o700)
    (secret_dir / "shadow").write_bytes(SECRET)
    (secret_dir / "shadow").chmod(0o600)
    tree = shared_dir(reachable / "tree")
    (tree / "etc.real").mkdir()
    (tree / "etc.real" / "shadow").write_bytes(b"the tree's own file\n")
    (tree / "etc.link").symlink_to(target(secret_dir, tree))
    for path in (tree / "etc.real", tree / "etc.real" / "shadow", tree / "etc.link"):
        give(path)
    return tree, secret_dir


def _race(tree) -> tuple:
    node = Node(root=str(tree))
    stop, swaps, seen = threading.Event(), [], []
    thread = threading.Thread(target=_swapper, args=(tree, None, stop, swaps), daemon=True)
    thread.start()
    try:
        for _ in range(READS):
            seen.append(node.read_binary("/etc/shadow"))
    finally:
        stop.set()
        thread.join()
    return seen, len(swaps)


def test_an_absolute_link_swapped_in_and_out_never_puts_the_secret_in_a_report(tmp_path, reachable):
    tree, _ = _plant(tmp_path, reachable, lambda secret_dir, tree: secret_dir)
    seen, swaps = _race(tree)
    assert swaps > 0
    assert SECRET not in seen
    # At rest, each state of the swap reads as it should: the tree's own file, and nothing through the link.
    node = Node(root=str(tree))
    os.rename(tree / "etc.real", tree / "etc")
    assert node.read_binary("/etc/shadow") == b"the tree's own file\n"
    os.rename(tree / "etc", tree / "etc.real")
    os.rename(tree / "etc.link", tree / "etc")
    assert node.read_binary("/etc/shadow") is None


def test_a_relative_link_out_of_the_tree_is_kept_inside_it(tmp_path, reachable):
    tree, _ = _plant(tmp_path, reachable, lambda secret_dir, tree: os.path.relpath(secret_dir, tree))
    seen, swaps = _race(tree)
    assert swaps > 0 and SECRET not in seen


def test_links_inside_the_tree_still_resolve_as_in_a_chroot(tmp_path):
    tree = tmp_path / "tree"
    (tree / "etc" / "sysctl.d").mkdir(parents=True)
    (tree / "etc" / "sysctl.conf").write_text("vm.swappiness = 10\n")
    (tree / "etc" / "sysctl.d" / "99-sysctl.conf").symlink_to("../sysctl.conf")  # Debian's own link
    (tree / "usr" / "lib").mkdir(parents=True)
    (tree / "usr" / "lib" / "os-release").write_text("ID=debian\n")
    (tree / "etc" / "os-release").symlink_to("/usr/lib/os-release")  # absolute: from the tree's top
    node = Node(root=str(tree))
    assert node.read("/etc/sysctl.d/99-sysctl.conf") == "vm.swappiness = 10\n"
    assert node.read("/etc/os-release") == "ID=debian\n"
    assert node.read("/etc/../../../etc/os-release") == "ID=debian\n"  # '..' never climbs above the tree
