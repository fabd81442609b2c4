"""The verdict classes: what an operator does next about a finding, and the status each class gets.

One home for the vocabulary every health judge uses (the table that maps each fault to a class is
docs/verdicts.md; the Xid codes' classes are in verify.judging.xid_catalog). A result carries its class
in `details["action"]` (ACTION_KEY); reports, the drain reason and the exit code follow the class:
FAIL means "take the node out and act", WARN means "act when idle, or watch".
"""
from __future__ import annotations

import re
from typing import Iterable, Optional

from verify.result import Status

OK = "ok"
WATCH = "watch"
APPLICATION = "application"
FIX_CONFIG = "fix-config"
RESET_GPU = "reset-gpu"
REBOOT = "reboot"
DRAIN_RMA = "drain-rma"
# Least to most disruptive.
ACTIONS = (OK, WATCH, APPLICATION, FIX_CONFIG, RESET_GPU, REBOOT, DRAIN_RMA)
ACTION_KEY = "action"

# A GPU reset clears a pending row remap or a recoverable error without taking the node out: WARN until it
# recurs (NVIDIA GPU Memory Error Management, "Row Remapping": "requires a GPU reset to take effect";
# "Error Recovery and Response Flags": with the pending flag set "unaffected applications can continue
# running ... and new workloads can be launched"). A recurrence is drain-rma (see recurred()).
# A node whose own configuration makes it slow (an nccl.conf line that turns NVLink off, a CPU governor the
# desired state disagrees with) is FAIL: it must be fixed before jobs run there, and the fix is named.
STATUS = {OK: Status.PASS, WATCH: Status.WARN, APPLICATION: Status.WARN, FIX_CONFIG: Status.FAIL,
          RESET_GPU: Status.WARN,
          REBOOT: Status.FAIL, DRAIN_RMA: Status.FAIL}

# What the operator does, in words for the report's remediation line ({index}: the GPU, {what}: the part).
WORDS = {
    OK: "no action",
    WATCH: "no action now; look again if it repeats",
    APPLICATION: "the application must be restarted or fixed; the GPU stays in service",
    FIX_CONFIG: "fix the node's configuration ({what}), e.g. by applying the tunefleet roles, then verify again",
    RESET_GPU: "reset the GPU when it is idle (nvidia-smi -r -i {index}); if it recurs, drain the node and RMA the GPU",
    REBOOT: "drain the node and reboot it; RMA if it recurs",
    DRAIN_RMA: "drain the node and open an RMA for {what} (hardware fault)",
}
RECURS = "recurs after reset"

# The driver names the process in its Xid lines: "pid=1248209, name=python3.10" ('<unknown>' when none).
_PROCESS = re.compile(r"\bpid=(\d+), name=([^,\s]+)")


def status_of(action: str) -> Status:
    return STATUS.get(action, Status.WARN)


def worst(actions: Iterable[str]) -> str:
    """The most disruptive of some action classes (OK for none)."""
    found = [a for a in actions if a in ACTIONS]
    return max(found, key=ACTIONS.index) if found else OK


def recurred(action: str, incidents: int) -> str:
    """The class after counting: a reset-gpu fault seen in more than one incident was not cured by a reset."""
    return DRAIN_RMA if action == RESET_GPU and incidents > 1 else action


def process_named(line: str) -> Optional[str]:
    """'pid 1248209 (python3.10)' from a driver line that names its process, else None."""
    match = _PROCESS.search(line)
    return f"pid {match.group(1)} ({match.group(2)})" if match else None


def remedy(action: str, index, what: str, process: Optional[str] = None) -> str:
    """The remediation line for a class; an application fault names its process where the driver gave it."""
    words = WORDS.get(action, WORDS[WATCH]).format(index=index, what=what)
    if action == APPLICATION and process:
        words = f"{process}: {words}"
    return words


def action_of(details: Optional[dict]) -> Optional[str]:
    """The class a result carries, or None (checks that judge no fault class)."""
    action = (details or {}).get(ACTION_KEY)
    return action if action in ACTIONS else None
