"""The one way tunefleet runs a command (as root on shared nodes): tools, Ansible, engines, launchers.

Nothing of the caller's chooses what runs or what it loads:
- bare names are found on the fixed root-owned PATH (verify.safe_io.command_path), and a tool given
  by explicit path must pass the same trust check as a directory (verify.safe_io.check_file_trusted);
- the environment is allow-listed (clean_env): the operator's GPU/NCCL/thread settings pass, never
  LD_PRELOAD, LD_LIBRARY_PATH, PYTHON*, TMPDIR, ANSIBLE_* or the caller's PATH;
- the command starts in `/` (or a directory passing verify.safe_io's trust check), never the
  caller's cwd, where an ansible.cfg or a Python module would be picked up;
- its output is read up to a cap: a tool that streams without end is killed, not buffered until the
  run dies of MemoryError.
Tests inject a fake runner with the same call.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from verify.interrupt import deferred
from verify.safe_io import check_dir_trusted, check_file_trusted, command_path, is_host_root

# What a command keeps of verify's own environment: the GPU, NCCL and thread settings the operator
# set on purpose (NCCL_NVLS_ENABLE=0 on multi-GPU H200s, CUDA_VISIBLE_DEVICES), the locale and time
# zone. Everything else (LD_*, PYTHON*, TMPDIR, ANSIBLE_*, PATH, IFS...) would let the caller pick
# what root runs or loads.
KEPT_PREFIXES = ("CUDA_", "NCCL_", "NVIDIA_", "NVSHMEM_", "TORCH_", "GLOO_", "OMP_", "MKL_", "UCX_", "LC_")
KEPT_NAMES = ("LANG", "TZ", "TERM")
DEFAULT_CWD = "/"
MAX_OUTPUT_BYTES = 64 << 20  # `nvidia-smi -q` of 8 GPUs or a verbose nccl-tests run is a few MB


@dataclass
class CommandOutput:
    argv: list
    returncode: Optional[int]
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    missing: bool = False  # the executable does not exist (or was refused: stderr says why)
    overflowed: bool = False  # printed more than the runner keeps: killed, stderr says so

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.missing and not self.overflowed and self.returncode == 0


Runner = Callable[..., CommandOutput]


class CleanEnv(dict):
    """A command's whole environment, used as given (clean_env builds one; engine_env extends it)."""


def clean_env(extra: Optional[Mapping[str, str]] = None, interpreter_first: bool = False) -> CleanEnv:
    """The allow-listed environment of a command run as root: the kept settings of verify's own
    environment, the fixed PATH, the effective user's own HOME, then `extra` (set by tunefleet itself)."""
    env = CleanEnv({name: value for name, value in os.environ.items()
                    if name.startswith(KEPT_PREFIXES) or name in KEPT_NAMES})
    env.update({"PATH": command_path(interpreter_first), "HOME": pwd.getpwuid(os.geteuid()).pw_dir})
    env.update(extra or {})
    return env


def _refused(argv: list, why: str, start: float) -> CommandOutput:
    return CommandOutput(argv, None, "", why, time.monotonic() - start, missing=True)


def run_command(
    argv: Sequence[str],
    timeout_s: float = 60.0,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
) -> CommandOutput:
    """Run argv; never raises for a missing or refused tool, a non-zero exit, a hang or endless output.

    env: a CleanEnv is the whole environment; any other mapping is added to clean_env(). cwd must pass
    the trust check (default `/`). The child gets its own process group so a hung benchmark and
    everything it started are killed together, and the output it printed so far is kept. An interrupt
    (KeyboardInterrupt, SIGTERM turned into one by verify.interrupt) kills that group too, then propagates.
    """
    start = time.monotonic()
    argv = [str(a) for a in argv]
    full_env = dict(env) if isinstance(env, CleanEnv) else clean_env(env)
    workdir = cwd or DEFAULT_CWD
    try:
        check_dir_trusted(workdir)
        if argv and "/" in argv[0]:
            check_file_trusted(argv[0])
    except FileNotFoundError as exc:
        return _refused(argv, str(exc), start)
    except OSError as exc:
        return _refused(argv, f"refused: {exc.strerror or exc}", start)
    proc = None
    try:
        # Deferred: a signal landing between fork and the assignment would leave a child no one kills.
        with deferred():
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=full_env, cwd=workdir, start_new_session=True)
        max_output = MAX_OUTPUT_BYTES  # read at call time: one cap for every command (tests lower it)
        out, err, timed_out, overflowed = _collect(proc, start + timeout_s, max_output)
        if timed_out or overflowed:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        stderr = _text(err)
        if overflowed:
            stderr += f"\n[tunefleet] {argv[0]} printed more than {max_output} bytes: stopped and killed"
        return CommandOutput(argv, proc.returncode, _text(out), stderr, time.monotonic() - start,
                             timed_out=timed_out, overflowed=overflowed)
    except (FileNotFoundError, PermissionError) as exc:
        if proc is not None:
            raise
        return _refused(argv, str(exc), start)
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


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _collect(proc: subprocess.Popen, deadline: float, max_output: int) -> tuple:
    """(stdout, stderr, timed out, overflowed): both pipes read until they close, the deadline
    passes or together they hold more than max_output bytes."""
    buffers = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    total = 0
    with selectors.DefaultSelector() as selector:
        for pipe in buffers:
            selector.register(pipe, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), True, False
                for key, _ in selector.select(timeout=left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    buffers[key.fileobj] += chunk
                    total += len(chunk)
                    if total > max_output:
                        return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), False, True
        finally:
            for pipe in buffers:
                pipe.close()
    return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), False, False


def which(name: str, root: str = "/") -> Optional[str]:
    """A tool on the fixed root-owned PATH (verify.safe_io.command_path), never the caller's PATH;
    only when root is the live system: a tree under --root has no runnable tools."""
    if not is_host_root(root):
        return None
    return shutil.which(name, path=command_path())
