"""The node as the checks see it: a root to read /proc, /sys and /etc under, and a command runner.

Everything that touches the machine goes through `Node`, so tests point it at a fake tree
(`Node(root=tmp_path)`) and inject a runner that replays captured tool output.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from verify.runner import CommandOutput, run_command


class ReadError(ValueError):
    """A file under the node's root exists but does not hold what it should; the message names it."""


@dataclass
class Node:
    root: str = "/"
    runner: Callable[..., CommandOutput] = run_command
    # One run's memo of expensive reads (the GPU query), so facts and checks share it.
    memo: dict = field(default_factory=dict)

    @property
    def is_live(self) -> bool:
        """Commands (ping, ethtool, nvidia-smi) describe the running machine, not a tree under --root."""
        return os.path.realpath(self.root) == "/"

    def path(self, absolute: str) -> str:
        return os.path.join(self.root, absolute.lstrip("/"))

    def exists(self, absolute: str) -> bool:
        return os.path.exists(self.path(absolute))

    def read(self, absolute: str) -> Optional[str]:
        """The file's text, or None when it is absent or unreadable (EINVAL from sysfs included)."""
        try:
            with open(self.path(absolute), encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def read_value(self, absolute: str) -> Optional[str]:
        text = self.read(absolute)
        return None if text is None else text.strip()

    def read_int(self, absolute: str) -> Optional[int]:
        text = self.read_value(absolute)
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            raise ReadError(f"{absolute} should hold an integer, holds {text[:40]!r}") from None

    def listdir(self, absolute: str) -> list:
        try:
            return sorted(os.listdir(self.path(absolute)))
        except OSError:
            return []

    def glob(self, pattern: str) -> list:
        """Absolute (node-side) paths matching pattern under the root."""
        prefix = self.path("/")
        return sorted("/" + found[len(prefix):].lstrip("/") for found in glob.glob(self.path(pattern)))

    def readlink_name(self, absolute: str) -> Optional[str]:
        """Basename of a symlink's target (a sysfs driver or PCI address), None if not a link."""
        try:
            return os.path.basename(os.readlink(self.path(absolute)))
        except OSError:
            return None

    def run(self, argv: list, timeout_s: float = 10.0) -> CommandOutput:
        return self.runner(argv, timeout_s=timeout_s)


def parse_cpulist(text: str) -> set:
    """Kernel cpulist syntax ("0-3,8,10-11", also "0-7:2" strides) to a set of CPU numbers."""
    cpus: set = set()
    text = text.strip()
    if not text:
        return cpus
    for part in text.split(","):
        part = part.strip()
        stride = 1
        if ":" in part:
            part, stride_text = part.split(":", 1)
            stride = int(stride_text)
            if stride < 1:
                raise ValueError(f"bad stride in cpulist {text!r}")
        if "-" in part:
            low_text, high_text = part.split("-", 1)
            low, high = int(low_text), int(high_text)
            if high < low:
                raise ValueError(f"descending range in cpulist {text!r}")
            cpus.update(range(low, high + 1, stride))
        else:
            cpus.add(int(part))
    return cpus


def format_cpulist(cpus: set) -> str:
    """The inverse of parse_cpulist, for messages a person reads."""
    ordered = sorted(cpus)
    ranges = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            ranges.append((start, prev))
            start = prev = cpu
    if start is not None:
        ranges.append((start, prev))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
