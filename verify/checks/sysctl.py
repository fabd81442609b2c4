"""sysctl keys: /proc/sys/<key with dots as slashes> against sysctl_settings (+ extra)."""
from __future__ import annotations

from verify.checks.common import error, result, role_disabled, section, skip
from verify.kernel_rules import EXACT, compare, direction_of, normalise_value, sysctl_key_problem, sysctl_path
from verify.node import Node
from verify.result import CheckResult, Status

ROLE = "sysctl"


# sysctl(8) accepts both separators; a key written with slashes keeps its dots (e.g. VLAN names).
key_path = sysctl_path
# Multi-value keys (tcp_rmem) read back tab-separated; compare words, not whitespace.
normalize = normalise_value


def judge(key: str, expected: object, observed: object, direction: str = EXACT) -> CheckResult:
    """PASS when the node has the value, or is past it the way the key's direction allows (the
    roles keep such a value: issue 26, never de-tune); FAIL otherwise."""
    check_id = f"sysctl.{key}"
    variable = f"sysctl_settings['{key}']"
    if observed is None:
        return error(check_id, ROLE, f"{key_path(key)} does not exist: this kernel has no key {key}", expected)
    verdict = compare(direction, observed, expected)
    if verdict == "same":
        return result(check_id, ROLE, Status.PASS, normalize(expected), normalize(observed))
    if verdict == "better":
        side = "above" if direction == "at_least" else "below"
        return result(check_id, ROLE, Status.PASS, normalize(expected), normalize(observed),
                      f"{normalize(observed)} is {side} the recommended {normalize(expected)}: kept "
                      f"({key} is {direction}; list it in sysctl_exact_keys to force the recommendation)")
    if direction != EXACT:
        side = "below" if direction == "at_least" else "above"
        return result(
            check_id, ROLE, Status.FAIL, normalize(expected), normalize(observed),
            f"{key} is {normalize(observed)}, {side} the recommended {normalize(expected)} ({direction})", variable,
        )
    return result(
        check_id, ROLE, Status.FAIL, normalize(expected), normalize(observed),
        f"{key} is {normalize(observed)}, the desired state says {normalize(expected)}", variable,
    )


def run(spec: dict, node: Node) -> list:
    wanted = section(spec, ROLE)
    disabled = role_disabled(spec, ROLE, "sysctl")
    if disabled:
        return [disabled]
    settings = wanted.get("settings") or {}
    if not isinstance(settings, dict):
        return [error("sysctl", ROLE, "sysctl.settings in the desired state is not a mapping")]
    skip_keys = set(wanted.get("skip_keys") or [])
    exact_keys = wanted.get("exact_keys") or []
    if not isinstance(exact_keys, list):
        return [error("sysctl", ROLE, "sysctl.exact_keys in the desired state is not a list")]
    results = []
    for key in sorted(settings):
        if key in skip_keys:
            results.append(skip(f"sysctl.{key}", ROLE, f"{key} is in sysctl_skip_keys", normalize(settings[key])))
            continue
        problem = sysctl_key_problem(key)
        if problem:
            results.append(error(f"sysctl.{key}", ROLE, f"sysctl_settings[{key!r}]: {key!r} {problem}",
                                 normalize(settings[key])))
            continue
        results.append(judge(key, settings[key], node.read_value(key_path(key)),
                             direction_of(key, [str(k) for k in exact_keys])))
    if not results:
        results.append(skip("sysctl", ROLE, "sysctl_settings is empty: nothing to check"))
    return results
