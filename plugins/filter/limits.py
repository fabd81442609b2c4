"""Filters for the limits role: check each limit before it reaches limits.d or system.conf.d."""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import (
    AT_LEAST,
    LIMIT_UNLIMITED,
    direction_of,
    higher_limit,
    limit_number,
    pam_limit_in_force,
    parse_pam_limits,
)

# A limit is a 64-bit count: ASCII digits, at most 20 of them, matched before any int() (a 5000-digit value
# or a superscript digit, which str.isdigit() accepts, raised ValueError).
SYSTEMD_VALUE = re.compile(r"(infinity|[0-9]{1,20})(:(infinity|[0-9]{1,20}))?")
WHOLE = re.compile(r"[0-9]{1,20}")
MAX_VALUE_TEXT = 64


def _text(value: object, name: str, what: str) -> str:
    """The value as the filter reads it, refused by name when it cannot be one (a boolean, a huge number)."""
    if isinstance(value, bool):
        raise AnsibleFilterError(f"{name}: {value!r} is a boolean; use {what}")
    if isinstance(value, int) and not -1 <= value < 1 << 64:
        raise AnsibleFilterError(f"{name}: a number of {value.bit_length()} bits is not a limit; use {what}")
    text = value if isinstance(value, str) else str(value) if isinstance(value, (int, float)) else None
    if text is None or len(text) > MAX_VALUE_TEXT:
        raise AnsibleFilterError(f"{name}: {str(type(value).__name__)} value is not {what}")
    return text.strip()


def _ceiling(ceiling: object) -> object:
    """fs.nr_open as a number, or None when unknown or not a whole number."""
    text = str(ceiling).strip() if isinstance(ceiling, (str, int)) and not isinstance(ceiling, bool) else ""
    return int(text) if WHOLE.fullmatch(text) else None


def limits_pam_value(value: object, name: str, unlimited_ok: bool = True, ceiling: object = None) -> str:
    """A pam_limits value: a whole number, or 'unlimited' where the kernel allows it.

    nofile cannot be unlimited and must not exceed fs.nr_open: pam_limits then fails the
    whole login session, which locks users (and ssh) out of the node.
    """
    text = _text(value, name, "a number or 'unlimited'")
    if text in ("unlimited", "infinity", "-1"):
        if not unlimited_ok:
            raise AnsibleFilterError(f"{name}: {text!r} is not allowed; give a number (at most fs.nr_open)")
        return "unlimited"
    if not WHOLE.fullmatch(text):
        raise AnsibleFilterError(f"{name}: {text!r} is not a whole number or 'unlimited'")
    most = _ceiling(ceiling)
    if most is not None and int(text) > most:
        raise AnsibleFilterError(f"{name}: {text} is above this node's fs.nr_open ({most}); logins would fail")
    return text


def limits_systemd_value(value: object, name: str, ceiling: object = None) -> str:
    """A systemd DefaultLimit* value: N, 'infinity', or 'soft:hard'."""
    text = _text(value, name, "a number, 'infinity' or 'soft:hard'")
    if text in ("unlimited", "-1"):
        text = "infinity"
    match = SYSTEMD_VALUE.fullmatch(text)
    if not match:
        raise AnsibleFilterError(f"{name}: {text!r} is not a number, 'infinity' or 'soft:hard'")
    numbers = [int(part) for part in text.split(":") if WHOLE.fullmatch(part)]
    if ":" in text and len(numbers) == 2 and numbers[0] > numbers[1]:
        raise AnsibleFilterError(f"{name}: soft limit {numbers[0]} is above hard limit {numbers[1]}")
    most = _ceiling(ceiling)
    if most is not None and any(n > most for n in numbers):
        raise AnsibleFilterError(f"{name}: {text} is above this node's fs.nr_open ({most})")
    return text


def _above(have: object, wanted: object) -> bool:
    have_number, wanted_number = limit_number(have), limit_number(wanted)
    return None not in (have_number, wanted_number) and have_number != wanted_number \
        and higher_limit(have_number, wanted_number) == have_number


def _file_entries(read: object, section: str, own_file: str) -> list:
    entries = (read or {}).get(section) or [] if isinstance(read, dict) else []
    return [entry for entry in entries if entry and entry[0] != own_file]


def limits_keep_higher_pam(rendered: str, read: object, own_file: str) -> str:
    """The rendered pam_limits drop-in with each at_least line raised to what the node's other files give
    the same domain (preflight's tunefleet_node.limits), so the drop-in never lowers a limit; a comment
    above each line kept says from where, so --diff shows it."""
    entries = _file_entries(read, "pam", own_file)
    lines = []
    for line in rendered.splitlines():
        parsed = parse_pam_limits(line)
        if not parsed or line.lstrip().startswith("#"):
            lines.append(line)
            continue
        domain, kind, item, wanted = parsed[0]
        found = pam_limit_in_force(entries, domain, kind, item)
        if found and direction_of(f"limits.{item}") == AT_LEAST and _above(found[0], wanted):
            lines.append(f"# {domain} {kind} {item}: {found[0]} from {found[1]} is above the recommended {wanted}: "
                         "kept (at_least)")
            line = f"{domain:<5} {kind:<4} {item:<8} {found[0]}"
        lines.append(line)
    return "\n".join(lines) + ("\n" if rendered.endswith("\n") else "")


def _sides(value: str) -> tuple:
    soft, _, hard = value.partition(":")
    return limit_number(soft), limit_number(hard or soft)


def _systemd_word(number: object) -> str:
    return "infinity" if number == LIMIT_UNLIMITED else str(number)


def limits_keep_higher_systemd(rendered: str, read: object, own_file: str) -> str:
    """The rendered system.conf.d drop-in with each DefaultLimit* at_least value raised, side by side
    (soft:hard), to what system.conf and the other drop-ins set (the last one systemd reads wins)."""
    in_force = {item: (value, path) for path, item, value in _file_entries(read, "systemd", own_file)}
    lines = []
    for line in rendered.splitlines():
        key, equals, wanted = line.partition("=")
        item = key.strip()[len("DefaultLimit"):] if key.strip().startswith("DefaultLimit") and equals else ""
        name = f"limits.systemd_{item.lower()}"
        if item in in_force and direction_of(name) == AT_LEAST:
            have, path = in_force[item]
            mine, theirs = _sides(wanted.strip()), _sides(have)
            if None not in mine + theirs:
                kept = tuple(higher_limit(a, b) for a, b in zip(mine, theirs))
                if kept != mine:
                    value = _systemd_word(kept[0]) if kept[0] == kept[1] else ":".join(map(_systemd_word, kept))
                    lines.append(f"# DefaultLimit{item}: {have} from {path} is above the recommended "
                                 f"{wanted.strip()}: kept (at_least)")
                    line = f"{key}={value}"
        lines.append(line)
    return "\n".join(lines) + ("\n" if rendered.endswith("\n") else "")


class FilterModule:
    def filters(self) -> dict:
        return {"limits_pam_value": limits_pam_value, "limits_systemd_value": limits_systemd_value,
                "limits_keep_higher_pam": limits_keep_higher_pam,
                "limits_keep_higher_systemd": limits_keep_higher_systemd}
