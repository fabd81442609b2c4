"""Files written and read as root on a node other people log into: the one home for those rules.

tunefleet runs as root (sudo, Ansible become) on shared GPU nodes. Any directory another user can
write lets that user swap a name for a symlink between our check and our write, or plant a
file we then read or run. So, everywhere in this package:

- a directory is used only when it and every directory above it can be changed by no one but
  root and us (a sticky world-writable parent such as /tmp is fine for a child we own);
- a symlink is followed only when it sits in such a directory (someone trusted put it there);
- a file is written as a new temporary name (O_CREAT|O_EXCL|O_NOFOLLOW) in that directory,
  its mode set on the open descriptor, then renamed over the final name;
- a file named by something outside our control is read only when it is a regular file owned
  by root or us, read through a descriptor and size-bounded (no FIFO, no /dev/zero).

Directories are walked one component at a time through descriptors (openat), so nothing can
be swapped between the check and the use. Standard library only: this runs on bare nodes.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from typing import Optional, Union

PRIVATE_FILE = 0o600
SHARED_FILE = 0o644
PRIVATE_DIR = 0o700
# Commands run as root are looked up here only (plus the interpreter's own directory): never
# the caller's PATH, which under `sudo -E` or a careless profile can start with "." or ~/bin.
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
_MAX_LINKS = 40  # as the kernel's own limit on symlinks in one lookup (ELOOP)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class UnsafePathError(OSError):
    """A path that someone other than root and us could change; the message names it and why."""


def untrusted_because(st: os.stat_result, inside: bool = False) -> Optional[str]:
    """Why a directory with this stat could be changed by someone else, or None when it cannot.

    inside=True for a directory we only pass through to a child: a sticky world-writable one
    (/tmp) lets others add names but not rename or remove ours, and the child is checked itself.
    """
    mine = (0, os.geteuid())
    if st.st_uid not in mine:
        return f"is owned by uid {st.st_uid}, not root" + ("" if os.geteuid() == 0 else f" or uid {os.geteuid()}")
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return f"is writable by group {st.st_gid} (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_mode & stat.S_IWOTH and not (inside and st.st_mode & stat.S_ISVTX):
        return f"is writable by everyone (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def open_trusted_dir(path: str, create: bool = False, mode: int = PRIVATE_DIR, for_child: bool = False) -> int:
    """A descriptor of directory `path`, walked from / without following an untrusted symlink.

    create=True makes the missing trailing directories with `mode`. Raises UnsafePathError when
    a directory on the way (or the last one) can be changed by others, or a symlink lies in
    such a directory; FileNotFoundError/NotADirectoryError as the OS says otherwise.
    """
    parts = [p for p in os.path.abspath(path).split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    where, links = "/", 0
    try:
        why = untrusted_because(os.fstat(fd), inside=True)
        if why:
            raise UnsafePathError(errno.EPERM, f"{path}: / {why}")
        while parts:
            name = parts.pop(0)
            if name == ".":
                continue
            if name == "..":
                where = os.path.dirname(where.rstrip("/")) or "/"
                os.close(fd)
                fd = os.open(where, _DIR_FLAGS)  # an ancestor already walked and checked
                continue
            here = os.path.join(where, name)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile: the checks below decide
                    os.mkdir(name, mode, dir_fd=fd)
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, f"too many symlinks in {path}")
                # The directory holding it was checked on the way in: only root, we, or (in a sticky
                # directory such as /tmp) the link's owner can have put it there.
                if st.st_uid not in (0, os.geteuid()):
                    raise UnsafePathError(errno.EPERM, f"symlink {here}{_on_the_way(path, here)} belongs to uid "
                                          f"{st.st_uid}: refusing to follow it as root")
                target = os.readlink(name, dir_fd=fd)
                parts = [p for p in target.split("/") if p] + parts
                if target.startswith("/"):
                    os.close(fd)
                    fd, where = os.open("/", _DIR_FLAGS), "/"
                continue
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            why = untrusted_because(os.fstat(child), inside=bool(parts) or for_child)
            os.close(fd)
            fd, where = child, here
            if why:
                raise UnsafePathError(errno.EPERM, f"directory {here}{_on_the_way(path, here)} {why}: refusing to "
                                      "use it as root; choose a directory only root can change")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _on_the_way(path: str, here: str) -> str:
    return "" if os.path.abspath(path) == here else f" (on the way to {path})"


def check_dir_trusted(path: str) -> None:
    """Raise UnsafePathError (or FileNotFoundError) unless `path` is a directory only root and we control."""
    os.close(open_trusted_dir(path))


def safe_mkdir(path: str, mode: int = PRIVATE_DIR) -> None:
    """Make `path` (and missing parents) with `mode`, or accept it if present and trusted."""
    os.close(open_trusted_dir(path, create=True, mode=mode))


def make_unique_dir(parent: str, prefix: str, mode: int = PRIVATE_DIR, parent_mode: int = PRIVATE_DIR) -> str:
    """A new directory `parent/<prefix><random>` that did not exist before (never an existing one).

    Missing parents are made with parent_mode; an existing parent must be trusted.
    """
    # for_child: a sticky world-writable parent (/var/tmp) is fine, the new child is ours alone.
    parent_fd = open_trusted_dir(parent, create=True, mode=parent_mode, for_child=True)
    try:
        for _ in range(100):
            name = f"{prefix}{secrets.token_hex(4)}"
            try:
                os.mkdir(name, PRIVATE_DIR, dir_fd=parent_fd)
            except FileExistsError:
                continue
            child = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            try:
                os.fchmod(child, mode)  # mkdir's mode is masked by the umask
            finally:
                os.close(child)
            return os.path.join(os.path.abspath(parent), name)
        raise FileExistsError(errno.EEXIST, f"no free name {prefix}* in {parent}")
    finally:
        os.close(parent_fd)


def write_in_dir(dir_fd: int, name: str, data: Union[str, bytes], mode: int = PRIVATE_FILE) -> None:
    """Write `name` in an open trusted directory: a new temporary file, mode set, synced, renamed over."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temp = f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, PRIVATE_FILE, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        # rename replaces a symlink planted at `name` itself; it never writes through one.
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


def write_file_atomic(path: str, data: Union[str, bytes], mode: int = PRIVATE_FILE, create_dir: bool = False) -> str:
    """Write `path` safely (see write_in_dir); its directory must be trusted. Returns the path."""
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = open_trusted_dir(directory, create=create_dir)
    try:
        write_in_dir(dir_fd, name, data, mode)
    finally:
        os.close(dir_fd)
    return path


def read_trusted_file(path: str, max_bytes: int = 64 * 1024) -> str:
    """Text of `path` when it is a regular file owned by root (or us), no larger than max_bytes.

    For files named by something we do not control (a process's arguments): never a FIFO (the
    open would hang), a device (/dev/zero never ends), a symlink, or a file another user owns.
    """
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = open_trusted_dir(directory)
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(errno.ELOOP, f"{path} is a symlink; refusing to read it as root") from exc
            raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(errno.EPERM, f"{path} is not a regular file; refusing to read it as root")
        if st.st_uid not in (0, os.geteuid()):
            raise UnsafePathError(errno.EPERM, f"{path} is owned by uid {st.st_uid}, not root; refusing to trust it")
        if st.st_size > max_bytes:
            raise UnsafePathError(errno.EFBIG, f"{path} is {st.st_size} bytes, more than the {max_bytes} allowed")
        data = os.read(fd, max_bytes + 1)
        if len(data) > max_bytes:
            raise UnsafePathError(errno.EFBIG, f"{path} holds more than the {max_bytes} bytes allowed")
        return data.decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def command_path() -> str:
    """PATH for commands run as root: the fixed system directories, then the interpreter's own
    (a venv's bin, where ansible-playbook and friends live), each only if others cannot change it."""
    import sys

    candidates = list(SYSTEM_PATH) + [os.path.dirname(os.path.abspath(sys.executable))]
    kept = []
    for directory in candidates:
        if directory in kept:
            continue
        try:
            check_dir_trusted(directory)
        except OSError:
            continue
        kept.append(directory)
    return os.pathsep.join(kept)
