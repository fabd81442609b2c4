"""The thin layer that runs commands on the node. Tests inject a fake with the same call."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from verify.interrupt import deferred
from verify.safe_io import command_path


@dataclass
class CommandOutput:
    argv: list
    returncode: Optional[int]
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    missing: bool = False  # the executable does not exist

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.missing and self.returncode == 0


Runner = Callable[..., CommandOutput]


class CleanEnv(dict):
    """A command's whole environment, replacing verify's instead of adding to it (engine_env)."""


def run_command(
    argv: Sequence[str],
    timeout_s: float = 60.0,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
) -> CommandOutput:
    """Run argv; never raises for a missing tool, a non-zero exit or a hang.

    The child gets its own process group so a hung benchmark and everything it started
    are killed together, and the output it printed so far is kept. An interrupt (KeyboardInterrupt,
    SIGTERM turned into one by verify.interrupt) kills that group too, then propagates.
    """
    start = time.monotonic()
    if isinstance(env, CleanEnv):
        full_env = dict(env)
    else:
        # Bare command names (ethtool, nvidia-smi) are found on the fixed root-owned PATH, never the
        # caller's: tunefleet runs as root (verify.safe_io.command_path).
        full_env = dict(os.environ, PATH=command_path())
        full_env.update(env or {})
    proc = None
    try:
        # Deferred: a signal landing between fork and the assignment would leave a child no one kills.
        with deferred():
            proc = subprocess.Popen(
                list(argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )
        out, err = proc.communicate(timeout=timeout_s)
        return CommandOutput(list(argv), proc.returncode, out, err, time.monotonic() - start)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        elapsed = time.monotonic() - start
        return CommandOutput(list(argv), proc.returncode, out or "", err or "", elapsed, timed_out=True)
    except (FileNotFoundError, PermissionError) as exc:
        if proc is not None:
            raise
        return CommandOutput(list(argv), None, "", str(exc), time.monotonic() - start, missing=True)
    except BaseException:
        # Ctrl-C or SIGTERM (verify.interrupt.Interrupted): the child sits in its own session, so
        # the terminal's SIGINT never reached it; kill its whole group before the interrupt goes on.
        if proc is None:
            raise
        with deferred():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
        raise


def which(name: str, root: str = "/") -> Optional[str]:
    """A tool on the fixed root-owned PATH (verify.safe_io.command_path), never the caller's PATH;
    only when root is the live system: a tree under --root has no runnable tools."""
    if root not in ("/", ""):
        return None
    return shutil.which(name, path=command_path())
