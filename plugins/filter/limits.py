"""Filters for the limits role: check each limit before it reaches limits.d or system.conf.d."""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

SYSTEMD_VALUE = re.compile(r"(infinity|\d+)(:(infinity|\d+))?")


def limits_pam_value(value: object, name: str, unlimited_ok: bool = True, ceiling: object = None) -> str:
    """A pam_limits value: a whole number, or 'unlimited' where the kernel allows it.

    nofile cannot be unlimited and must not exceed fs.nr_open: pam_limits then fails the
    whole login session, which locks users (and ssh) out of the node.
    """
    if isinstance(value, bool):
        raise AnsibleFilterError(f"{name}: {value!r} is a boolean; use a number or 'unlimited'")
    text = str(value).strip()
    if text in ("unlimited", "infinity", "-1"):
        if not unlimited_ok:
            raise AnsibleFilterError(f"{name}: {text!r} is not allowed; give a number (at most fs.nr_open)")
        return "unlimited"
    if not text.isdigit():
        raise AnsibleFilterError(f"{name}: {value!r} is not a whole number or 'unlimited'")
    if ceiling is not None and str(ceiling).strip().isdigit() and int(text) > int(str(ceiling).strip()):
        raise AnsibleFilterError(
            f"{name}: {text} is above this node's fs.nr_open ({str(ceiling).strip()}); logins would fail"
        )
    return text


def limits_systemd_value(value: object, name: str, ceiling: object = None) -> str:
    """A systemd DefaultLimit* value: N, 'infinity', or 'soft:hard'."""
    if isinstance(value, bool):
        raise AnsibleFilterError(f"{name}: {value!r} is a boolean; use a number, 'infinity' or 'soft:hard'")
    text = str(value).strip()
    if text in ("unlimited", "-1"):
        text = "infinity"
    match = SYSTEMD_VALUE.fullmatch(text)
    if not match:
        raise AnsibleFilterError(f"{name}: {value!r} is not a number, 'infinity' or 'soft:hard'")
    numbers = [int(part) for part in text.split(":") if part.isdigit()]
    if ":" in text and len(numbers) == 2 and numbers[0] > numbers[1]:
        raise AnsibleFilterError(f"{name}: soft limit {numbers[0]} is above hard limit {numbers[1]}")
    if ceiling is not None and str(ceiling).strip().isdigit() and any(n > int(str(ceiling).strip()) for n in numbers):
        raise AnsibleFilterError(f"{name}: {text} is above this node's fs.nr_open ({str(ceiling).strip()})")
    return text


class FilterModule:
    def filters(self) -> dict:
        return {"limits_pam_value": limits_pam_value, "limits_systemd_value": limits_systemd_value}
