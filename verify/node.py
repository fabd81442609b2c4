"""The node as the checks see it: a root to read /proc, /sys and /etc under, and a command runner.

Everything that touches the machine goes through `Node`, so tests point it at a fake tree
(`Node(root=tmp_path)`) and inject a runner that replays captured tool output.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from verify import kernel_rules
from verify.kernel_rules import MAX_CPUS
from verify.runner import CommandOutput, run_command
from verify.safe_io import is_host_root, read_beneath, read_capped

_INTEGER = re.compile(r"-?[0-9]{1,19}")  # ASCII, 64-bit: a 5000-digit "integer" is not a kernel value


READ_CAP = 16 << 20  # the largest file a check reads whole (/proc/cpuinfo of 512 CPUs is ~1 MiB)


class ReadError(ValueError):
    """A file under the node's root exists but does not hold what it should; the message names it."""


@dataclass
class Node:
    root: str = "/"
    runner: Callable[..., CommandOutput] = run_command
    # One run's memo of expensive reads (the GPU query), so facts and checks share it.
    memo: dict = field(default_factory=dict)
    # Tests that replay captured command output over a fake tree set this True.
    live: Optional[bool] = None
    # Open a real login session (su -l nobody) to record its ulimits: ~0.1-0.3 s, so opt-in.
    probe_login: bool = False

    @property
    def is_live(self) -> bool:
        """Commands (ping, ethtool, nvidia-smi) describe the running machine, not a tree under --root."""
        if self.live is not None:
            return self.live
        return os.path.realpath(self.root) == "/"

    def path(self, absolute: str) -> str:
        return os.path.join(self.root, absolute.lstrip("/"))

    def exists(self, absolute: str) -> bool:
        return os.path.exists(self.path(absolute))

    def read(self, absolute: str) -> Optional[str]:
        """The file's text, or None when it is absent, unreadable (EINVAL from sysfs included) or unsafe."""
        data = self.read_binary(absolute)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_binary(self, absolute: str, cap: int = READ_CAP) -> Optional[bytes]:
        """The file's bytes (a binary sysfs file: PCI config space), or None as for read().

        Bounded (verify.safe_io.read_capped): a regular file only, never more than `cap` bytes. Under
        --root the path is resolved beneath the tree by descriptor (verify.safe_io.read_beneath), as a chroot
        would: Debian's sysctl.d/99-sysctl.conf -> ../sysctl.conf stays in the tree, a planted link to the live
        /etc/shadow reads the tree's own etc/shadow, and a link swapped in while it is read is refused, never
        followed out. On the live node links are the kernel's and the distribution's
        (/etc/os-release -> ../usr/lib/os-release)."""
        try:
            if is_host_root(self.root):
                return read_capped(self.path(absolute), cap, follow_symlinks=True)
            return read_beneath(self.root, absolute, cap)
        except OSError:
            return None

    def read_value(self, absolute: str) -> Optional[str]:
        text = self.read(absolute)
        return None if text is None else text.strip()

    def read_int(self, absolute: str) -> Optional[int]:
        text = self.read_value(absolute)
        if text is None:
            return None
        if not _INTEGER.fullmatch(text):
            raise ReadError(f"{absolute} should hold an integer, holds {text[:40]!r}")
        return int(text)

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

    def run(
        self, argv: list, timeout_s: float = 10.0, env: Optional[dict] = None, cwd: Optional[str] = None
    ) -> CommandOutput:
        """Run a command on the node; the same call as `verify.runner.run_command`."""
        return self.runner(argv, timeout_s=timeout_s, env=env, cwd=cwd)


def parse_cpulist(text: str, limit: int = MAX_CPUS) -> set:
    """Kernel cpulist syntax ("0-3,8,10-11", strides "0-7:1/2") to a set of CPU numbers; the rule
    lives in verify.kernel_rules. Raises ReadError (and nothing else) on anything else, including
    a CPU number at or above `limit`."""
    try:
        return kernel_rules.parse_cpulist(text, limit)
    except kernel_rules.KernelRuleError as exc:
        raise ReadError(str(exc)) from None


# ---- node facts: what the report says about the machine it judged --------------------------------
