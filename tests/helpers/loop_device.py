"""A real loop device for tests, handed back to the machine as it was found.

Attaching a file makes the kernel set the device's queue limits from the backing file (seen on the
CI VM, kernel 6.18: read_ahead_kb 128 -> 2560, and detaching keeps 2560), and a test may also tune
the queue. So the tunables are read BEFORE the attach and written back AFTER the detach; the
host-state guard around `make test` (molecule/host_guard.sh) compares exactly these.
"""
from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Dict, Iterator

from verify.kernel_rules import parse_choices

# What node_state.py's host snapshot compares; scheduler first: nr_requests depends on it.
QUEUE_TUNABLES = ("scheduler", "nr_requests", "max_sectors_kb", "read_ahead_kb")


class LoopUnavailable(RuntimeError):
    """No loop device could be attached here (no losetup, no free device, not root)."""


def _active(attr: str, text: str) -> str:
    active = parse_choices(text)[0] if attr == "scheduler" else None
    return text.strip() if active is None else active


def queue_settings(name: str, sys_block: Path = Path("/sys/block")) -> Dict[str, str]:
    values = {}
    for attr in QUEUE_TUNABLES:
        with contextlib.suppress(OSError):
            values[attr] = _active(attr, (sys_block / name / "queue" / attr).read_text())
    return values


def put_back(name: str, settings: Dict[str, str], sys_block: Path = Path("/sys/block")) -> None:
    for attr, value in settings.items():
        path = sys_block / name / "queue" / attr
        with contextlib.suppress(OSError):
            if _active(attr, path.read_text()) != value:
                path.write_text(value)


@contextlib.contextmanager
def attached_loop(backing: Path, tries: int = 5) -> Iterator[str]:
    """Attach `backing` to a free loop device; yield its name (e.g. 'loop0')."""
    for _ in range(tries):
        try:
            found = subprocess.run(["losetup", "--find"], capture_output=True, text=True, check=False)
        except OSError as exc:
            raise LoopUnavailable(f"losetup: {exc}") from exc
        device = found.stdout.strip()
        if found.returncode != 0 or not device:
            raise LoopUnavailable(f"losetup --find: {found.stderr.strip()}")
        name = Path(device).name
        before = queue_settings(name)
        attach = subprocess.run(["losetup", device, str(backing)], capture_output=True, text=True, check=False)
        if attach.returncode == 0:
            break
        # Another process took that device between --find and the attach: pick again.
        put_back(name, before)
    else:
        raise LoopUnavailable(f"cannot attach {backing}: {attach.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["losetup", "--detach", device], check=False)
        put_back(name, before)
