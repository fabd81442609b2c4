"""Resource limits as a new login session gets them (pam_limits) and as systemd services get them.

pam_limits semantics (Linux-PAM modules/pam_limits/pam_limits.c, seen on Debian 12 PAM 1.5.2):
limits.conf is read first, then limits.d/*.conf in file-name order; an entry for the user by name
outranks a `*` entry wherever it appears, and among equal ranks the later one wins; `-` sets soft
and hard; `*` does not apply to root (measured here with `su -l root`), so root needs its own line.
memlock/stack are KiB; nofile `unlimited` becomes fs.nr_open.

memlock is judged for every user (`*`, RDMA registration); nofile, nproc and stack for a member
of the group limits_group names (`@group`; `*` when it says so or an older desired state has none).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verify.checks.common import result, role_disabled, section, skip
from verify.kernel_rules import (
    AT_LEAST,
    LIMIT_UNLIMITED,
    PAM_LIMITS_DIR,
    PAM_LIMITS_FILE,
    SYSTEMD_CONF_DIRS,
    SYSTEMD_CONF_FILE,
    direction_of,
    limit_number,
    parse_pam_limits,
    parse_systemd_limits,
)
from verify.node import Node
from verify.result import Status

ROLE = "limits"
INFINITY = "unlimited"
PAM_ITEMS = ("memlock", "nofile", "nproc", "stack")
SYSTEMD_ITEMS = {"systemd_memlock": "MEMLOCK", "systemd_nofile": "NOFILE"}
RANK_USER, RANK_GROUP, RANK_DEFAULT = 0, 1, 4  # pam_limits LIMITS_DEF_USER / _GROUP / _DEFAULT
EVERYONE_ITEMS = ("memlock",)  # for every login user whatever limits_group says (the role's template)
PROBE_ARGV = ["su", "-l", "nobody", "-s", "/bin/sh", "-c", "ulimit -l; ulimit -n; ulimit -p; ulimit -s"]


class LimitsParseError(ValueError):
    pass


@dataclass
class Limit:
    soft: object = None  # int, INFINITY, or None when no entry sets it
    hard: object = None


def normalize(value: object, item: str, nr_open: Optional[int]) -> object:
    """A limits.conf / desired-state value to int or INFINITY (nofile unlimited -> nr_open)."""
    text = str(value).strip().lower()
    if text in ("unlimited", "infinity", "-1", "-"):
        return nr_open if item == "nofile" and nr_open else INFINITY
    if not (text.isascii() and text.isdigit()):
        raise LimitsParseError(f"{item} value {value!r} is neither a number nor unlimited")
    return int(text)


def parse_limits_lines(text: str) -> list:
    """(domain, type, item, value) tuples, in file order; the rule's one home is kernel_rules (the limits
    role reads the node's files with it too, to keep a higher limit in force)."""
    return parse_pam_limits(text)


def parse_systemd_conf(texts: list) -> dict:
    """[Manager] DefaultLimit* assignments from system.conf and drop-ins; later ones win (kernel_rules)."""
    return parse_systemd_limits(texts)


def effective(entries: list, user: str, nr_open: Optional[int], groups: tuple = ()) -> dict:
    """item -> Limit for `user`, a member of `groups`, after every file (other groups are ignored)."""
    ranks: dict = {}
    limits = {item: Limit() for item in PAM_ITEMS}
    for domain, kind, item, value in entries:
        if item not in limits or kind not in ("soft", "hard", "-"):
            continue
        if domain == user:
            rank = RANK_USER
        elif domain.startswith("@") and domain[1:] in groups:
            rank = RANK_GROUP
        elif domain == "*" and user != "root":
            rank = RANK_DEFAULT
        else:
            continue
        number = normalize(value, item, nr_open)
        for side in ("soft", "hard"):
            if kind not in (side, "-"):
                continue
            if ranks.get((item, side), 99) < rank:
                continue
            ranks[(item, side)] = rank
            setattr(limits[item], side, number)
    return limits


def limits_files(node: Node) -> list:
    texts = []
    main = node.read(PAM_LIMITS_FILE)
    if main is not None:
        texts.append((PAM_LIMITS_FILE, main))
    names = sorted(n for n in node.listdir(PAM_LIMITS_DIR) if n.endswith(".conf"))
    for name in names:
        text = node.read(f"{PAM_LIMITS_DIR}/{name}")
        if text is not None:
            texts.append((f"{PAM_LIMITS_DIR}/{name}", text))
    return texts


def show(value: object) -> str:
    return "not set" if value is None else str(value)


def at_or_above(value: object, expected: object) -> bool:
    """A limit that gives at least what the desired state asks (unlimited is above every number)."""
    if value in (expected, INFINITY):
        return True
    return expected != INFINITY and isinstance(value, int) and value > expected


def judge_login(item: str, expected: object, users: Limit, root: Limit, probe: Optional[str],
                who: str = "users (*)"):
    """Every subject's soft limit equals the desired one, or is above it where the rules call the
    limit at_least (kernel_rules.DIRECTIONS: a node's higher limit is kept, never lowered)."""
    check_id = f"limits.login.{item}"
    raised = direction_of(f"limits.{item}") == AT_LEAST
    observed = {who: show(users.soft), "root": show(root.soft)}
    details = {"users_hard": show(users.hard), "root_hard": show(root.hard)}
    if probe is not None:
        details["su -l nobody"] = probe
    subjects = ((who, users), ("root", root))
    unset = [who for who, limit in subjects if limit.soft is None]
    problems = [f"no limits.conf(.d) entry sets {item} for {' or '.join(unset)}"] if unset else []
    kept = []
    for who, limit in subjects:
        if limit.soft is not None and limit.soft != expected and not (raised and at_or_above(limit.soft, expected)):
            problems.append(f"{who} get soft {item} {show(limit.soft)}")
        elif limit.soft is not None and limit.hard not in (None, INFINITY) and \
                (expected == INFINITY or limit.hard < expected):
            problems.append(f"{who} get hard {item} {show(limit.hard)} below the soft limit")
        elif limit.soft is not None and limit.soft != expected:
            kept.append(f"{who} {show(limit.soft)}")
    if not problems:
        reason = (f"{', '.join(kept)} is above the recommended {expected}: kept" if kept else "")
        return result(check_id, ROLE, Status.PASS, expected, observed, reason, details=details)
    return result(check_id, ROLE, Status.FAIL, expected, observed,
                  f"a new login session: {'; '.join(problems)} (desired: {expected})", f"limits_{item}", details)


def parse_probe(text: str) -> dict:
    values = text.split()
    if len(values) != 4:
        raise LimitsParseError(f"expected 4 ulimit values, got {text.strip()[:60]!r}")
    return dict(zip(("memlock", "nofile", "nproc", "stack"), values))


def login_probe(node: Node) -> dict:
    """What `su -l nobody` really gets, reported next to the parse (not judged: PAM stacks differ)."""
    if not node.is_live or not node.probe_login:
        return {}
    out = node.run(PROBE_ARGV, timeout_s=5.0)
    if not out.ok:
        return {}
    try:
        return parse_probe(out.stdout)
    except LimitsParseError:
        return {}


def systemd_value(value: str, item: str) -> object:
    """systemd's LimitX syntax: N, N{K,M,G,T,P,E} (1024-based, memlock), infinity, or soft:hard (the soft side)."""
    number = limit_number(value.strip().split(":", 1)[0])
    if number is None:
        raise LimitsParseError(f"DefaultLimit{item}={value.strip()!r} is not a limit systemd accepts")
    return INFINITY if number == LIMIT_UNLIMITED else number


def systemd_conf_texts(node: Node) -> list:
    texts = [node.read(SYSTEMD_CONF_FILE) or ""]
    chosen: dict = {}
    for directory in SYSTEMD_CONF_DIRS:  # later directories override same-named drop-ins
        for name in node.listdir(directory):
            if name.endswith(".conf"):
                chosen[name] = f"{directory}/{name}"
    texts.extend(node.read(chosen[name]) or "" for name in sorted(chosen))
    return texts


def parse_systemctl_show(text: str) -> dict:
    values = {}
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    if not values:
        raise LimitsParseError("systemctl show printed no properties")
    return values


def running_manager(node: Node) -> Optional[dict]:
    """The running systemd's DefaultLimit* (soft values), None when there is no systemd to ask."""
    if not node.is_live:
        return None
    argv = ["systemctl", "show"]
    for item in SYSTEMD_ITEMS.values():
        argv += ["-p", f"DefaultLimit{item}", "-p", f"DefaultLimit{item}Soft"]
    out = node.run(argv, timeout_s=5.0)
    if not out.ok:
        return None
    shown = parse_systemctl_show(out.stdout)
    return {item: shown.get(f"DefaultLimit{item}Soft") or shown.get(f"DefaultLimit{item}")
            for item in SYSTEMD_ITEMS.values()}


def judge_systemd(key: str, expected: object, configured: object, running: object):
    check_id = f"limits.{key}"
    variable = f"limits_{key}"
    observed = {"configured": show(configured)}
    if running is not None:
        observed["running manager"] = show(running)
    if direction_of(f"limits.{key}") == AT_LEAST and configured is not None and configured != expected \
            and at_or_above(configured, expected) and running in (None, configured):
        return result(check_id, ROLE, Status.PASS, expected, observed,
                      f"{show(configured)} is above the recommended {expected}: kept")
    if configured != expected and not (configured is None and running == expected):
        setting = f"DefaultLimit{key.split('_')[1].upper()}"
        found = f"sets {setting}={configured}" if configured is not None else f"does not set {setting}"
        return result(check_id, ROLE, Status.FAIL, expected, observed,
                      f"system.conf(.d) {found}, the desired state says {expected}", variable)
    if running is not None and running != expected:
        return result(check_id, ROLE, Status.FAIL, expected, observed,
                      f"configured {expected} but the running systemd uses {running}: "
                      "run `systemctl daemon-reexec`", variable)
    return result(check_id, ROLE, Status.PASS, expected, observed)


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, "limits")
    if disabled:
        return [disabled]
    wanted = section(spec, ROLE)
    nr_open = node.read_int("/proc/sys/fs/nr_open")
    entries = [e for _, text in limits_files(node) for e in parse_limits_lines(text)]
    group = str(wanted.get("group") or "*")
    everyone, root = effective(entries, "nobody", nr_open), effective(entries, "root", nr_open)
    members = everyone if group == "*" else effective(entries, "nobody", nr_open, (group,))
    probe = login_probe(node)
    results = []
    for item in PAM_ITEMS:
        if wanted.get(item) in (None, ""):
            results.append(skip(f"limits.login.{item}", ROLE, f"limits_{item} is not set"))
            continue
        expected = normalize(wanted[item], item, nr_open)
        if item in EVERYONE_ITEMS or group == "*":
            results.append(judge_login(item, expected, everyone[item], root[item], probe.get(item)))
        else:  # su -l nobody is no member of the group: its probe says nothing here
            results.append(judge_login(item, expected, members[item], root[item], None, f"members of @{group}"))
    configured = parse_systemd_conf(systemd_conf_texts(node))
    running = running_manager(node)
    for key, item in SYSTEMD_ITEMS.items():
        if wanted.get(key) in (None, ""):
            results.append(skip(f"limits.{key}", ROLE, f"limits_{key} is not set"))
            continue
        expected = systemd_value(str(wanted[key]), item)
        have = systemd_value(configured[item], item) if item in configured else None
        live = systemd_value(running[item], item) if running and running.get(item) else None
        results.append(judge_systemd(key, expected, have, live))
    return results
