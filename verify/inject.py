"""Fault injection for drills and end-to-end tests: the real checks on the real node, with the output of
some commands replaced by captured (or planted) outputs from a directory.

The idea is gpud's failure injector: to prove that a lost GPU, a pending row remap or a dead NVLink goes
through the whole `tunefleet verify` (CLI, Node, checks, verdict table, reports, exit code, drain
reason) on a healthy machine, nothing but the answer of the one command that would show the fault is
replaced. Everything else stays live.

The directory holds the captures in the layout tests/device/capture_health.sh writes:
`<name>.argv` (the command, shell words), `<name>.stdout`, and optionally `<name>.stderr` and
`<name>.rc` (the exit status, default 0). A command is answered from the capture whose argv it equals;
`<name>.match` instead of `.argv` holds a regular expression matched against the whole command line
(for a query whose field list changes between versions). Every other command runs for real on the
live node; over a tree (`--root TREE`) it is answered as a missing tool, and the captures stand for
the commands of the node the tree describes (the way tests replay a machine's captures).

The directory decides verdicts that may drain a node, so it must be trusted like everything else
root reads (verify.safe_io: owned by root, not writable by others by mode or ACL, no symlinks), and each run that
used it says so in the report (`injected_from`, and the commands answered).
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from verify.runner import CommandOutput, Runner, run_command
from verify.safe_io import check_root_tree, is_host_root, open_trusted_dir, read_trusted_file

MAX_CAPTURE_BYTES = 8 << 20  # a whole `dmesg` or `nvidia-smi -q` of an 8-GPU node is well under this
MAX_CAPTURES = 256


class InjectionError(ValueError):
    """The injection directory cannot be used; the message names the directory and the file."""


@dataclass
class Capture:
    name: str
    argv: Optional[tuple]
    pattern: Optional[re.Pattern]
    stdout: str
    stderr: str
    returncode: int

    def answers(self, argv: list) -> bool:
        if self.argv is not None:
            return tuple(argv) == self.argv
        return self.pattern is not None and self.pattern.fullmatch(shlex.join(argv)) is not None


@dataclass
class InjectedRunner:
    """A runner that answers the captured commands and runs every other one with `real`."""

    directory: str
    captures: list
    real: Runner = run_command
    answered: list = field(default_factory=list)  # names of the captures that answered, in order

    def __call__(self, argv, timeout_s: float = 60.0, env=None, cwd=None) -> CommandOutput:
        argv = [str(a) for a in argv]
        for capture in self.captures:
            if capture.answers(argv):
                if capture.name not in self.answered:
                    self.answered.append(capture.name)
                return CommandOutput(argv, capture.returncode, capture.stdout, capture.stderr, 0.0)
        return self.real(argv, timeout_s=timeout_s, env=env, cwd=cwd)


def no_command(argv, timeout_s: float = 60.0, env=None, cwd=None) -> CommandOutput:
    """A tree under --root has no runnable tools: every command not captured looks missing."""
    argv = [str(a) for a in argv]
    return CommandOutput(argv, None, "", f"[Errno 2] No such file or directory: '{argv[0] if argv else ''}'", 0.0,
                         missing=True)


def _read(directory: str, name: str) -> Optional[str]:
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        return None
    return read_trusted_file(path, MAX_CAPTURE_BYTES)


def for_run(directory: Optional[str], root: str) -> tuple:
    """(runner, Node's live flag) of a run over `root` with the drill `directory` (None: no drill): the captures
    answer and the tree under --root runs no command; a drill over a tree stands for a live node. A --root that is
    a link is refused here (InjectionError naming it), the one place every run over a tree starts."""
    try:
        check_root_tree(root)
    except OSError as exc:
        raise InjectionError(f"--root {root}: {exc.strerror or exc}") from None
    if not directory:
        return run_command, None
    over_tree = not is_host_root(root)
    return load(directory, no_command if over_tree else run_command), True if over_tree else None


def load(directory: str, real: Runner = run_command) -> InjectedRunner:
    """The runner for `directory`; InjectionError (naming the file) when it is unsafe or malformed."""
    try:
        dir_fd = open_trusted_dir(directory)  # mode bits, POSIX ACL and every parent (verify.safe_io)
        try:
            names = sorted(os.listdir(dir_fd))  # listed through the descriptor that was checked
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise InjectionError(f"--inject {directory}: {exc.strerror or exc}") from exc
    stems = sorted({n.rsplit(".", 1)[0] for n in names if n.endswith((".argv", ".match"))})
    if not stems:
        raise InjectionError(f"--inject {directory}: no <name>.argv or <name>.match capture in it")
    if len(stems) > MAX_CAPTURES:
        raise InjectionError(f"--inject {directory}: {len(stems)} captures, more than {MAX_CAPTURES}")
    captures = []
    for stem in stems:
        try:
            argv_text, match_text = _read(directory, f"{stem}.argv"), _read(directory, f"{stem}.match")
            stdout = _read(directory, f"{stem}.stdout") or ""
            stderr = _read(directory, f"{stem}.stderr") or ""
            rc_text = (_read(directory, f"{stem}.rc") or "0").strip()
        except OSError as exc:
            raise InjectionError(f"--inject {directory}: {stem}: {exc.strerror or exc}") from exc
        if not re.fullmatch(r"-?\d{1,3}", rc_text):
            raise InjectionError(f"--inject {directory}: {stem}.rc holds {rc_text[:40]!r}, not an exit status")
        argv, pattern = None, None
        try:
            if argv_text is not None:
                argv = tuple(shlex.split(argv_text.strip()))
            else:
                pattern = re.compile((match_text or "").strip())
        except (ValueError, re.error) as exc:
            which = "argv" if argv_text is not None else "match"
            raise InjectionError(f"--inject {directory}: {stem}.{which}: {exc}") from exc
        if argv == () or (pattern is not None and not pattern.pattern):
            raise InjectionError(f"--inject {directory}: {stem}: empty command")
        captures.append(Capture(stem, argv, pattern, stdout, stderr, int(rc_text)))
    return InjectedRunner(os.path.abspath(directory), captures, real)
