"""The ledger's logic: record first-seen node state, and put it back.

Everything here takes `root` (the tree that holds /proc, /sys and /etc) so tests run it on
temporary trees; the Ansible modules are thin wrappers. Standard library only: this runs on
the node's own python3.
"""
from __future__ import annotations

import base64
import contextlib
import datetime
import errno
import fcntl
import json
import os
import re
import stat
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import parse_choices, value_words

SCHEMA = "tunefleet.ledger/v1"
SECTIONS = ("paths", "files", "services", "kernel_modules")
_MODULE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
DEFAULT_LEDGER_PATH = "/var/lib/tunefleet/ledger.json"
LIVE_PREFIXES = ("/proc/", "/sys/")
# A config file this big is not something the roles touch; refusing keeps the ledger small.
MAX_FILE_BYTES = 1024 * 1024

# runner(argv) -> (returncode, stdout, stderr); returncode None when the tool is missing.
Runner = Callable[[List[str]], Tuple[Optional[int], str, str]]


class LedgerError(Exception):
    """Bad input or an unusable ledger; the message names the path and the problem."""


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def on_node(root: str, path: str) -> str:
    """Where an absolute node path lives under root."""
    if not path.startswith("/"):
        raise LedgerError(f"{path!r}: must be an absolute path")
    if os.path.normpath(path) != path or "/../" in path + "/":
        raise LedgerError(f"{path!r}: must be a normalised path (no '..', '//' or trailing '/')")
    if root in ("", "/"):
        return path
    return os.path.join(root, path.lstrip("/"))


# ---------------------------------------------------------------- directories root writes in

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def acl_writers(raw: bytes, default: bool = False) -> list:
    """verify.safe_io.acl_writers (the collection ships without the verify package; a test keeps them equal): the
    non-root entries of a POSIX ACL's bytes that can write through the mask; the "other" entry of a default ACL."""
    if len(raw) < 4 or (len(raw) - 4) % 8 or int.from_bytes(raw[:4], "little") != 2:
        return [("acl", -1)]
    entries = [(int.from_bytes(raw[i:i + 2], "little"), int.from_bytes(raw[i + 2:i + 4], "little"),
                int.from_bytes(raw[i + 4:i + 8], "little")) for i in range(4, len(raw), 8)]
    mask = next((perm for tag, perm, _ in entries if tag == 0x10), 0x07)
    named = [("user" if tag == 0x02 else "group", ident) for tag, perm, ident in entries
             if tag in (0x02, 0x08) and ident != 0 and perm & mask & 0x02
             and not (tag == 0x02 and ident == os.geteuid())]
    return named + [("everyone", -1) for tag, perm, _ in entries if default and tag == 0x20 and perm & 0x02]


def _acl_writer(fd: int) -> Optional[str]:
    for name, default in (("system.posix_acl_access", False), ("system.posix_acl_default", True)):
        try:
            raw = os.getxattr(fd, name)
        except OSError as exc:
            if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                continue
            return f"has an ACL that cannot be read ({exc.strerror})"
        writers = acl_writers(raw, default)
        if writers:
            kind, ident = writers[0]
            return f"is writable through its {'default ' if default else ''}POSIX ACL by {kind} {ident}"
    return None


def _untrusted(info: os.stat_result, passing: bool, fd: Optional[int] = None) -> Optional[str]:
    # The collection ships without the verify package: this is verify.safe_io.untrusted_because's rule.
    if info.st_uid not in (0, os.geteuid()):
        return f"is owned by uid {info.st_uid}, not root"
    if info.st_mode & stat.S_IWGRP and info.st_gid != 0:
        return f"is writable by group {info.st_gid} (mode {stat.S_IMODE(info.st_mode):04o})"
    sticky_pass = passing and info.st_mode & stat.S_ISVTX
    if info.st_mode & stat.S_IWOTH and not sticky_pass:
        return f"is writable by everyone (mode {stat.S_IMODE(info.st_mode):04o})"
    return _acl_writer(fd) if fd is not None and not sticky_pass else None


def open_root_dir(directory: str, create: bool = False, mode: int = 0o700) -> int:
    """A descriptor of `directory`, walked from / one component at a time (O_NOFOLLOW): a symlink is followed
    only when root owns it in a directory only root can change (never a user's link to a root directory), and
    every directory must be root's and writable by no one else (a sticky /tmp may be passed through). create:
    missing directories are made with `mode`. LedgerError names the directory and its owner otherwise."""
    parts = [p for p in directory.split("/") if p]
    fd, where, links = os.open("/", _DIR_FLAGS), "/", 0
    try:
        while parts:
            name = parts.pop(0)
            if name in (".", ".."):
                raise LedgerError(f"{directory}: '.' and '..' are not followed")
            here = os.path.join(where, name)
            made = False
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=fd)
                    made = True
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                links += 1
                if info.st_uid != 0 or links > 40:
                    raise LedgerError(f"{here} is a symlink of uid {info.st_uid} (on the way to {directory}): "
                                      "refusing to follow it as root; nothing was changed")
                target = os.readlink(name, dir_fd=fd)
                parts = [p for p in target.split("/") if p] + parts
                if target.startswith("/"):
                    os.close(fd)
                    fd, where = os.open("/", _DIR_FLAGS), "/"
                continue
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            if made:
                os.fchmod(child, mode)  # whatever the umask
            why = _untrusted(os.fstat(child), passing=bool(parts), fd=child)
            os.close(fd)
            fd, where = child, here
            if why:
                raise LedgerError(f"directory {here} (on the way to {directory}) {why}: refusing to write there as "
                                  "root; nothing was changed")
        return fd
    except BaseException:
        os.close(fd)
        raise


def make_dirs(directory: str, mode: int = 0o755) -> None:
    """`directory` and its missing parents (made with `mode`), by open_root_dir's walk."""
    os.close(open_root_dir(directory, create=True, mode=mode))


def remove_in_root_dir(where: str, directory: bool = False) -> None:
    """Remove the file (or empty directory) `where` by its parent's descriptor (open_root_dir): a link on the
    way is never followed, a link at `where` itself is removed, never its target. Absent: nothing to do."""
    try:
        dir_fd = open_root_dir(os.path.dirname(where))
    except FileNotFoundError:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            if directory:
                os.rmdir(os.path.basename(where), dir_fd=dir_fd)
            else:
                os.unlink(os.path.basename(where), dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def private_dir_fd(directory: str) -> int:
    """The ledger's or the marker's directory (made if missing), opened by open_root_dir and set to 0700 on its
    descriptor (never chmod by name, which follows a link)."""
    fd = open_root_dir(directory, create=True)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_owned_file(fd: int, shown: str) -> None:
    """A ledger or marker read for a restore must be root's and writable by no one else, or LedgerError names
    its owner (a user's ledger would make restore write the user's content as root)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise LedgerError(f"{shown} is not a regular file; nothing was changed")
    why = _untrusted(info, passing=False, fd=fd)
    if why:
        raise LedgerError(f"{shown} {why}: refusing to trust it; nothing was changed (move it aside)")


# ---------------------------------------------------------------- live kernel values

def selected_choice(text: str) -> str:
    """The active value of a sysfs file that lists choices (`[mq-deadline] none`); other text unchanged."""
    active, _ = parse_choices(text)
    return text if active is None else active


def read_live_value(root: str, path: str) -> Optional[str]:
    """A /proc or /sys value as it would be written back; None when the file does not exist."""
    where = on_node(root, path)
    if not path.startswith(LIVE_PREFIXES):
        raise LedgerError(f"{path!r}: live paths must be under /proc/ or /sys/ (config files go in 'files')")
    try:
        with open(where, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise LedgerError(f"{path!r}: is a directory, not a kernel value") from exc
    except OSError as exc:
        raise LedgerError(f"{path!r}: cannot be read ({exc.strerror})") from exc
    return selected_choice(text.strip())


def same_value(recorded: str, current: Optional[str]) -> bool:
    """tcp_rmem reads back tab-separated whatever was written; compare the tokens."""
    return current is not None and value_words(recorded) == value_words(current)


def write_live_value(root: str, path: str, value: str) -> None:
    with open(on_node(root, path), "w", encoding="utf-8") as handle:
        handle.write(value)


# ---------------------------------------------------------------- config files

def missing_ancestors(root: str, path: str) -> List[str]:
    """Directories above path that do not exist yet, outermost first (restore removes them)."""
    missing = []
    parent = os.path.dirname(path)
    while parent not in ("/", "") and not os.path.lexists(on_node(root, parent)):
        missing.append(parent)
        parent = os.path.dirname(parent)
    return list(reversed(missing))


def snapshot_file(root: str, path: str) -> dict:
    """Content, mode and owner of a config file, or what is needed to remove it again."""
    where = on_node(root, path)
    if path.startswith(LIVE_PREFIXES):
        raise LedgerError(f"{path!r}: /proc and /sys values go in 'paths', not 'files'")
    try:
        info = os.lstat(where)
    except FileNotFoundError:
        return {"state": "absent", "created_dirs": missing_ancestors(root, path)}
    except OSError as exc:
        raise LedgerError(f"{path!r}: cannot be examined ({exc.strerror})") from exc
    owner = {"uid": info.st_uid, "gid": info.st_gid}
    if stat.S_ISLNK(info.st_mode):
        return dict(state="link", target=os.readlink(where), **owner)
    if not stat.S_ISREG(info.st_mode):
        raise LedgerError(f"{path!r}: is not a regular file or symlink; the ledger records files only")
    if info.st_size > MAX_FILE_BYTES:
        raise LedgerError(f"{path!r}: is {info.st_size} bytes, over the ledger's {MAX_FILE_BYTES} byte limit")
    try:
        with open(where, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise LedgerError(f"{path!r}: cannot be read ({exc.strerror})") from exc
    try:
        content, encoding = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        content, encoding = base64.b64encode(raw).decode("ascii"), "base64"
    return dict(state="file", content=content, encoding=encoding, mode=f"{stat.S_IMODE(info.st_mode):04o}", **owner)


def file_bytes(entry: dict) -> bytes:
    """The bytes a recorded file held (snapshot_file's 'content', text or base64); LedgerError when the entry
    is not one snapshot_file could have written (a hand-edited or damaged ledger), before anything is written."""
    if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
        raise LedgerError("a recorded file has no text 'content': the ledger is damaged")
    content, encoding = entry["content"], entry.get("encoding", "utf-8")
    if len(content) > 2 * MAX_FILE_BYTES:  # base64 of MAX_FILE_BYTES is 4/3 of it
        raise LedgerError(f"a recorded file's content is {len(content)} characters, over the ledger's limit")
    try:
        if encoding == "base64":
            return base64.b64decode(content.encode("ascii"), validate=True)
        if encoding == "utf-8":
            return content.encode("utf-8")
    except (ValueError, UnicodeError) as exc:  # binascii.Error is a ValueError; a lone surrogate a UnicodeError
        raise LedgerError(f"a recorded file's {encoding} content cannot be decoded ({exc})") from None
    raise LedgerError(f"a recorded file's encoding {str(encoding)[:40]!r} is neither 'utf-8' nor 'base64'")


def same_file(recorded: dict, current: dict) -> bool:
    keys = {"absent": ("state",), "link": ("state", "target"), "file": ("state", "content", "mode", "uid", "gid")}
    return all(recorded.get(k) == current.get(k) for k in keys[recorded["state"]])


def write_file_atomically(
    where: str, data: bytes, mode: int, uid: Optional[int] = None, gid: Optional[int] = None
) -> None:
    """Readers see the old file or the new one, never half of it, even across a crash. The directory is
    opened by open_root_dir (no user's link followed, no directory others can write) and everything
    happens by its descriptor."""
    dir_fd = open_root_dir(os.path.dirname(where))
    try:
        write_in_dir_fd(dir_fd, os.path.basename(where), data, mode, uid, gid)
    finally:
        os.close(dir_fd)


def write_in_dir_fd(dir_fd: int, name: str, data: bytes, mode: int, uid: Optional[int] = None,
                    gid: Optional[int] = None) -> None:
    tmp = f".tunefleet-{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600,
                 dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            # mode and owner go on the descriptor, never by name.
            os.fchmod(handle.fileno(), mode)
            if uid is not None and gid is not None and (uid, gid) != (os.getuid(), os.getgid()):
                os.fchown(handle.fileno(), uid, gid)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


# ---------------------------------------------------------------- services

def service_state(runner: Runner, name: str) -> dict:
    """systemctl's own words for a unit, e.g. enabled/disabled/masked/not-found, active/inactive."""
    enabled_rc, enabled_out, _ = runner(["systemctl", "is-enabled", name])
    if enabled_rc is None:
        return {"enabled": None, "active": None}
    _, active_out, _ = runner(["systemctl", "is-active", name])
    enabled = enabled_out.strip().splitlines()[0] if enabled_out.strip() else "not-found"
    active = active_out.strip().splitlines()[0] if active_out.strip() else "unknown"
    return {"enabled": enabled, "active": active}


# ---------------------------------------------------------------- kernel modules

def module_loaded(root: str, name: str) -> bool:
    """Loaded (or built in) modules have /sys/module/<name>, with '-' spelled '_'."""
    if not _MODULE_NAME.match(name):
        raise LedgerError(f"{name!r}: is not a kernel module name")
    return os.path.isdir(on_node(root, f"/sys/module/{name.replace('-', '_')}"))


# ---------------------------------------------------------------- the ledger file

def empty_ledger() -> dict:
    return dict({section: {} for section in SECTIONS}, schema=SCHEMA, created=utc_now())


# A ledger holds at most a few hundred entries of files up to MAX_FILE_BYTES; nested 5 levels.
MAX_LEDGER_BYTES = 256 * 1024 * 1024
MAX_LEDGER_DEPTH = 16
_FILE_FIELDS = {"file": ("content", "encoding", "mode", "uid", "gid"), "link": ("target",), "absent": ()}


def _depth(data: object) -> int:
    """Nesting depth without recursion (a corrupted ledger must not raise RecursionError)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_LEDGER_DEPTH:
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def ledger_problem(data: object) -> Optional[str]:
    """What makes a parsed ledger unusable, or None. Restore needs every recorded value exactly."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return f"schema is not {SCHEMA!r}"
    if _depth(data) > MAX_LEDGER_DEPTH:
        return f"nested deeper than {MAX_LEDGER_DEPTH} levels"
    for section in SECTIONS:
        entries = data.get(section, {})
        if not isinstance(entries, dict):
            return f"{section!r} is not a mapping"
        for key, entry in entries.items():
            where = f"{section}[{key!r}]"
            if not isinstance(entry, dict):
                return f"{where} is not a mapping"
            if section == "paths" and (not isinstance(entry.get("exists", True), bool)
                                       or (entry.get("exists", True) and not isinstance(entry.get("value"), str))):
                return f"{where} has no recorded value to write back"
            if section == "files":
                state = entry.get("state")
                if state not in _FILE_FIELDS:
                    return f"{where} has state {state!r}, not file, link or absent"
                missing = [f for f in _FILE_FIELDS[state] if f not in entry]
                if missing:
                    return f"{where} lacks {', '.join(missing)}"
                if state == "file" and (not isinstance(entry["mode"], str) or not re.fullmatch(r"[0-7]{3,4}",
                                                                                             entry["mode"])):
                    return f"{where} has mode {entry['mode']!r}, not an octal mode"
                if state == "absent" and not isinstance(entry.get("created_dirs", []), list):
                    return f"{where} created_dirs is not a list"
            if section == "kernel_modules" and not isinstance(entry.get("loaded"), bool):
                return f"{where} does not say whether the module was loaded"
    return None


def load_ledger(root: str, ledger_path: str) -> dict:
    """The ledger, or LedgerError naming it: a truncated or corrupted ledger is refused, never
    overwritten (its first-seen values are the only way back) and never restored from."""
    where = on_node(root, ledger_path)
    keep = "it was left as it is; move it aside only after checking what it holds"
    try:
        dir_fd = open_root_dir(os.path.dirname(where))
        try:
            fd = os.open(os.path.basename(where), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as handle:
            check_owned_file(handle.fileno(), f"ledger {ledger_path}")
            raw = handle.read(MAX_LEDGER_BYTES + 1)
    except FileNotFoundError:
        return empty_ledger()
    except OSError as exc:
        raise LedgerError(f"ledger {ledger_path} is unreadable ({exc.strerror}); {keep}") from exc
    if len(raw) > MAX_LEDGER_BYTES:
        raise LedgerError(f"ledger {ledger_path} is larger than {MAX_LEDGER_BYTES} bytes; {keep}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise LedgerError(f"ledger {ledger_path} is corrupted: not UTF-8 at line {line}; "
                          f"nothing was changed (restore cannot trust it); {keep}") from None
    except json.JSONDecodeError as exc:
        raise LedgerError(f"ledger {ledger_path} is corrupted or truncated (not JSON: {exc.msg} at line {exc.lineno}); "
                          f"nothing was changed (restore cannot trust it); {keep}") from None
    except RecursionError:
        raise LedgerError(f"ledger {ledger_path} is corrupted: nested deeper than {MAX_LEDGER_DEPTH} levels; "
                          f"nothing was changed (restore cannot trust it); {keep}") from None
    except ValueError as exc:
        raise LedgerError(f"ledger {ledger_path} is corrupted: {str(exc)[:100]}; "
                          f"nothing was changed (restore cannot trust it); {keep}") from None
    problem = ledger_problem(data)
    if problem:
        raise LedgerError(f"ledger {ledger_path} is corrupted: {problem}; "
                          f"nothing was changed (restore cannot know what to put back); {keep}")
    for section in SECTIONS:
        data.setdefault(section, {})
    return data


def save_ledger(root: str, ledger_path: str, ledger: dict) -> None:
    dir_fd = private_dir_fd(on_node(root, os.path.dirname(ledger_path)))
    try:
        text = json.dumps(ledger, indent=2, sort_keys=True) + "\n"
        write_in_dir_fd(dir_fd, os.path.basename(ledger_path), text.encode("utf-8"), 0o600)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def ledger_lock(root: str, ledger_path: str) -> Iterator[None]:
    """Two plays on one node must not interleave read-modify-write of the ledger."""
    dir_fd = private_dir_fd(on_node(root, os.path.dirname(ledger_path)))
    try:
        fd = os.open(os.path.basename(ledger_path) + ".lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600,
                     dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# ---------------------------------------------------------------- recording

def observe(root: str, paths: List[str], files: List[str], runner: Optional[Runner], services: List[str],
            kernel_modules: Optional[List[str]] = None) -> dict:
    """Read everything first, so bad input fails before the ledger is touched."""
    return {
        "paths": {p: read_live_value(root, p) for p in paths},
        "files": {f: snapshot_file(root, f) for f in files},
        "services": {s: service_state(runner, s) for s in services} if services else {},
        "kernel_modules": {m: {"loaded": module_loaded(root, m)} for m in kernel_modules or []},
    }


def record_first_seen(ledger: dict, observed: dict, recorded_by: str = "", when: str = "") -> Dict[str, list]:
    """Add what the ledger has not seen yet; an entry already there is never replaced."""
    when = when or utc_now()
    added: Dict[str, list] = {section: [] for section in SECTIONS}
    for section in SECTIONS:
        for key, value in observed.get(section, {}).items():
            if key in ledger[section]:
                continue
            entry = {"value": value, "exists": value is not None} if section == "paths" else dict(value)
            entry["recorded_at"] = when
            if recorded_by:
                entry["recorded_by"] = recorded_by
            ledger[section][key] = entry
            added[section].append(key)
    return added


def record(root: str, ledger_path: str, paths: List[str], files: List[str], services: List[str],
           runner: Optional[Runner], recorded_by: str = "", check_mode: bool = False,
           kernel_modules: Optional[List[str]] = None) -> Dict[str, list]:
    """Record first-seen state into the ledger file; returns what was new."""
    observed = observe(root, paths, files, runner, services, kernel_modules)
    if check_mode:
        ledger = load_ledger(root, ledger_path)
        return record_first_seen(ledger, observed, recorded_by)
    with ledger_lock(root, ledger_path):
        ledger = load_ledger(root, ledger_path)
        added = record_first_seen(ledger, observed, recorded_by)
        if any(added.values()):
            save_ledger(root, ledger_path, ledger)
    return added
