"""Files written and read as root on a node other people log into: the one home for those rules.

tunefleet runs as root (sudo, Ansible become) on shared GPU nodes. Any directory another user can
write lets that user swap a name for a symlink between our check and our write, or plant a
file we then read or run. So, everywhere in this package:

- a directory is used only when it and every directory above it can be changed by no one but
  root and us (a sticky world-writable parent such as /tmp is fine for a child we own), by its
  mode bits and by its POSIX ACL (a named user or group other than root granted write counts
  as "others can write", whatever the group bits show);
- a symlink is followed only when it sits in such a directory (someone trusted put it there);
- a file is written as a new temporary name (O_CREAT|O_EXCL|O_NOFOLLOW) in that directory,
  its mode set on the open descriptor, then renamed over the final name;
- a file named by something outside our control is read only when it is a regular file owned
  by root or us, read through a descriptor and size-bounded (no FIFO, no /dev/zero);
- every other file read from a path a user can name (node reports, --root trees, history inputs,
  rules files) goes through one bounded reader (read_capped): no symlink followed at the last
  component unless asked, no FIFO or device, never more than its cap (an error naming the file).

Directories are walked one component at a time through descriptors (openat), so nothing can
be swapped between the check and the use. Standard library only: this runs on bare nodes.
"""
from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import re
import stat
import struct
import sys
from typing import Optional, Sequence, Union

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


# The kernel's binary POSIX ACL (include/uapi/linux/posix_acl_xattr.h): a little-endian u32 version (2),
# then 8-byte entries of u16 tag, u16 permissions, u32 uid/gid. A directory's default ACL is the access ACL
# each file made in it will get (a umask-0 or `setfacl -d` install: every new module writable by its users).
# plugins/module_utils/ledger_core.py holds the same rule for the collection, which ships without this package
# (tests/unit/test_security_round5.py keeps the two equal).
ACL_XATTR = "system.posix_acl_access"
ACL_DEFAULT_XATTR = "system.posix_acl_default"
_ACL_VERSION = 2
_ACL_HEADER = struct.Struct("<I")
_ACL_ENTRY = struct.Struct("<HHI")
ACL_USER, ACL_GROUP, ACL_MASK, ACL_OTHER = 0x02, 0x08, 0x10, 0x20
_ACL_WRITE = 0x02


def acl_writers(raw: bytes, default: bool = False) -> list:
    """("user"|"group"|"everyone", id) of each ACL entry other than root that can write, given the ACL's bytes.

    What a named entry may do is its permissions masked by ACL_MASK (the kernel's rule); in a default ACL the
    "other" entry is a writer too (in an access ACL the mode bits carry it). An ACL this code cannot parse is
    reported as one writer ("acl", -1) rather than trusted.
    """
    if len(raw) < _ACL_HEADER.size or (len(raw) - _ACL_HEADER.size) % _ACL_ENTRY.size:
        return [("acl", -1)]
    if _ACL_HEADER.unpack_from(raw)[0] != _ACL_VERSION:
        return [("acl", -1)]
    entries = [_ACL_ENTRY.unpack_from(raw, offset) for offset in range(_ACL_HEADER.size, len(raw), _ACL_ENTRY.size)]
    mask = next((perm for tag, perm, _ in entries if tag == ACL_MASK), 0x07)
    named = [("user" if tag == ACL_USER else "group", ident) for tag, perm, ident in entries
             if tag in (ACL_USER, ACL_GROUP) and ident != 0 and perm & mask & _ACL_WRITE
             and not (tag == ACL_USER and ident == os.geteuid())]
    return named + [("everyone", -1) for tag, perm, _ in entries if default and tag == ACL_OTHER and perm & _ACL_WRITE]


def _acl_writers_of(fd: int) -> list:
    """The writers of an open file's or directory's access ACL and, for a directory, its default ACL."""
    found = []
    for name, default in ((ACL_XATTR, False), (ACL_DEFAULT_XATTR, True)):
        try:
            raw = os.getxattr(fd, name)
        except OSError as exc:
            if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                continue  # no ACL (or a filesystem without them; a file has no default ACL)
            raise
        found += [(kind if not default else f"default ACL {kind}", ident) for kind, ident in acl_writers(raw, default)]
    return found


def untrusted_because(st: os.stat_result, inside: bool = False, fd: Optional[int] = None) -> Optional[str]:
    """Why a directory (or file) with this stat could be changed by someone else, or None when it cannot.

    inside=True for a directory we only pass through to a child: a sticky world-writable one
    (/tmp) lets others add names but not rename or remove ours, and the child is checked itself.
    fd (the open directory or file) adds its POSIX ACL: a named user or group other than root with
    write (through the mask) is "others can write", even on a root:root 0755 directory.
    """
    mine = (0, os.geteuid())
    if st.st_uid not in mine:
        return f"is owned by uid {st.st_uid}, not root" + ("" if os.geteuid() == 0 else f" or uid {os.geteuid()}")
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return f"is writable by group {st.st_gid} (mode {stat.S_IMODE(st.st_mode):04o})"
    sticky_pass = inside and st.st_mode & stat.S_ISVTX
    if st.st_mode & stat.S_IWOTH and not sticky_pass:
        return f"is writable by everyone (mode {stat.S_IMODE(st.st_mode):04o})"
    if fd is not None and not sticky_pass:
        writers = _acl_writers_of(fd)
        if writers:
            named = ", ".join("an ACL this code cannot read" if kind.endswith("acl") else
                              kind if kind.endswith("everyone") else f"{kind} {ident}" for kind, ident in writers)
            return f"is writable through its POSIX ACL by {named}"
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
        why = untrusted_because(os.fstat(fd), inside=True, fd=fd)
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
            why = untrusted_because(os.fstat(child), inside=bool(parts) or for_child, fd=child)
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


def is_host_root(root: str) -> bool:
    """--root "/" (or "") is this host itself; any other root is a tree read as files, never followed out of."""
    return root in ("/", "")


def random_hex(nbytes: int) -> str:
    """A name part no one can predict (the `secrets` module would load OpenSSL at every hook start)."""
    return os.urandom(nbytes).hex()


def make_unique_dir(parent: str, prefix: str, mode: int = PRIVATE_DIR, parent_mode: int = PRIVATE_DIR) -> str:
    """A new directory `parent/<prefix><random>` that did not exist before (never an existing one).

    Missing parents are made with parent_mode; an existing parent must be trusted.
    """
    # for_child: a sticky world-writable parent (/var/tmp) is fine, the new child is ours alone.
    parent_fd = open_trusted_dir(parent, create=True, mode=parent_mode, for_child=True)
    try:
        for _ in range(100):
            name = f"{prefix}{random_hex(4)}"
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


def write_in_dir(dir_fd: int, name: str, data: Union[str, bytes], mode: int = PRIVATE_FILE,
                 durable: bool = True) -> None:
    """Write `name` in an open trusted directory: a new temporary file, mode set, synced, renamed over.
    durable=False leaves out the sync (readers still see the old file or the new one, never a part): for a
    file that is worth nothing after a crash, which is a reboot (the scheduler hooks' state is per boot, a
    metrics textfile is rewritten by the next run); each sync cost a hook 10-20 ms on a VM's disk."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temp = f".{name}.{random_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, PRIVATE_FILE, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            if durable:
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


_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
DEFAULT_READ_CAP = 16 << 20  # a node report is ~100 KB, a whole `nvidia-smi -q` of 8 GPUs well under 1 MB


class TooLargeError(UnsafePathError):
    """A file holds more than its reader allows; the message names the file and the cap."""


def _open_leaf(path: str, follow_symlinks: bool, dir_fd: Optional[int] = None, name: Optional[str] = None) -> int:
    flags = _READ_FLAGS | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        return os.open(name if name is not None else path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise UnsafePathError(errno.ELOOP, f"{path} is a symlink; refusing to follow it as root") from exc
        raise


def read_capped_fd(fd: int, path: str, max_bytes: int) -> bytes:
    """At most max_bytes of a regular file's descriptor; TooLargeError past that (checked before reading
    when the size is known, so a 3 GiB sparse file costs nothing), UnsafePathError for a FIFO or device."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(errno.EPERM, f"{path} is not a regular file (a FIFO, device or socket); "
                              "refusing to read it as root")
    if st.st_size > max_bytes:
        raise TooLargeError(errno.EFBIG, f"{path} is {st.st_size} bytes, more than the {max_bytes} allowed: refused")
    chunks, total = [], 0
    while total <= max_bytes:  # /proc and /sys files say size 0 or 4096 whatever they hold: read to the cap
        chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > max_bytes:
        raise TooLargeError(errno.EFBIG, f"{path} holds more than the {max_bytes} bytes allowed: refused")
    return b"".join(chunks)


def read_capped(path: str, max_bytes: int = DEFAULT_READ_CAP, follow_symlinks: bool = False,
                within: Optional[str] = None) -> bytes:
    """The one bounded reader for a file at a path a user can name (node reports, --root trees, history
    inputs, rules files): a regular file only (no FIFO that hangs, no /dev/zero that never ends), no
    symlink at the last component unless follow_symlinks, never more than max_bytes.

    within: a tree the path must stay inside once its directories' links are resolved (--root TREE:
    a link `etc -> /etc` planted in the tree must not put the live /etc/shadow in a report).
    Raises TooLargeError (over the cap), UnsafePathError (link, FIFO, device, outside the tree) or
    the OS's error (missing, unreadable); each message names the file.
    """
    if within is not None:
        base = os.path.realpath(within)
        where = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        if where != base and not where.startswith(base.rstrip("/") + "/"):
            raise UnsafePathError(errno.EPERM, f"{path} leads out of {within} (to {where}): refusing to read it")
    fd = _open_leaf(path, follow_symlinks)
    try:
        return read_capped_fd(fd, path, max_bytes)
    finally:
        os.close(fd)


def read_trusted_file(path: str, max_bytes: int = 64 * 1024) -> str:
    """Text of `path` when it is a regular file owned by root (or us), no larger than max_bytes.

    For files named by something we do not control (a process's arguments, an injection directory):
    never a FIFO (the open would hang), a device (/dev/zero never ends), a symlink, a file another user
    owns or can write (mode bits or ACL), in a directory that fails open_trusted_dir.
    """
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = open_trusted_dir(directory)
    try:
        fd = _open_leaf(path, False, dir_fd=dir_fd, name=name)
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            why = untrusted_because(st, fd=fd)
            if why:
                raise UnsafePathError(errno.EPERM, f"{path} {why}; refusing to trust it")
        return read_capped_fd(fd, path, max_bytes).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def check_file_trusted(path: str) -> str:
    """`path` (an executable given by explicit path, a file put on a Python path) when only root and we
    can change it and its directory passes open_trusted_dir; a symlink is followed only when root or we
    own it. Returns the path; UnsafePathError naming the owner or the writer otherwise."""
    current, links = os.path.abspath(path), 0
    while True:
        directory, name = os.path.split(current)
        dir_fd = open_trusted_dir(directory)
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_LINKS or st.st_uid not in (0, os.geteuid()):
                    raise UnsafePathError(errno.EPERM, f"symlink {current} (for {path}) belongs to uid {st.st_uid}: "
                                          "refusing to follow it as root")
                current = os.path.normpath(os.path.join(directory, os.readlink(name, dir_fd=dir_fd)))
                continue
            fd = _open_leaf(current, False, dir_fd=dir_fd, name=name)
        finally:
            os.close(dir_fd)
        try:
            why = untrusted_because(os.fstat(fd), fd=fd)
        finally:
            os.close(fd)
        if why:
            raise UnsafePathError(errno.EPERM, f"{current}{'' if current == path else f' (for {path})'} {why}: "
                                  "refusing to run or import it as root")
        return path


def command_path(interpreter_first: bool = False) -> str:
    """PATH for commands run as root: the fixed system directories, then the interpreter's own
    (a venv's bin, where ansible-playbook and friends live), each only if others cannot change it.
    interpreter_first: the venv's bin first (Ansible's commands come from the same venv as tunefleet)."""
    own = [os.path.dirname(os.path.abspath(sys.executable))]
    candidates = own + list(SYSTEM_PATH) if interpreter_first else list(SYSTEM_PATH) + own
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


def is_plain_component(name: str) -> bool:
    """Whether `name` (an inventory host name, a rail, an interface, any value from a node or an inventory)
    can be used as one path component: never empty, '.', '..', a '/' or a NUL, so <run>/<name> stays
    inside <run>. The one rule for every name that becomes a path."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def check_plain_component(name: str, what: str) -> str:
    """`name` when is_plain_component, else ValueError naming `what` and the value."""
    if not is_plain_component(name):
        raise ValueError(f"{what} {name!r} cannot name a directory: it must be one path component "
                         "(no '/', not '.' or '..', not empty)")
    return name


def check_not_option(value: str, what: str) -> str:
    """`value` (a host, an address, an interface from an inventory, a node or a user) when a tool can never read
    it as an option: not empty, no leading '-', no whitespace or NUL; ValueError naming `what` otherwise."""
    if not value or value.startswith("-") or any(c.isspace() or c == "\0" for c in value):
        raise ValueError(f"{what} {value!r} could be read as an option or split by a tool: refusing to pass it on")
    return value


# What a terminal acts on instead of showing: C0 and C1 controls (ESC starts a sequence that can retitle the
# window, rewrite the screen or, on some terminals, answer back as typed input; CSI 0x9b alone does in 8-bit
# mode), DEL, the line and paragraph separators and the bidirectional overrides that reorder what is shown.
_TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def for_terminal(text: object, keep_newlines: bool = True) -> str:
    """`text` as a terminal shows it literally: every control character (a node's reason, another user's process
    name, a file's name) written as its escape (\\x1b, \\u202e); tabs and, with keep_newlines, newlines kept. The one
    escaping of what tunefleet prints from outside."""
    shown = str(text)
    if not keep_newlines:
        shown = shown.replace("\n", "\\n")
    return _TERMINAL_CONTROLS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), shown)


_ADDRESS_CHARS = re.compile(r"[0-9A-Za-z._:-]{1,253}")
_HOST_NAME = re.compile(r"[0-9A-Za-z_](?:[0-9A-Za-z_-]{0,61}[0-9A-Za-z_])?(?:\.[0-9A-Za-z_](?:[0-9A-Za-z_-]{0,61}"
                        r"[0-9A-Za-z_])?)*\.?")


def check_address(value: object, what: str) -> str:
    """`value` when it is an IPv4 or IPv6 address (no scope) or a host name (RFC 1123 labels; an underscore, as
    inventories use, kept): the only forms a launcher's argv may carry from a node (a node reports its own address;
    a comma in it added variables to every rank through `srun --export`, a space split an mpirun list). ValueError
    naming `what` and the value otherwise."""
    if isinstance(value, str) and _ADDRESS_CHARS.fullmatch(value):
        try:
            ipaddress.ip_address(value)
            return value
        except ValueError:
            if ":" not in value and _HOST_NAME.fullmatch(value):
                return value
    shown = str(value)[:80].encode("unicode_escape").decode("ascii")
    raise ValueError(f"{what} {shown!r} is not an IP address or a host name: refusing to pass it on")


# A tree held to the trust rule whole (an interpreter's site-packages with PyTorch: about 20,000 entries); past
# this many entries it is refused rather than half checked.
MAX_TREE_ENTRIES = 400_000


def _acl_untrusted(target, st: os.stat_result, directory: bool) -> Optional[str]:
    """The ACL part of the rule, read only where it can matter: a named entry can write only through the mask,
    which is the group bits of the mode (so no group write bit, no ACL writer), and a directory's default ACL
    is read always. target: an open descriptor, or the path of a file in a checked directory."""
    writers = []
    for name, default in ((ACL_XATTR, False), (ACL_DEFAULT_XATTR, True)):
        if (not default and not st.st_mode & stat.S_IWGRP) or (default and not directory):
            continue
        try:
            raw = os.getxattr(target, name) if isinstance(target, int) else \
                os.getxattr(target, name, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                continue
            raise
        writers += [(f"default ACL {k}" if default else k, i) for k, i in acl_writers(raw, default)]
    if not writers:
        return None
    kind, ident = writers[0]
    return f"is writable through its POSIX ACL by {kind if kind.endswith(('everyone', 'acl')) else f'{kind} {ident}'}"


def _entry_untrusted(st: os.stat_result, here: str) -> Optional[str]:
    """Why one file or symlink of a trusted directory could be changed by someone else (None: it cannot)."""
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid not in (0, os.geteuid()):
            return f"is a symlink of uid {st.st_uid}"
        try:  # Python imports through it: what it leads to is held to the rule by path (root's links followed)
            (check_dir_trusted if os.path.isdir(here) else check_file_trusted)(here)
        except FileNotFoundError:
            return None  # a dangling link imports nothing
        except UnsafePathError as exc:
            return f"leads to what others can change ({exc.strerror})"
        return None
    return untrusted_because(st) or (_acl_untrusted(here, st, False) if stat.S_ISREG(st.st_mode) else None)


def check_tree_trusted(top: str, max_entries: int = MAX_TREE_ENTRIES, skip: Sequence[str] = ()) -> int:
    """`top` (an import directory, one package in it) and everything beneath it held to the trust rule: `top`
    and its parents by open_trusted_dir, then each directory (mode, owner, access and default ACL), file
    (mode, owner, ACL) and symlink (its owner, and what it leads to) inside, walked by descriptor. An import
    directory root owns can hold a package another user can write (a umask-0 install, a default ACL): Python
    imports it as root all the same. skip: names of `top`'s own entries left to another check (a standard
    library's site-packages, walked only where it is a site directory). Returns the entries checked;
    UnsafePathError naming the first that others could change."""
    checked = 0
    stack = [(open_trusted_dir(top), os.path.abspath(top))]
    try:
        while stack:
            dir_fd, where = stack.pop()
            try:
                with os.scandir(dir_fd) as listing:
                    entries = [(e.name, e.stat(follow_symlinks=False)) for e in listing
                               if not (skip and where == os.path.abspath(top) and e.name in skip)]
                checked += len(entries)
                if checked > max_entries:
                    raise UnsafePathError(errno.E2BIG, f"{top} holds more than {max_entries} entries: too many "
                                          "to check before importing from it as root")
                for name, st in entries:
                    here = f"{where}/{name}"
                    if stat.S_ISDIR(st.st_mode):
                        child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                        seen = os.fstat(child)
                        why = untrusted_because(seen) or _acl_untrusted(child, seen, True)
                        if why or (seen.st_dev, seen.st_ino) != (st.st_dev, st.st_ino):
                            os.close(child)
                            raise UnsafePathError(errno.EPERM, f"directory {here} {why or 'changed while checked'}: "
                                                  f"refusing to import from {top} as root")
                        stack.append((child, here))
                        continue
                    why = _entry_untrusted(st, here)
                    if why:
                        raise UnsafePathError(errno.EPERM, f"{here} {why}: refusing to import from {top} as root")
            finally:
                os.close(dir_fd)
    finally:
        for dir_fd, _ in stack:
            os.close(dir_fd)
    return checked


def _package_paths(entry: str, packages: Sequence[str]) -> list:
    """The files and directories of `entry` that import one of `packages` (a package directory, a module file,
    an extension module such as _yaml/, which yaml imports)."""
    try:
        names = os.listdir(entry)
    except OSError:
        return []
    return [os.path.join(entry, n) for n in sorted(names) if n.split(".", 1)[0].lstrip("_") in packages]


def trusted_import_dirs(entries, packages: Optional[Sequence[str]] = None) -> list:
    """The absolute directories of `entries` (verify_node_pythonpath, a work directory) to put on sys.path of a
    Python running as root, each held to the trust rule with everything beneath it (check_tree_trusted), or,
    given `packages`, with the packages of those names in it (the scheduler hooks import five, per job: walking
    a whole site-packages each time would cost every job): UnsafePathError naming the directory and its owner
    (or writer) for the first one others could change, before anything is imported from any of them."""
    kept: list = []
    for entry in entries:
        if not entry or entry in kept:
            continue
        if not os.path.isabs(entry):
            raise UnsafePathError(errno.EINVAL, f"import directory {entry!r} is not an absolute path: refusing to "
                                  "put it on the path of a Python running as root")
        try:
            if packages is None:
                check_tree_trusted(entry)
            else:
                check_dir_trusted(entry)
                for path in _package_paths(entry, packages):
                    if os.path.isdir(path) and not os.path.islink(path):
                        check_tree_trusted(path)
                    else:
                        check_file_trusted(path)
        except FileNotFoundError:
            continue  # nothing there to import: harmless, as Python itself skips it
        except UnsafePathError as exc:
            raise UnsafePathError(errno.EPERM, f"import directory {entry}: {exc.strerror or exc}") from None
        kept.append(entry)
    return kept


def _walk_beneath(tree_fd: int, relative: str, path: str) -> int:
    """A read descriptor of `relative` resolved beneath the open directory `tree_fd`, as a chroot would resolve it:
    every component opened O_NOFOLLOW by descriptor, links resolved here (an absolute target from the tree's
    top, '..' never above it), so a name swapped for a link between two steps is refused (ELOOP), never
    followed out of the tree. Each open is checked to be the object that was resolved (device and inode)."""
    stack = [os.dup(tree_fd)]
    parts = [p for p in relative.split("/") if p]
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == ".":
                continue
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            seen = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            if stat.S_ISLNK(seen.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, f"too many symlinks in {path}")
                target = os.readlink(name, dir_fd=stack[-1])
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                parts = [p for p in target.split("/") if p] + parts
                continue
            last = not parts
            if not last and not stat.S_ISDIR(seen.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, f"{path}: {name} is not a directory")
            flags = (_READ_FLAGS | os.O_NOFOLLOW) if last else _DIR_FLAGS
            try:
                fd = os.open(name, flags, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePathError(exc.errno, f"{path} changed while it was read (a name became a link): "
                                          "refused") from None
                raise
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
                os.close(fd)
                raise UnsafePathError(errno.ESTALE, f"{path} changed while it was read: refused")
            if last:
                return fd
            stack.append(fd)
        raise IsADirectoryError(errno.EISDIR, f"{path} is a directory")
    finally:
        for fd in stack:
            os.close(fd)


def check_root_tree(root: str) -> None:
    """--root names a directory itself, never a link to one (a link at the tree's own path, planted or swapped by
    another user, would choose the tree root reads): UnsafePathError, or FileNotFoundError / NotADirectoryError,
    naming it. The host's own root ("/") passes."""
    if is_host_root(root):
        return
    st = os.lstat(root)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(errno.ELOOP, f"{root} is a symbolic link (of uid {st.st_uid}): name the tree's "
                              "directory itself; a link at its own path is not followed")
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, f"{root} is not a directory")


def read_beneath(tree: str, absolute: str, max_bytes: int = DEFAULT_READ_CAP) -> bytes:
    """At most max_bytes of `absolute` inside `tree` (a --root tree a user may have built), resolved beneath the
    tree by descriptor (_walk_beneath), never resolved and then reopened by name: a link planted or swapped in
    the tree cannot put a file from outside it in a report. Bounded as read_capped."""
    tree_fd = os.open(tree, _DIR_FLAGS)  # the tree itself, never a link at its own path (check_root_tree)
    try:
        fd = _walk_beneath(tree_fd, absolute, os.path.join(tree, absolute.lstrip("/")))
    finally:
        os.close(tree_fd)
    try:
        return read_capped_fd(fd, os.path.join(tree, absolute.lstrip("/")), max_bytes)
    finally:
        os.close(fd)
