"""What the scheduler modes keep between runs: the kernel-log cursor, the driver events that must hold a
node out until it reboots, and the error counters of the last run (so counters are judged per interval).

One JSON file in a root-owned 0700 directory (default /var/lib/tunefleet/scheduler), written atomically
through verify.safe_io (new name, fsync, rename; no symlink followed). A state that cannot be read or
trusted is never fatal: the run goes on from boot and says so in a WARN row (`scheduler.state`).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Optional

from verify.bounded_load import loads_json_bounded
from verify.safe_io import PRIVATE_DIR, PRIVATE_FILE, UnsafePathError, open_trusted_dir, write_in_dir

DEFAULT_DIR = "/var/lib/tunefleet/scheduler"
FILE_NAME = "state.json"
SCHEMA = "tunefleet.scheduler_state/v1"
MAX_BYTES = 1 << 20
MAX_OPEN_EVENTS = 100


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

    def to_json(self) -> str:
        return json.dumps(dict(asdict(self), schema=SCHEMA), indent=1, sort_keys=True)


def parse(text: str) -> State:
    """The saved text -> State; ValueError naming what is wrong (the caller turns it into a WARN)."""
    data = loads_json_bounded(text, "scheduler state", max_depth=8)  # deep nesting: a ValueError, never a crash
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document")
    state = State()
    kinds = {"boot_id": str, "kernel_uptime_s": (int, float, type(None)), "open_events": list,
             "counters": dict, "counters_at": (int, float, type(None)), "last_run": dict}
    for name, kind in kinds.items():
        if name in data:
            if not isinstance(data[name], kind) or isinstance(data[name], bool):
                raise ValueError(f"{name} is {type(data[name]).__name__}")
            setattr(state, name, data[name])
    if not all(isinstance(line, str) for line in state.open_events):
        raise ValueError("open_events holds something other than lines of text")
    return state


def open_state_dir(directory: str) -> int:
    """The state directory, made or kept root-only 0700 and walked without following a link (safe_io)."""
    dir_fd = open_trusted_dir(directory, create=True, mode=PRIVATE_DIR)
    with contextlib.suppress(OSError):
        os.fchmod(dir_fd, PRIVATE_DIR)  # ours (root): keep it 0700 whoever made it wider
    return dir_fd


def load(directory: str) -> tuple:
    """(State, warning or ""): a missing file is a first run; anything unreadable is a fresh State + why."""
    try:
        dir_fd = open_state_dir(directory)
    except OSError as exc:
        return State(), f"state directory {directory} cannot be used: {exc.strerror or exc}; judged from boot"
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(FILE_NAME, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return State(), ""
    except OSError as exc:
        why = "is a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        return State(), f"state file {directory}/{FILE_NAME} {why}; ignored, judged from boot"
    finally:
        os.close(dir_fd)
    try:
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        if len(data) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES} bytes")
        return parse(data.decode("utf-8")), ""
    except (ValueError, UnicodeDecodeError) as exc:
        return State(), f"state file {directory}/{FILE_NAME} is corrupt ({str(exc)[:120]}); ignored, judged from boot"


def save(directory: str, state: State) -> str:
    """Write the state atomically; '' or why it could not be written (never raises)."""
    state.open_events = state.open_events[-MAX_OPEN_EVENTS:]
    try:
        dir_fd = open_state_dir(directory)
        try:
            write_in_dir(dir_fd, FILE_NAME, state.to_json(), PRIVATE_FILE)
        finally:
            os.close(dir_fd)
    except (OSError, UnsafePathError) as exc:
        return f"state not saved in {directory}: {exc.strerror or exc}"
    return ""
