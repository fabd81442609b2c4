"""Shared helpers for the benchmark tests: fixture paths and the real Node with a recording runner."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from verify.node import Node
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "bench"
NODE_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node" / "gpu_machine"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


class RecordingRunner:
    """A runner with exactly `verify.runner.run_command`'s call: records each call, answers from a function.

    tests/unit/test_doubles_match_node.py fails if this call drifts from run_command's.
    """

    def __init__(self, answer: Callable[[list], CommandOutput]):
        self.answer = answer
        self.calls: list = []
        self._lock = threading.Lock()  # perftest runs its server in a thread

    def __call__(
        self,
        argv: Sequence[str],
        timeout_s: float = 60.0,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
    ) -> CommandOutput:
        with self._lock:
            self.calls.append({"argv": list(argv), "timeout_s": timeout_s, "env": dict(env or {}), "cwd": cwd})
        return self.answer(list(argv))


def scripted_node(answer: Callable[[list], CommandOutput], root: str = "/") -> Node:
    """The real Node whose commands are answered by `answer(argv)`; calls are in `node.runner.calls`."""
    return Node(root=root, runner=RecordingRunner(answer))


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
