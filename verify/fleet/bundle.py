"""The verify package as one tarball for nodes: `python3 -m verify.fleet.bundle OUT.tar.gz`.

A node gets verify by unpacking this next to its desired state and running `python3 -m verify`
with PYTHONPATH pointing there, so it needs neither pip nor network access. Bytecode caches and
editor droppings stay behind; templates/ travels too (the node's HTML report renders from it
when jinja2 happens to be installed there), and the collection's kernel_rules.py and pci_config.py,
which verify.kernel_rules and verify.pci_config load from next to the package.
"""
from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import sys
import tarfile
from pathlib import Path
from typing import Optional, Sequence

from verify.safe_io import (
    PRIVATE_FILE,
    UnsafePathError,
    open_trusted_dir,
    read_capped_fd,
    untrusted_because,
    write_file_atomic,
)

MAX_BUNDLE_BYTES = 64 << 20  # the package and templates are well under 1 MB compressed

SHIPPED = ("verify", "templates", "plugins/module_utils/kernel_rules.py", "plugins/module_utils/pci_config.py")
SKIPPED_SUFFIXES = (".pyc", ".pyo", ".swp", "~")


def _keep(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
    if any(part == "__pycache__" for part in Path(info.name).parts) or info.name.endswith(SKIPPED_SUFFIXES):
        return None
    # Owner and mode of the controller's checkout mean nothing on the node.
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def build(home: Path, out: Path) -> Path:
    """Nodes run what is in this file as root: it is written only in a directory no one else can
    change (the run directory, verify.fleet.rundir), as a new file renamed into place, 0600."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in SHIPPED:
            archive.add(str(home / name), arcname=name, filter=_keep)
    write_file_atomic(str(out), buffer.getvalue(), PRIVATE_FILE)
    return out


def check(path: str) -> str:
    """The sha256 of the bundle at `path`, re-checked by descriptor right before it is handed to nodes:
    its directory (and every parent) still passes the trust check, mode bits and ACL; the bundle is a
    regular file, not a symlink, ours, 0600 and writable by no one else. UnsafePathError otherwise."""
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = open_trusted_dir(directory)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(errno.ELOOP, f"bundle {path} is a symlink: refusing to ship it") from exc
        raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        why = untrusted_because(st, fd=fd) if stat.S_ISREG(st.st_mode) else "is not a regular file"
        if not why and stat.S_IMODE(st.st_mode) != PRIVATE_FILE:
            why = f"has mode {stat.S_IMODE(st.st_mode):04o}, not {PRIVATE_FILE:04o}"
        if why:
            raise UnsafePathError(errno.EPERM, f"bundle {path} {why}: refusing to ship it to nodes as root")
        digest = hashlib.sha256(read_capped_fd(fd, path, MAX_BUNDLE_BYTES))
    finally:
        os.close(fd)
    return digest.hexdigest()


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--check":
        try:
            print(check(argv[1]))
        except OSError as exc:
            print(f"bundle: {argv[1]}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        return 0
    if len(argv) != 1:
        print("usage: python3 -m verify.fleet.bundle OUT.tar.gz | --check OUT.tar.gz", file=sys.stderr)
        return 2
    from verify.desired import project_root

    home = project_root()
    missing = [name for name in SHIPPED if not (home / name).exists()]
    if missing:
        print(f"bundle: {home} has no {', '.join(missing)} (set TUNEFLEET_HOME to the tunefleet checkout)",
              file=sys.stderr)
        return 2
    try:
        print(build(home, Path(argv[0])))
    except OSError as exc:
        print(f"bundle: {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
