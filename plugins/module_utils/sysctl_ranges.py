# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""Which values the kernel refuses for the sysctl keys the roles set: the running kernel's own
answer where it can be asked, a model per kernel version where it cannot.

Asking: the candidate values are written in a throwaway network namespace (a child process that
unshares its network namespace, writes each value under /proc/sys/net, reads it back and exits;
the namespace goes with it), so nothing on the host changes, check mode included. That works for
the per-namespace net.* keys, as root, where unshare is allowed. The host-wide keys (vm.*,
kernel.*, net.core.rmem_max, ...) cannot be written without changing the host, and a container
or a non-root run cannot unshare: those are judged by MODEL, the rows measured or read per
kernel version. Builds of one version can differ (6.18.44-fc-v669 takes tcp_rmem "1 1 1",
6.18.44-fc-v1294 refuses any field below 4096), so a model row holds the strictest rule seen
for its versions: it may refuse a value some build takes, never take one a build refuses.

Standard library only: this runs on the node's own python3 inside the preflight module.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

INT_MAX = 2**31 - 1
CLONE_NEWNET = 0x40000000
PROBE_TIMEOUT_S = 10


@dataclass(frozen=True)
class Range:
    """A key holding `count` integers, each within low..high, on kernels since `since`."""
    count: int
    low: int
    high: int
    since: Tuple[int, int]
    source: str


MEASURED = "measured on the CI VM, Linux 6.18, net.* keys in a fresh network namespace"
MEASURED_HOST = "measured on the CI VM, Linux 6.18, host-wide: refused values only"
# key -> rows, oldest first; the row for a kernel is the last whose `since` it has reached.
MODEL: Dict[str, Tuple[Range, ...]] = {
    "net.ipv4.ip_local_port_range": (Range(2, 1, 65535, (0, 0), MEASURED),),
    "net.ipv4.tcp_rmem": (
        Range(3, 1, INT_MAX, (0, 0), "SYSCTL_ONE floor (net/ipv4/sysctl_net_ipv4.c), measured on 6.18.44-fc-v669"),
        Range(3, 4096, INT_MAX, (6, 18), "6.18.44-fc-v1294 refuses any field below 4096 (measured 2026-12-07); "
              "-fc-v669 of the same version takes 1: the stricter rule holds for 6.18 on"),
    ),
    "net.ipv4.tcp_wmem": (
        Range(3, 1, INT_MAX, (0, 0), "SYSCTL_ONE floor (net/ipv4/sysctl_net_ipv4.c), measured on 6.18.44-fc-v669"),
        Range(3, 4096, INT_MAX, (6, 18), "as tcp_rmem: 6.18.44-fc-v1294 refuses any field below 4096"),
    ),
    "net.ipv4.tcp_mtu_probing": (Range(1, 0, 255, (0, 0), MEASURED),),
    "net.core.somaxconn": (Range(1, 0, INT_MAX, (0, 0), MEASURED),),
    # SOCK_MIN_RCVBUF/SNDBUF are 2048/4096 plus an skb's size: the bare 2048/4096 are refused everywhere.
    "net.core.rmem_max": (Range(1, 2048, INT_MAX, (0, 0), MEASURED_HOST),),
    "net.core.rmem_default": (Range(1, 2048, INT_MAX, (0, 0), MEASURED_HOST),),
    "net.core.wmem_max": (Range(1, 4096, INT_MAX, (0, 0), MEASURED_HOST),),
    "net.core.wmem_default": (Range(1, 4096, INT_MAX, (0, 0), MEASURED_HOST),),
    "net.core.netdev_max_backlog": (Range(1, -INT_MAX - 1, INT_MAX, (0, 0), MEASURED),),
    "net.ipv4.neigh.default.gc_thresh1": (Range(1, 0, INT_MAX, (0, 0), MEASURED),),
    "net.ipv4.neigh.default.gc_thresh2": (Range(1, 0, INT_MAX, (0, 0), MEASURED),),
    "net.ipv4.neigh.default.gc_thresh3": (Range(1, 0, INT_MAX, (0, 0), MEASURED),),
    "vm.swappiness": (
        Range(1, 0, 100, (0, 0), "0..100 before Linux 5.8 (mm/vmscan.c)"),
        Range(1, 0, 200, (5, 8), "0..200 since Linux 5.8 (mm/vmscan.c); " + MEASURED_HOST),
    ),
    "vm.max_map_count": (Range(1, 0, INT_MAX, (0, 0), MEASURED_HOST),),
    "vm.zone_reclaim_mode": (Range(1, 0, INT_MAX, (0, 0), MEASURED_HOST),),
    "kernel.numa_balancing": (
        Range(1, 0, 1, (0, 0), "0..1 before Linux 6.0 (kernel/sched/core.c, SYSCTL_ONE)"),
        Range(1, 0, 4, (6, 0), "memory tiering mode since Linux 6.0; " + MEASURED_HOST),
    ),
}
PORT_RANGE_KEY = "net.ipv4.ip_local_port_range"
PORT_FLOOR_KEY = "net.ipv4.ip_unprivileged_port_start"

_RELEASE = re.compile(r"(\d{1,4})\.(\d{1,4})")


def kernel_version(release: Optional[str]) -> Optional[Tuple[int, int]]:
    """`6.18.44-fc-v1294` -> (6, 18); None for text that names no version."""
    found = _RELEASE.match((release or "").strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def modelled_range(key: str, release: Optional[str]) -> Optional[Range]:
    """The model's rule for this key on this kernel; an unknown version gets the newest (strictest) row."""
    rows = MODEL.get(key)
    if not rows:
        return None
    version = kernel_version(release)
    if version is None:
        return max(rows, key=lambda row: row.low)
    chosen = rows[0]
    for row in rows:
        if version >= row.since:
            chosen = row
    return chosen


# Runs in the child, after it left the host's network namespace (preexec_fn below), with -I -S:
# nothing from the caller's environment or site directories. Per value one JSON answer:
# true taken (and read back as written), a string the kernel's refusal, null cannot tell here
# (the key is absent or read-only in a child namespace: a host-wide key).
_IN_NAMESPACE = r"""
import json, sys
def words(text): return " ".join(text.split())
answers = []
for key, value, before in json.loads(sys.stdin.read()):
    path = "/proc/sys/" + key.replace(".", "/")
    try:
        for name, text in before:  # the keys this one's rule reads, set as the host will have them
            with open("/proc/sys/" + name.replace(".", "/"), "w") as handle:
                handle.write(text)
        with open(path) as handle:
            current = handle.read()
        with open(path, "w") as handle:  # a host-wide key refuses even its own value here
            handle.write(current)
    except OSError:
        answers.append(None)
        continue
    try:
        with open(path, "w") as handle:  # the kernel answers at the flush, inside the with
            handle.write(value)
    except OSError as error:
        answers.append(error.strerror or str(error))
        continue
    with open(path) as handle:
        stored = words(handle.read())
    answers.append(True if stored == words(value) else "it keeps " + repr(stored) + " instead")
print(json.dumps(answers))
"""


def _leave_network_namespace() -> None:
    """In the child, before exec: a network namespace of its own (os.unshare is Python 3.12+)."""
    if hasattr(os, "unshare"):
        os.unshare(CLONE_NEWNET)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")


def probe(candidates: Iterable[Tuple[str, str, List[Tuple[str, str]]]]) -> List[Optional[object]]:
    """The running kernel's answer for each (key, value, keys to set first): True taken, a string why
    refused, None where it cannot be asked. All None when no namespace can be made (not root, a
    container, no unshare), so the caller falls back to the model."""
    asked = [[key, value, [list(pair) for pair in before]] for key, value, before in candidates]
    unknown: List[Optional[object]] = [None] * len(asked)
    if not asked or os.geteuid() != 0 or not sys.executable:
        return unknown
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _IN_NAMESPACE], input=json.dumps(asked),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              preexec_fn=_leave_network_namespace, env={}, cwd="/")
        answers = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return unknown
    if not isinstance(answers, list) or len(answers) != len(asked):
        return unknown
    return [a if a is True or a is None or isinstance(a, str) else None for a in answers]


def kernel_release(root: str) -> Optional[str]:
    where = "/proc/sys/kernel/osrelease" if root in ("", "/") else os.path.join(root, "proc/sys/kernel/osrelease")
    try:
        with open(where, encoding="utf-8", errors="replace") as handle:
            return handle.read(256).strip()
    except OSError:
        return None


def _integers(value: object, count: int) -> Optional[List[int]]:
    fields = str(value).split()
    if len(fields) != count or not all(re.fullmatch(r"-?[0-9]{1,20}", f) for f in fields):
        return None
    return [int(f) for f in fields]


def _set_first(key: str) -> List[Tuple[str, str]]:
    """The port range's own rule only (1..65535, first <= last) is asked: its floor is judged by the
    caller against the value the host will have, so the namespace's floor is opened to 0 first."""
    return [(PORT_FLOOR_KEY, "0")] if key == PORT_RANGE_KEY else []


class KernelRanges:
    """What one host's kernel refuses for the keys of MODEL. Built once per preflight with every
    (key, value) it will judge, so the namespace is made once: `root` "/" is the running kernel
    (asked), any other root a test's tree (modelled from its osrelease)."""

    def __init__(self, root: str, pairs: Iterable[Tuple[str, object]], port_floor: Optional[int] = None,
                 ask_kernel: bool = True) -> None:
        self.release = kernel_release(root)
        self.answers: Dict[Tuple[str, str], object] = {}
        askable = sorted({(key, " ".join(str(value).split())) for key, value in pairs
                          if key.startswith("net.") and key in MODEL
                          and _integers(value, MODEL[key][-1].count) is not None})
        if ask_kernel and root in ("", "/") and askable:
            answers = probe((key, value, _set_first(key)) for key, value in askable)
            self.answers = {pair: answer for pair, answer in zip(askable, answers) if answer is not None}

    def problem(self, key: str, value: object) -> Optional[str]:
        """Why this kernel refuses the value, or None (keys outside MODEL pass: other checks judge them).
        The port range's floor (ip_unprivileged_port_start) is a rule across two keys: the caller's."""
        if key not in MODEL:
            return None
        rule = modelled_range(key, self.release)
        numbers = _integers(value, rule.count)
        if numbers is None:
            return f"this key holds {rule.count} integer(s)"
        answer = self.answers.get((key, " ".join(str(value).split())))
        kernel = f"this kernel ({self.release or 'release unknown'})"
        if answer is True:
            return None
        # The modelled rule says why in the operator's terms; the kernel's own answer, where asked, is the proof
        # (and the only reason where no modelled rule explains it).
        why = None
        outside = [n for n in numbers if not rule.low <= n <= rule.high]
        if outside:
            why = f"{outside[0]} is outside {rule.low}..{rule.high}, which {kernel} refuses (modelled: {rule.source})"
        elif key == PORT_RANGE_KEY and numbers[0] > numbers[1]:
            why = f"the first port {numbers[0]} is above the last {numbers[1]}, which the kernel refuses"
        if isinstance(answer, str):
            asked = f"asked in a throwaway network namespace: {answer}"
            return f"{why} ({asked})" if why else f"{kernel} refuses it ({asked})"
        return why
