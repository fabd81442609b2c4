"""What the scheduler modes keep between runs: the kernel-log cursor, the driver events that must hold a
node out until it reboots, and the error counters of the last run (so counters are judged per interval).

One JSON file in a root-owned 0700 directory (default /var/lib/tunefleet/scheduler), written atomically
through verify.safe_io (new name, fsync, rename; no symlink followed). A state that cannot be read or
trusted is never fatal: it is set aside (renamed `state.json.damaged`, the last one kept for a person to
read), the run goes on as a first run, judged from boot, and says so in a WARN row (`scheduler.state`)
naming both files. Every number in it is bounded before it is used: a file tunefleet wrote, damaged,
must never end a hook (an integer too large for a float once ended every mode with OverflowError).
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
from dataclasses import asdict, dataclass, field
from typing import Optional

from verify.bounded_load import loads_json_bounded
from verify.safe_io import PRIVATE_DIR, PRIVATE_FILE, UnsafePathError, open_trusted_dir, write_in_dir

DEFAULT_DIR = "/var/lib/tunefleet/scheduler"
FILE_NAME = "state.json"
SCHEMA = "tunefleet.scheduler_state/v1"
MAX_BYTES = 1 << 20
MAX_OPEN_EVENTS = 100
DAMAGED_NAME = FILE_NAME + ".damaged"
# Stamps are Unix times or seconds since boot, counters the driver's 64-bit counts: anything larger is damage.
MAX_SECONDS = 1e12
MAX_COUNT = 1 << 64
MAX_TEXT = 4096  # an open event is one driver line; boot_id one UUID


@dataclass
class State:
    boot_id: str = ""
    # dmesg's boot-relative stamp of the last kernel record read (None: read from boot)
    kernel_uptime_s: Optional[float] = None
    # driver lines of FAIL-class events seen this boot: a reboot-class Xid must not be forgotten by the
    # next quiet interval (cleared when the boot changes)
    open_events: list = field(default_factory=list)
    # verify.checks' node.memo["previous_counters"] of the last run, and when it was read (Unix time)
    counters: dict = field(default_factory=dict)
    counters_at: Optional[float] = None
    last_run: dict = field(default_factory=dict)  # mode -> Unix time
    # the operator's policy's counts (verify.scheduler.policy.Applied.runs), per mode: {mode: {check id:
    # [consecutive failing runs, Unix time of the last failing run, its rule's recovery window in seconds]}}
    policy_runs: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dict(asdict(self), schema=SCHEMA), indent=1, sort_keys=True)


def parse(text: str) -> State:
    """The saved text -> State; ValueError naming what is wrong (the caller turns it into a WARN)."""
    data = loads_json_bounded(text, "scheduler state", max_depth=8)  # deep nesting: a ValueError, never a crash
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document")
    state = State()
    kinds = {"boot_id": str, "kernel_uptime_s": (int, float, type(None)), "open_events": list,
             "counters": dict, "counters_at": (int, float, type(None)), "last_run": dict, "policy_runs": dict}
    for name, kind in kinds.items():
        if name in data:
            if not isinstance(data[name], kind) or isinstance(data[name], bool):
                raise ValueError(f"{name} is {type(data[name]).__name__}")
            setattr(state, name, data[name])
    if not all(isinstance(line, str) and len(line) <= MAX_TEXT for line in state.open_events):
        raise ValueError("open_events holds something other than lines of text")
    if len(state.boot_id) > MAX_TEXT:
        raise ValueError(f"boot_id is {len(state.boot_id)} characters long")
    state.kernel_uptime_s = _seconds("kernel_uptime_s", state.kernel_uptime_s)
    state.counters_at = _seconds("counters_at", state.counters_at)
    for mode, when in state.last_run.items():
        state.last_run[mode] = _seconds(f"last_run.{mode}", when)
    for check_id, counters in state.counters.items():
        _counters(f"counters.{check_id}", counters, COUNTER_LEVELS)
    for mode, runs in state.policy_runs.items():
        if not isinstance(runs, dict):
            raise ValueError(f"policy_runs.{mode} is {type(runs).__name__}")
        for check_id, entry in runs.items():
            _policy_count(f"policy_runs.{mode}.{check_id}", entry)
    return state


# A check's counters as its result's details hold them: IB {counter: count}, NVLink {link: {counter: count}}.
COUNTER_LEVELS = 2
MAX_RUNS = 1 << 31


def _counters(name: str, counters: object, levels: int) -> None:
    if not isinstance(counters, dict):
        raise ValueError(f"{name} is {type(counters).__name__}")
    for key, value in counters.items():
        if isinstance(value, dict) and levels > 1:
            _counters(f"{name}.{key}", value, levels - 1)
        else:
            _count(f"{name}.{key}", value)


def _policy_count(name: str, entry: object) -> None:
    """[runs, last failing run (Unix time), recovery window (s)], each bounded."""
    if not (isinstance(entry, list) and len(entry) == 3):
        raise ValueError(f"{name} is not [runs, last failing run, recovery window]: {str(entry)[:40]}")
    runs, failed_at, window = entry
    if isinstance(runs, bool) or not isinstance(runs, int) or not 0 < runs < MAX_RUNS:
        raise ValueError(f"{name} runs is not a count: {str(runs)[:40]}")
    entry[1] = _seconds(f"{name} last failing run", failed_at)
    entry[2] = _seconds(f"{name} recovery window", window)
    if entry[1] is None or entry[2] is None:
        raise ValueError(f"{name} has no time")


def _seconds(name: str, value: object) -> Optional[float]:
    """A saved stamp as a float in [0, MAX_SECONDS], None kept; ValueError naming it otherwise."""
    if value is None:
        return None
    # bounded before float(): float() of a 400-digit integer raises OverflowError
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, int) and abs(value) > MAX_SECONDS):
        raise ValueError(f"{name} is not a time in seconds: {str(value)[:40]}")
    value = float(value)
    if not (math.isfinite(value) and 0 <= value <= MAX_SECONDS):
        raise ValueError(f"{name} is not a time in seconds: {value!r}")
    return value


def _count(name: str, value: object) -> None:
    """A saved counter: a whole count in [0, 2**64) (the checks compare it with the live one), or null."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_COUNT:
        raise ValueError(f"{name} is not a counter: {str(value)[:40]}")


def open_state_dir(directory: str) -> int:
    """The state directory, made or kept root-only 0700 and walked without following a link (safe_io)."""
    dir_fd = open_trusted_dir(directory, create=True, mode=PRIVATE_DIR)
    with contextlib.suppress(OSError):
        os.fchmod(dir_fd, PRIVATE_DIR)  # ours (root): keep it 0700 whoever made it wider
    return dir_fd


def load(directory: str) -> tuple:
    """(State, warning or ""): a missing file is a first run; anything unreadable is set aside (renamed
    DAMAGED_NAME) and the run is a first run, the warning naming both files."""
    try:
        dir_fd = open_state_dir(directory)
    except OSError as exc:
        return State(), f"state directory {directory} cannot be used: {exc.strerror or exc}; judged from boot"
    try:
        why = _damage(dir_fd)
        if not why:
            return _state_in(dir_fd), ""
    except FileNotFoundError:
        return State(), ""
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        why = f"is unreadable ({exc.strerror})" if isinstance(exc, OSError) and exc.strerror else \
            f"is corrupt ({str(exc)[:120]})"
        return State(), _set_aside(dir_fd, directory, why)
    else:
        return State(), _set_aside(dir_fd, directory, why)
    finally:
        os.close(dir_fd)


def _damage(dir_fd: int) -> str:
    """Why the state file cannot be read as ours ('' when it can): a symlink or not a regular file."""
    info = os.stat(FILE_NAME, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    return ""


def _state_in(dir_fd: int) -> State:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(FILE_NAME, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # made a symlink since _damage looked
            raise ValueError("it is a symlink") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("it is not a regular file")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes")
    return parse(data.decode("utf-8"))


def _set_aside(dir_fd: int, directory: str, why: str) -> str:
    """Rename the damaged file (never following it) so the next save starts clean and a person can read it."""
    path = f"{directory}/{FILE_NAME}"
    try:
        os.rename(FILE_NAME, DAMAGED_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        return f"state file {path} {why}; not set aside ({exc.strerror or exc}); ignored, judged from boot"
    return f"state file {path} {why}; set aside as {directory}/{DAMAGED_NAME}; judged from boot as a first run"


def save(directory: str, state: State) -> str:
    """Write the state atomically; '' or why it could not be written (never raises)."""
    state.open_events = state.open_events[-MAX_OPEN_EVENTS:]
    try:
        dir_fd = open_state_dir(directory)
        try:
            write_in_dir(dir_fd, FILE_NAME, state.to_json(), PRIVATE_FILE, durable=False)  # of this boot only
        finally:
            os.close(dir_fd)
    except (OSError, UnsafePathError) as exc:
        return f"state not saved in {directory}: {exc.strerror or exc}"
    return ""
