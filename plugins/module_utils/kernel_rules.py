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
    "AT_LEAST", "AT_MOST", "DIRECTION_NAMES", "DIRECTIONS", "EXACT", "KernelRuleError", "LIMIT_UNLIMITED", "MAX_CPUS",
    "PAM_LIMITS_DIR", "PAM_LIMITS_FILE", "PROC_SYS", "SYSTEMD_CONF_DIRS", "SYSTEMD_CONF_FILE",
    "compare", "higher_limit", "interface_name_problem", "limit_number", "pam_limit_in_force", "parse_pam_limits",
    "parse_systemd_limits",
    "direction_of", "format_cpulist", "kernel_int", "normalise_value", "parse_choices", "parse_cpulist", "settle",
    "sysctl_key", "sysctl_key_problem", "sysctl_path", "value_words",
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


# ---------------------------------------------------------------- interface names

# The kernel's rule (net/core/dev.c dev_valid_name): 1..15 bytes (IFNAMSIZ - 1), not `.` or `..`, no
# `/`, `:` or whitespace. It accepts `a$(id>p)`; tunefleet's names reach boot scripts and unit files,
# so it takes only the shell-safe subset on top (issue 28 item 5).
_IFNAME_SAFE = re.compile(r"[A-Za-z0-9_.@-]+")
IFNAME_MAX_BYTES = 15


def interface_name_problem(name: object) -> Optional[str]:
    """None for a name the kernel takes and a shell reads as one plain word, else why not."""
    if not isinstance(name, str):
        return f"an interface name is a string, not {type(name).__name__}"
    size = len(name.encode("utf-8", "surrogateescape"))
    if not 1 <= size <= IFNAME_MAX_BYTES or name in (".", "..") or re.search(r"[/:\s]", name):
        return "is not an interface name (the kernel's rule: 1-15 bytes, not . or .., no '/', ':' or whitespace)"
    if not _IFNAME_SAFE.fullmatch(name):
        return ("holds characters outside [A-Za-z0-9_.@-], which tunefleet refuses "
                "(the name reaches root's boot scripts)")
    return None


# ---------------------------------------------------------------- values

def value_words(value: object) -> List[str]:
    """A kernel value as words: multi-value keys (tcp_rmem) read back tab-separated whatever was written."""
    return str(value).split()


def kernel_int(text: object) -> Optional[int]:
    """A number as the kernel prints one (ASCII digits, an optional '-', at most 20 digits: 64 bits),
    else None. A 5000-digit word or a Unicode digit (`²`, which str.isdigit() accepts and int()
    refuses) is no kernel number, and never raises."""
    if not isinstance(text, str):
        return None
    word = text.strip()
    return int(word) if _INT_WORD.fullmatch(word) else None


_INT_WORD = re.compile(r"-?[0-9]{1,20}")


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


# ---------------------------------------------------------------- directions (never de-tune)

AT_LEAST, AT_MOST, EXACT = "at_least", "at_most", "exact"
# Which way a tuned value may differ from the recommendation and still be kept (issue 26 item 7).
# `at_least`: a ceiling, a queue, a table or a count that the node may already have above the
# recommendation (the node's image or its operator raised it for a reason): the roles raise it only
# when it is below, field by field for multi-value keys, and verify PASSes a higher value.
# `at_most`: the same the other way round (none of the shipped values is one today).
# `exact`: a mode or a switch (swappiness 0, numa_balancing 0, THP modes, the I/O scheduler, the
# governor, tcp_mtu_probing, congestion control, the port range) where "more" is not "better".
# Any name not listed is `exact`; an inventory can force `exact` on a listed one
# (sysctl_exact_keys). Sysctl keys by their dotted name, the other roles' values as <role>.<item>.
DIRECTIONS = {
    # socket buffer ceilings and defaults: a larger buffer never slows a flow down
    "net.core.rmem_max": AT_LEAST,
    "net.core.wmem_max": AT_LEAST,
    "net.core.rmem_default": AT_LEAST,
    "net.core.wmem_default": AT_LEAST,
    "net.core.optmem_max": AT_LEAST,
    "net.ipv4.tcp_rmem": AT_LEAST,  # min default max, each field on its own
    "net.ipv4.tcp_wmem": AT_LEAST,
    "net.ipv4.udp_rmem_min": AT_LEAST,
    "net.ipv4.udp_wmem_min": AT_LEAST,
    # queues and tables: a longer one drops less
    "net.core.netdev_max_backlog": AT_LEAST,
    "net.core.somaxconn": AT_LEAST,
    "net.ipv4.tcp_max_syn_backlog": AT_LEAST,
    "net.ipv4.neigh.default.gc_thresh1": AT_LEAST,
    "net.ipv4.neigh.default.gc_thresh2": AT_LEAST,
    "net.ipv4.neigh.default.gc_thresh3": AT_LEAST,
    "net.ipv6.neigh.default.gc_thresh1": AT_LEAST,
    "net.ipv6.neigh.default.gc_thresh2": AT_LEAST,
    "net.ipv6.neigh.default.gc_thresh3": AT_LEAST,
    # process-wide ceilings
    "vm.max_map_count": AT_LEAST,
    "fs.nr_open": AT_LEAST,
    "fs.file-max": AT_LEAST,
    "fs.inotify.max_user_watches": AT_LEAST,
    "fs.inotify.max_user_instances": AT_LEAST,
    "fs.aio-max-nr": AT_LEAST,
    "kernel.pid_max": AT_LEAST,
    "kernel.threads-max": AT_LEAST,
    # the other roles' ceilings (limits: pam_limits and systemd; memory: huge page pools)
    "limits.memlock": AT_LEAST,
    "limits.nofile": AT_LEAST,
    "limits.nproc": AT_LEAST,
    "limits.stack": AT_LEAST,
    "limits.systemd_memlock": AT_LEAST,
    "limits.systemd_nofile": AT_LEAST,
    "memory.hugepages_2m": AT_LEAST,
    "memory.hugepages_1g": AT_LEAST,
}
DIRECTION_NAMES = (AT_LEAST, AT_MOST, EXACT)
# A field is compared as a number only when it is one the kernel could print (a 64-bit value);
# int() of a 5000-digit word would be refused by Python's digit limit, or be slow.
_FIELD = re.compile(r"-?[0-9]{1,20}")


def direction_of(name: str, exact_names: Iterable[str] = ()) -> str:
    """The direction of a tuned value by its name: `exact` where the inventory forces it or nobody listed it."""
    if name in set(exact_names or ()):
        return EXACT
    return DIRECTIONS.get(name, EXACT)


def _numbers(value: object) -> Optional[List[int]]:
    words = value_words(value)
    if not words or not all(_FIELD.fullmatch(word) for word in words):
        return None
    return [int(word) for word in words]


def settle(direction: str, current: object, wanted: object) -> str:
    """The value to have in force: the recommendation, or the node's own where it is better.

    `at_least` keeps each field of the node that is above the recommendation's (tcp_rmem
    `4096 131072 6291456` against `4096 87380 268435456` -> `4096 131072 268435456`); `at_most`
    each field below it. When the two do not compare field by field (a word that is no number,
    another field count, an `exact` value) the recommendation stands.
    """
    if direction not in (AT_LEAST, AT_MOST):
        return normalise_value(wanted)
    have, want = _numbers(current), _numbers(wanted)
    if have is None or want is None or len(have) != len(want):
        return normalise_value(wanted)
    better = max if direction == AT_LEAST else min
    return " ".join(str(better(h, w)) for h, w in zip(have, want))


def compare(direction: str, observed: object, wanted: object) -> str:
    """`same`, `better` (the node is past the recommendation the right way: kept), or `worse`."""
    if normalise_value(observed) == normalise_value(wanted):
        return "same"
    if direction in (AT_LEAST, AT_MOST) and settle(direction, observed, wanted) == normalise_value(observed):
        return "better"
    return "worse"


# ---------------------------------------------------------------- resource limits (pam_limits, systemd)

LIMIT_UNLIMITED = "unlimited"
# pam_limits reads PAM_LIMITS_FILE, then PAM_LIMITS_DIR/*.conf in file-name order (Linux-PAM
# modules/pam_limits/pam_limits.c). systemd reads SYSTEMD_CONF_FILE, then the drop-ins of these
# directories ordered by file name, a later directory's file replacing a same-named one (systemd.syntax(7)).
PAM_LIMITS_FILE = "/etc/security/limits.conf"
PAM_LIMITS_DIR = "/etc/security/limits.d"
SYSTEMD_CONF_FILE = "/etc/systemd/system.conf"
SYSTEMD_CONF_DIRS = ("/usr/lib/systemd/system.conf.d", "/usr/local/lib/systemd/system.conf.d",
                     "/run/systemd/system.conf.d", "/etc/systemd/system.conf.d")
_LIMIT_SIZE = re.compile(r"([0-9]{1,20})([KMGTPE]?)")
# pam_limits ranks (LIMITS_DEF_USER, _GROUP, _DEFAULT): a line for a more specific domain outranks a
# wider one wherever it appears; among equal ranks the later line wins.
_RANK_EXACT, _RANK_WILDCARD = 0, 4


def parse_pam_limits(text: str) -> List[Tuple[str, str, str, str]]:
    """(domain, type, item, value) of each limits.conf line, in file order; malformed lines are skipped as pam does."""
    entries = []
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) == 4:
            entries.append((fields[0], fields[1].lower(), fields[2].lower(), fields[3].lower()))
    return entries


def parse_systemd_limits(texts: Iterable[str]) -> dict:
    """[Manager] DefaultLimit* assignments (`NOFILE` -> `1024:524288`) of system.conf and its drop-ins, in
    systemd's order: a later assignment wins."""
    found = {}
    for text in texts:
        in_manager = False
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("["):
                in_manager = line == "[Manager]"
                continue
            if not in_manager or line.startswith(("#", ";")) or "=" not in line:
                continue
            key, value = (part.strip() for part in line.split("=", 1))
            if key.startswith("DefaultLimit") and value:
                found[key[len("DefaultLimit"):]] = value
    return found


def limit_number(value: object) -> object:
    """One limit (a pam_limits value, or one side of systemd's soft:hard, with systemd's 1024-based K..E
    suffixes) as an int or LIMIT_UNLIMITED; None when it is neither."""
    text = str(value).strip()
    if text.lower() in ("unlimited", "infinity", "-1"):
        return LIMIT_UNLIMITED
    match = _LIMIT_SIZE.fullmatch(text.upper())
    if not match:
        return None
    return int(match.group(1)) * 1024 ** "_KMGTPE".index(match.group(2)) if match.group(2) else int(match.group(1))


def higher_limit(first: object, second: object) -> object:
    """The larger of two limit_number()s (unlimited above every number); a None side loses."""
    if first is None or second is None:
        return second if first is None else first
    if LIMIT_UNLIMITED in (first, second):
        return LIMIT_UNLIMITED
    return max(first, second)


def pam_limit_in_force(entries: Iterable[Tuple[str, str, str, str, str]], domain: str, kind: str,
                       item: str) -> Optional[Tuple[str, str]]:
    """(value, file) a `domain` line of `kind` (soft/hard) for `item` would compete with: the other files'
    line for the same domain, or for `*` when `domain` is a group (a group line outranks `*`, so writing
    one would lower a higher `*` for the group's members). `*` never matches root. Entries are
    (file, domain, type, item, value) in pam_limits' reading order. None when nothing sets it."""
    best, rank = None, None
    for path, their_domain, their_kind, their_item, value in entries:
        if their_item != item or their_kind not in (kind, "-"):
            continue
        if their_domain == domain:
            this_rank = _RANK_EXACT
        elif their_domain == "*" and domain.startswith("@"):
            this_rank = _RANK_WILDCARD
        else:
            continue
        if rank is None or this_rank <= rank:
            best, rank = (value, path), this_rank
    return best


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
