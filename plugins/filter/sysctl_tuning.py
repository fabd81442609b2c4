# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""Filters for the sysctl role: key -> /proc/sys path, value validation, the effective settings."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import (
    direction_of,
    sysctl_key_problem,
    sysctl_path,
)


def sysctl_proc_path(key: str) -> str:
    # sysctl(8): a key with '/' uses '/' as the separator, so '.' inside an interface name ("eth0.100") stays literal.
    if sysctl_key_problem(key):
        raise AnsibleFilterError(f"sysctl key {key!r} is not a sysctl name (e.g. net.core.rmem_max)")
    return sysctl_path(key)


def sysctl_value_problems(settings: dict) -> list:
    """One line per key whose value the kernel could not take: booleans (YAML 'yes' is not 1), lists, None, floats."""
    problems = []
    for key, value in sorted((settings or {}).items(), key=lambda item: str(item[0])):
        if isinstance(value, bool):
            problems.append(f"{key}: {value!r} is a YAML boolean; write 1/0 (quote it if you mean a string)")
        elif not isinstance(value, (str, int)):
            problems.append(f"{key}: {value!r} is a {type(value).__name__}; a sysctl value is a string or an integer")
        elif isinstance(value, str) and (not value.strip() or "\n" in value):
            problems.append(f"{key}: {value!r} is empty or spans lines")
        if sysctl_key_problem(key):
            problems.append(f"{key!r}: not a sysctl name")
    return problems


def sysctl_effective(settings: dict, extra: dict, skip_keys: list) -> dict:
    """settings, then the user's extras over them, minus the keys this host must not touch."""
    merged = dict(settings or {})
    merged.update(extra or {})
    skipped = set(skip_keys or [])
    return {key: value for key, value in sorted(merged.items()) if key not in skipped}


def sysctl_setting_name(key: str, extra: dict) -> str:
    """What the user called a key, for messages: the variable that set it, and the key."""
    return f"{'sysctl_extra_settings' if key in (extra or {}) else 'sysctl_settings'}[{key!r}]"


def sysctl_live_values(settings: dict) -> dict:
    return {sysctl_proc_path(key): value for key, value in settings.items()}


def sysctl_directions(settings: dict, exact_keys: list) -> dict:
    """/proc/sys path -> at_least/at_most for the keys that may stay above (below) their value;
    keys in exact_keys (sysctl_exact_keys) and keys with no rule are left out: exact."""
    return {sysctl_proc_path(key): direction for key in settings
            for direction in [direction_of(key, exact_keys or [])] if direction != "exact"}


def sysctl_persisted(settings: dict) -> dict:
    """key -> /proc/sys path, in the drop-in's order: the module writes each line with the value in force."""
    return {key: sysctl_proc_path(key) for key in settings}


class FilterModule:
    def filters(self):
        return {
            "sysctl_proc_path": sysctl_proc_path,
            "sysctl_value_problems": sysctl_value_problems,
            "sysctl_effective": sysctl_effective,
            "sysctl_live_values": sysctl_live_values,
            "sysctl_setting_name": sysctl_setting_name,
            "sysctl_directions": sysctl_directions,
            "sysctl_persisted": sysctl_persisted,
        }
