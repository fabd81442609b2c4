"""Ctrl-C and SIGTERM during `tunefleet verify` / `tunefleet bench`: stop cleanly, keep what finished.

Why: a benchmark runs minutes, in a child process group, often with a multi-GiB scratch file.
An operator's Ctrl-C (or a scheduler's SIGTERM) must not print a traceback, lose the results
already measured, leave the scratch file or leave the engine running on the GPUs.

How it fits together:
- `install()` (the CLI, for verify and bench) turns the first SIGINT/SIGTERM into `Interrupted`,
  a KeyboardInterrupt, so `except Exception` handlers never swallow it;
- `verify.runner.run_command` kills the running child's process group and re-raises;
- `finally` blocks remove scratch space (inside `deferred()`, so a signal cannot cut a cleanup
  short: it is acted on when the cleanup is done);
- `verify.bench.run_benchmarks` turns it into rows (`interrupted_rows`): the running benchmark
  ERROR "interrupted", the ones not started SKIP, and returns, so the reports are written;
- the CLI exits 128 + the signal number (130 for SIGINT, 143 for SIGTERM), as shells do.

A second signal while the reports are written is only noted; a third ends the process at once.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list = []  # signal numbers seen since install(), first first


class Interrupted(KeyboardInterrupt):
    """The run was interrupted by a signal (SIGINT or SIGTERM)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"interrupted ({signal_name(self.signum)})"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _handler(signum: int, frame) -> None:
    _received.append(signum)
    if len(_received) == 1:
        raise Interrupted(signum)
    if len(_received) == 2:
        sys.stderr.write("tunefleet: still stopping (killing the benchmark, writing what finished); "
                         "interrupt once more to quit at once\n")
        return
    os._exit(128 + signum)  # the user insists; cleanup is given up


def install() -> None:
    """Turn SIGINT and SIGTERM into Interrupted for this process (main thread only)."""
    _received.clear()
    for signum in SIGNALS:
        signal.signal(signum, _handler)


def received() -> Optional[int]:
    """The first signal that interrupted this run, or None."""
    return _received[0] if _received else None


def exit_status(signum: int) -> int:
    """The shell convention for a process ended by a signal: 128 + its number."""
    return 128 + signum


def signum_of(exc: BaseException) -> int:
    return getattr(exc, "signum", signal.SIGINT)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run a cleanup to its end; a SIGINT/SIGTERM arriving meanwhile is acted on afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are delivered to the main thread only
        return
    pending: list = []
    previous = {signum: signal.signal(signum, lambda s, f: pending.append(s)) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            handler = previous[pending[0]]
            if callable(handler):
                handler(pending[0], None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), pending[0])
