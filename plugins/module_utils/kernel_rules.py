# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""How the kernel names and prints its tunables: the one home for both sides of the house.

The Ansible side (modules, filters, preflight, the ledger) imports this file as
ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules; verify/ reaches the same
file through verify.kernel_rules (checkout, installed wheel, node bundle). Standard library only
and no Ansible import: it runs on the node's own python3, and inside verify without Ansible.
"""
from __future__ import annotations

import re
from typing import Iterable, List, Optional, Tuple

__all__ = [
    "KernelRuleError", "MAX_CPUS", "PROC_SYS", "format_cpulist", "normalise_value", "parse_choices",
    "parse_cpulist", "sysctl_key", "sysctl_key_problem", "sysctl_path", "value_words",
]


class KernelRuleError(ValueError):
    """Text that does not follow the kernel's rule; the message quotes it."""


# ---------------------------------------------------------------- sysctl keys

PROC_SYS = "/proc/sys/"
# sysctl(8): a key is either dotted (net.core.rmem_max) or, when it holds '/', slash-separated,
# so a dot inside an interface name stays literal (net/ipv4/conf/eth0.100/rp_filter). Top-level
# directories are lower case; no segment is empty or starts with '.' (no '..', no escaping
# /proc/sys). Two unambiguous alternatives: a single pattern with '.' both as separator and inside
# segments backtracks exponentially on a long non-matching key.
_SYSCTL_KEY = re.compile(
    r"[a-z0-9_]+(?:\.[A-Za-z0-9_:@+-]+)+"
    r"|[a-z0-9_]+(?:/[A-Za-z0-9_:@+-][A-Za-z0-9_.:@+-]*)+"
)
_KEY_MAX = 255


def sysctl_key_problem(key: object) -> Optional[str]:
    """None for a well-formed sysctl key, else why not (for the caller's own error message)."""
    if not isinstance(key, str):
        return f"a sysctl key is a string, not {type(key).__name__}"
    if len(key) > _KEY_MAX or not _SYSCTL_KEY.fullmatch(key):
        return "is not a sysctl key (expected e.g. net.core.rmem_max, or net/ipv4/conf/eth0.100/rp_filter)"
    return None


def sysctl_path(key: str) -> str:
    """net.ipv4.conf.all.rp_filter -> /proc/sys/net/ipv4/conf/all/rp_filter; KernelRuleError on a bad key."""
    problem = sysctl_key_problem(key)
    if problem:
        raise KernelRuleError(f"sysctl key {str(key)[:80]!r} {problem}")
    return PROC_SYS + (key if "/" in key else key.replace(".", "/"))


def sysctl_key(path: str) -> str:
    """The inverse of sysctl_path: dotted unless a segment holds a dot, then slash-separated."""
    if not isinstance(path, str) or not path.startswith(PROC_SYS):
        raise KernelRuleError(f"{str(path)[:80]!r} is not under {PROC_SYS}")
    relative = path[len(PROC_SYS):]
    key = relative if "." in relative else relative.replace("/", ".")
    problem = sysctl_key_problem(key)
    if problem:
        raise KernelRuleError(f"{path[:80]!r}: {key[:80]!r} {problem}")
    return key


# ---------------------------------------------------------------- values

def value_words(value: object) -> List[str]:
    """A kernel value as words: multi-value keys (tcp_rmem) read back tab-separated whatever was written."""
    return str(value).split()


def normalise_value(value: object) -> str:
    """The form to compare and report: words joined by one space (`4096\\t87380\\n` -> `4096 87380`)."""
    return " ".join(value_words(value))


def parse_choices(text: str) -> Tuple[Optional[str], List[str]]:
    """A sysfs choice list: `none [mq-deadline] kyber` -> ('mq-deadline', ['none', 'mq-deadline', 'kyber']).

    The active entry is the first word wholly in brackets; None when no word is (a plain value,
    or a file that is not a choice list: the caller decides what that means).
    """
    active, offered = None, []
    for word in text.split():
        name = word.strip("[]")
        if not name:
            continue
        if active is None and word == f"[{name}]":
            active = name
        offered.append(name)
    return active, offered


# ---------------------------------------------------------------- CPU lists

# The kernel's NR_CPUS tops out at 8192; a list naming a CPU beyond this is not a CPU list (and a
# set is built per CPU, so an unbounded "0-99999999" would take gigabytes).
MAX_CPUS = 65536


def parse_cpulist(text: str, limit: int = MAX_CPUS) -> set:
    """The kernel's cpulist syntax (lib/bitmap-str.c, bitmap_parselist) to a set of CPU numbers.

    Regions `N`, `A-B` and `A-B:USED/GROUP` (the first USED CPUs of every GROUP, e.g.
    `0-7:1/2` = 0,2,4,6), separated by ',' with blanks around them. Measured on Linux 6.18
    (cpuset.cpus, same parser as smp_affinity_list): `0-7:2` (no /GROUP), `0 - 1`, `1-0`, `0x1`
    and `+1` are refused with EINVAL; empty regions (`0,,1`, `0,`) are accepted. `N`/`all` (the
    last possible CPU) are not taken: their meaning depends on the node. KernelRuleError on
    anything else, including a CPU number at or above `limit`.
    """
    cpus: set = set()
    quoted = repr(text[:60])

    def number(word: str) -> int:
        if not word.isascii() or not word.isdigit() or len(word) > 20:
            raise KernelRuleError(f"cpulist {quoted}: {word[:20]!r} is not a CPU number")
        value = int(word)
        if value >= limit:
            raise KernelRuleError(f"cpulist {quoted}: CPU {value} is beyond {limit - 1}")
        return value

    for region in text.split(","):
        region = region.strip()
        if not region:
            continue
        span, colon, pattern = region.partition(":")
        low_text, dash, high_text = span.partition("-")
        low = number(low_text)
        high = number(high_text) if dash else low
        if high < low:
            raise KernelRuleError(f"descending range {region[:30]!r} in cpulist {quoted}")
        used = group = high - low + 1
        if colon:
            used_text, slash, group_text = pattern.partition("/")
            if not slash or not dash:
                raise KernelRuleError(f"bad stride {region[:30]!r} in cpulist {quoted} (the kernel takes A-B:N/GROUP)")
            used, group = number(used_text), number(group_text)
            if group < 1 or used > group:
                raise KernelRuleError(f"bad stride {region[:30]!r} in cpulist {quoted} (needs 0 <= N <= GROUP >= 1)")
        for start in range(low, high + 1, group):
            cpus.update(range(start, min(start + used, high + 1)))
    return cpus


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of parse_cpulist, as the kernel prints a list: `0-3,8,10-11`."""
    ranges = []
    start = prev = None
    for cpu in sorted(set(cpus)):
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
