"""A command runner that answers from captured fixtures instead of running anything."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from verify.runner import CommandOutput

COMMANDS = Path(__file__).resolve().parent.parent / "fixtures" / "node" / "commands"


def load(name: str) -> CommandOutput:
    record = json.loads((COMMANDS / f"{name}.json").read_text(encoding="utf-8"))
    return CommandOutput(record["argv"], record["returncode"], record["stdout"], record["stderr"], 0.0)


class ReplayRunner:
    """Maps a predicate on argv to a captured output; unknown commands look like a missing tool."""

    def __init__(self, answers: Optional[dict] = None):
        self.answers = dict(answers or {})  # tuple(argv) or argv[0] -> CommandOutput
        self.calls: list = []

    def __call__(self, argv, timeout_s: float = 60.0, env=None, cwd=None) -> CommandOutput:
        argv = list(argv)
        self.calls.append(argv)
        for key in (tuple(argv), argv[0]):
            if key in self.answers:
                answer = self.answers[key]
                return CommandOutput(argv, answer.returncode, answer.stdout, answer.stderr, 0.0,
                                     answer.timed_out, answer.missing)
        return CommandOutput(argv, None, "", f"[Errno 2] No such file or directory: '{argv[0]}'", 0.0, missing=True)
