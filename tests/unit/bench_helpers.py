"""Shared helpers for the benchmark tests: fixture paths and a scripted runner."""

from __future__ import annotations

import threading
from pathlib import Path

from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "bench"
NODE_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node" / "gpu_machine"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


class ScriptedNode:
    """A node whose runner answers from a function of argv and records every call."""

    def __init__(self, answer, root: str = "/"):
        self.root = root
        self.answer = answer
        self.calls: list = []
        self._lock = threading.Lock()

    def run(self, argv, timeout_s=60.0, env=None, cwd=None) -> CommandOutput:
        with self._lock:
            self.calls.append({"argv": list(argv), "timeout_s": timeout_s, "env": dict(env or {})})
        return self.answer(list(argv))


def output(argv, stdout="", stderr="", returncode=0, timed_out=False, missing=False) -> CommandOutput:
    return CommandOutput(
        list(argv),
        None if timed_out or missing else returncode,
        stdout,
        stderr,
        0.1,
        timed_out=timed_out,
        missing=missing,
    )
