"""The unprivileged user of the planted-attack tests (tests/unit/test_security_*.py).

CI runs as root, as tunefleet does on a node; the attacker is `nobody` (uid 65534), which every
Debian/Ubuntu system has. Things it plants are made by a process running as that user where the
attack needs a live process, and handed to it with (l)chown otherwise: the kernel sees the same
owner either way, and the owner is what tunefleet has to judge.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

UID = GID = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the planted attacks need root (CI runs as root)")


def give(path: Path) -> Path:
    """Hand `path` (a symlink itself, not its target) to the other user."""
    os.lchown(path, UID, GID)
    return path


def shared_dir(path: Path) -> Path:
    """A directory the other user owns and can write (their home, a project directory)."""
    path.mkdir(parents=True, exist_ok=True)
    give(path)
    path.chmod(0o755)
    return path


def run_as_other(script: str, **kwargs) -> subprocess.Popen:
    """Start `/bin/sh -c script` as the other user (a live process it owns), in /."""
    return subprocess.Popen(["/bin/sh", "-c", script], cwd="/", user=UID, group=GID, extra_groups=[], **kwargs)
